//! Memory server processes under running JVMs: killed with SIGKILL under JVMs that keep two copies of every
//! page on two servers: every run completes with the right checksum, no page is lost, and the
//! killed server, started again on its port, rejoins without the JVM restarting.
//!
//! `kill_nine_mid_run` does `MEMLINER_FAILOVER_RUNS` runs (default 4: graph and kv under G1
//! and Shenandoah once each); `soak` runs kv JVMs one after another for `MEMLINER_SOAK_SECS`
//! (default 60) while one server is killed and restarted every `MEMLINER_SOAK_RESTART_SECS`
//! (default 20). `scripts/soak.sh` runs both at length. `MEMLINER_FAILOVER_SEED` replays a
//! run's random moments (each test prints its seed).
//!
//! The same kill under JVMs paging one-sidedly to memory files (`unix://` servers), and a
//! single such server killed under a JVM.
//!
//! Also: a server down at start; faults injected into one of two servers (`relay`): wrong
//! bytes, a slow link, a reply cut short; a server stopped (SIGSTOP) with one copy and with
//! two; a server's metrics scraped while a JVM pages to it; and Spark executors (local-cluster,
//! PySpark from target/spark-venv) paging to one server.
//!
//! Needs `cargo build --release --workspace` first; `scripts/test.sh` does both.

use memliner_contracts::metrics::jvm;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use memliner_cli::locate;
use memliner_cli::run::{launch, RunConfig, RunOutcome};
use memliner_cli::workloads::{self, Workload};
use memliner_contracts::stats::StatsDoc;
use swap_backend::memfile::MemfileStore;
use swap_backend::replica::ReplicationStats;
use swap_backend::{ClientOptions, TcpStore};

mod netns;
mod relay;
use relay::{Fault, Relay};

const HEAP: &str = "32m";

fn env_number(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{key}={v}: not a number"))
        })
        .unwrap_or(default)
}

/// xorshift64*, seeded from the clock unless `MEMLINER_FAILOVER_SEED` says.
struct Rng(u64);

impl Rng {
    fn new(what: &str) -> Rng {
        let seed = env_number(
            "MEMLINER_FAILOVER_SEED",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1,
        );
        eprintln!("{what}: MEMLINER_FAILOVER_SEED={seed}");
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A duration uniformly between `lo` and `hi`.
    fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        lo + Duration::from_micros(self.next() % (hi - lo).as_micros().max(1) as u64)
    }
}

fn memliner() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memliner"))
}

/// A client of a running server that holds nothing, to read the server's figures.
enum Probe {
    Tcp(TcpStore),
    Unix(Box<MemfileStore>),
}

impl Probe {
    fn connect(scheme: &str, host: &str, port: u16, token: &str) -> Option<Probe> {
        let options = ClientOptions {
            namespace: "failover-probe".into(),
            connections: 1,
            token: token.into(),
            ..Default::default()
        };
        match scheme {
            "unix" => MemfileStore::connect(host, options)
                .ok()
                .map(|s| Probe::Unix(Box::new(s))),
            _ => TcpStore::connect(&format!("{host}:{port}"), options)
                .ok()
                .map(Probe::Tcp),
        }
    }

    fn server_stats(
        &self,
    ) -> Result<swap_backend::protocol::ServerStats, swap_backend::StoreError> {
        match self {
            Probe::Tcp(p) => p.server_stats(),
            Probe::Unix(p) => p.server_stats(),
        }
    }

    fn pages(&self) -> u64 {
        self.server_stats().map_or(0, |s| s.pages_stored)
    }
}

/// A `memliner server` process on a port (or socket) of its own, started again on the same
/// one after a kill, as an operator's supervisor would.
struct Server {
    /// `tcp`, `fabric` (one-sided reads and writes; the port serves TCP clients too), or
    /// `unix` (one-sided in memory files; `host` is the socket's path).
    scheme: &'static str,
    /// Where it listens: loopback, the far end of a namespace's link, or a socket path.
    host: String,
    port: u16,
    /// `ip netns exec NAME` for a server in a namespace of its own.
    wrapper: Vec<String>,
    /// Options beyond the listener and capacity (`--metrics ADDR`), kept for restarts.
    extra: Vec<String>,
    child: Child,
    probe: Probe,
    starts: u32,
}

impl Server {
    fn start() -> Server {
        Server::start_with(&[])
    }

    fn start_with(extra: &[&str]) -> Server {
        Server::launch("tcp", "127.0.0.1", Vec::new(), extra)
    }

    /// A `fabric://` server on loopback (libfabric's tcp provider here).
    fn start_fabric() -> Server {
        Server::launch("fabric", "127.0.0.1", Vec::new(), &[])
    }

    /// A `unix://` server on a socket in the test's directory.
    fn start_unix() -> Server {
        static N: AtomicU64 = AtomicU64::new(0);
        let path = temp(&format!(
            "server-{}.sock",
            N.fetch_add(1, Ordering::Relaxed)
        ));
        Server::launch("unix", path.to_str().unwrap(), Vec::new(), &[])
    }

    /// A server in `net`, reached over its link; one off loopback wants a token, the one in
    /// `NETNS_TOKEN` (`token_file=` for the JVM).
    fn start_in(net: &netns::Netns) -> Server {
        let wrapper = ["ip", "netns", "exec", &net.name]
            .map(String::from)
            .to_vec();
        let token = netns_token();
        Server::launch(
            "tcp",
            &net.addr,
            wrapper,
            &["--token-file", token.to_str().unwrap()],
        )
    }

    fn launch(scheme: &'static str, host: &str, wrapper: Vec<String>, extra: &[&str]) -> Server {
        let port = if scheme == "unix" {
            0
        } else {
            free_addr().port()
        };
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let (child, probe) = Server::spawn(scheme, host, port, &wrapper, &extra);
        Server {
            scheme,
            host: host.to_string(),
            port,
            wrapper,
            extra,
            child,
            probe,
            starts: 1,
        }
    }

    // The child is returned to a `Server`, whose drop waits for it.
    #[allow(clippy::zombie_processes)]
    fn spawn(
        scheme: &str,
        host: &str,
        port: u16,
        wrapper: &[String],
        extra: &[String],
    ) -> (Child, Probe) {
        let server = memliner();
        let mut cmd = match wrapper.split_first() {
            // `ip netns exec` execs the server: the child is the server itself.
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(server.get_program());
                c
            }
            None => server,
        };
        let listen = match scheme {
            "unix" => format!("unix://{host}"),
            _ => format!("{scheme}://{host}:{port}"),
        };
        let mut child = cmd
            .args(["server", "--listen", &listen])
            .args(["--capacity", "2g"])
            .args(extra)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Up once it answers a hello (bounded by attempts, not by a sleep).
        let deadline = Instant::now() + Duration::from_secs(20);
        let token = if extra.iter().any(|a| a == "--token-file") {
            NETNS_TOKEN.into()
        } else {
            String::new()
        };
        loop {
            if let Some(p) = Probe::connect(scheme, host, port, &token) {
                return (child, p);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("server on {host}:{port} never came up");
            }
            std::thread::yield_now();
        }
    }

    fn url(&self) -> String {
        match self.scheme {
            "unix" => format!("unix://{}", self.host),
            _ => format!("{}://{}:{}", self.scheme, self.host, self.port),
        }
    }

    /// Pages the server holds for all its clients.
    fn pages(&self) -> u64 {
        self.probe.pages()
    }

    /// Empties the memory files the (`unix://`) server has handed out, as a broken server
    /// could, through its own descriptors (`/proc/PID/fd/N`): all but the newest, which may be
    /// on its way to the client (a client asks for a grant only once it mapped the last one).
    /// Returns how many.
    fn empty_memory_files(&mut self) -> usize {
        use std::os::unix::fs::MetadataExt;
        let fds = std::fs::read_dir(format!("/proc/{}/fd", self.child.id())).unwrap();
        let mut files: Vec<(u64, std::fs::File)> = fds
            .flatten()
            .filter(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|t| t.to_string_lossy().contains("memfd:memliner pages"))
            })
            .filter_map(|fd| {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(fd.path())
                    .ok()?;
                Some((f.metadata().ok()?.ino(), f))
            })
            .collect();
        files.sort_by_key(|(ino, _)| *ino);
        files.pop();
        files.iter().filter(|(_, f)| f.set_len(0).is_ok()).count()
    }

    fn kill_nine(&mut self) {
        self.child.kill().unwrap(); // SIGKILL
        self.child.wait().unwrap();
    }

    /// SIGSTOP: the process stops answering while its sockets stay open (a hung host, as far
    /// as its clients can tell).
    fn stop(&self) {
        Server::signal(&self.child, "-STOP");
    }

    fn cont(&self) {
        Server::signal(&self.child, "-CONT");
    }

    fn signal(child: &Child, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {}", child.id());
    }

    fn restart(&mut self) {
        (self.child, self.probe) = Server::spawn(
            self.scheme,
            &self.host,
            self.port,
            &self.wrapper,
            &self.extra,
        );
        self.starts += 1;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The token of servers off loopback (a test's own secret), and the file that holds it.
const NETNS_TOKEN: &str = "failover-test-token";

fn netns_token() -> std::path::PathBuf {
    let path = temp("token");
    std::fs::write(&path, NETNS_TOKEN).unwrap();
    path
}

/// A loopback address nothing listens on (now).
fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn command(w: Workload, gc: &str) -> Vec<String> {
    static CLASSES: OnceLock<std::path::PathBuf> = OnceLock::new();
    let classes = CLASSES
        .get_or_init(|| workloads::ensure_built(&locate::project_root().unwrap()).expect("javac"));
    let mut c = vec![
        locate::java().display().to_string(),
        format!("-XX:+Use{gc}GC"),
        format!("-Xms{HEAP}"),
        format!("-Xmx{HEAP}"),
        "-cp".into(),
        classes.display().to_string(),
        w.class().into(),
    ];
    // Long enough (15-25 s at 25% here) for a kill, a restart and a rejoin mid-run.
    let args: &[&str] = match w {
        Workload::Graph => &["--nodes", "30000", "--rounds", "12"],
        Workload::Kv => &["--keys", "60000", "--ops", "200000", "--capacity", "30000"],
        Workload::Index => &["--records", "60000", "--ops", "400000"],
    };
    c.extend(args.iter().map(|s| s.to_string()));
    c
}

/// The all-local checksum, without the agent.
fn reference(w: Workload) -> String {
    static R: OnceLock<std::sync::Mutex<Vec<(Workload, String)>>> = OnceLock::new();
    let all = R.get_or_init(Default::default);
    if let Some((_, c)) = all.lock().unwrap().iter().find(|(x, _)| *x == w) {
        return c.clone();
    }
    let cfg = RunConfig {
        agent: false,
        ..RunConfig::default()
    };
    let out = launch(&cfg, &command(w, "G1"), true).unwrap();
    let c = checksum(&out, "reference");
    all.lock().unwrap().push((w, c.clone()));
    c
}

fn checksum(out: &RunOutcome, what: &str) -> String {
    let r = workloads::parse_result(&out.stdout)
        .unwrap_or_else(|| panic!("{what}: no RESULT line\nstderr: {}", out.stderr));
    assert!(
        out.status.success(),
        "{what}: exit {}\nstderr: {}",
        out.status,
        out.stderr
    );
    assert_eq!(workloads::field(&r, "verified"), Some("true"), "{what}");
    workloads::field(&r, "checksum").unwrap().to_string()
}

/// Starts `w` under `gc` at 25% local with two copies of each page on `servers`.
fn start_jvm(
    w: Workload,
    gc: &str,
    servers: &[&Server],
    stats: std::path::PathBuf,
) -> std::thread::JoinHandle<RunOutcome> {
    start_jvm_with(w, gc, servers, stats, |_| {})
}

/// As `start_jvm`, with `options` changed as `f` says.
fn start_jvm_with(
    w: Workload,
    gc: &str,
    servers: &[&Server],
    stats: std::path::PathBuf,
    f: impl FnOnce(&mut memliner_contracts::options::Options),
) -> std::thread::JoinHandle<RunOutcome> {
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let cfg = paged_to(&urls.join("+"), stats, f);
    let cmd = command(w, gc);
    std::thread::spawn(move || launch(&cfg, &cmd, true).unwrap())
}

/// A run at 25% local paging to `urls` (two copies of each page where two are given), its
/// stats written to `stats`, its options changed as `f` says.
fn paged_to(
    urls: &str,
    stats: std::path::PathBuf,
    f: impl FnOnce(&mut memliner_contracts::options::Options),
) -> RunConfig {
    RunConfig::default()
        .local(25)
        .servers(urls)
        .unwrap()
        .with(|o| {
            o.stats = Some(stats.display().to_string());
            f(o);
        })
}

/// kv (G1) run to its end with the relay's server first and `other` second.
fn kv_behind(
    relay: &Relay,
    other: &Server,
    stats: &str,
    f: impl FnOnce(&mut memliner_contracts::options::Options),
) -> RunOutcome {
    let cfg = paged_to(
        &format!("tcp://{}+{}", relay.addr, other.url()),
        temp(stats),
        f,
    );
    launch(&cfg, &command(Workload::Kv, "G1"), true).unwrap()
}

/// Checks a finished run: right checksum, no page lost; returns its replication figures.
fn check_run(out: &RunOutcome, w: Workload, what: &str) -> ReplicationStats {
    assert_eq!(checksum(out, what), reference(w), "{what}: checksum");
    let stats: &StatsDoc = out.stats.as_ref().unwrap_or_else(|| {
        panic!(
            "{what}: no stats written ({}); stderr:\n{}",
            out.status, out.stderr
        )
    });
    let r = stats
        .pager
        .as_ref()
        .and_then(|p| p.replication.clone())
        .unwrap_or_else(|| panic!("{what}: no replication figures"));
    assert_eq!(r.replicas, 2, "{what}");
    assert_eq!(r.pages_lost, 0, "{what}: pages lost: {r:?}");
    r
}

fn temp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("memliner-failover-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn kill_nine_mid_run() {
    let runs = env_number("MEMLINER_FAILOVER_RUNS", 4);
    let mut rng = Rng::new("kill_nine_mid_run");
    let cells: Vec<(Workload, &str)> = [Workload::Graph, Workload::Kv]
        .into_iter()
        .flat_map(|w| ["G1", "Shenandoah"].map(|gc| (w, gc)))
        .collect();
    kill_nine_runs([Server::start(), Server::start()], &cells, runs, &mut rng);
}

/// One-sided pages in memory files: the server's death is seen on its session's socket, the
/// JVM fails over and the restarted server rejoins, as over TCP.
#[test]
fn kill_nine_of_a_unix_server_mid_run() {
    let mut rng = Rng::new("kill_nine_of_a_unix_server_mid_run");
    let servers = [Server::start_unix(), Server::start_unix()];
    kill_nine_runs(servers, &[(Workload::Graph, "G1")], 1, &mut rng);
}

/// `runs` runs of `cells` in turn, each with one of `servers` (chosen at random) killed with
/// SIGKILL at a random moment and started again: checksum right, no page lost, rejoined.
fn kill_nine_runs(mut servers: [Server; 2], cells: &[(Workload, &str)], runs: u64, rng: &mut Rng) {
    let (mut done, mut attempts) = (0u64, 0u64);
    while done < runs {
        attempts += 1;
        assert!(
            attempts <= runs * 3,
            "too many runs ended before their kill or the restarted server's rejoin"
        );
        let (w, gc) = cells[(done % cells.len() as u64) as usize];
        let victim = (rng.next() % 2) as usize;
        let what = format!(
            "run {} ({} {gc}, kill -9 of {} server {victim})",
            done + 1,
            w.name(),
            servers[victim].scheme
        );
        let before = [servers[0].pages(), servers[1].pages()];
        let jvm = start_jvm(w, gc, &[&servers[0], &servers[1]], temp("kill.json"));
        // A random moment once the JVM depends on both servers, early enough that the
        // restarted server can rejoin before a run of about 5 s ends.
        let at = Instant::now() + rng.between(Duration::from_millis(500), Duration::from_secs(3));
        while servers[victim].pages() <= before[victim] || Instant::now() < at {
            if jvm.is_finished() {
                break;
            }
            std::thread::yield_now();
        }
        if jvm.is_finished() {
            eprintln!("{what}: the JVM finished before its kill; not counted");
            continue;
        }
        let held = servers[victim].pages();
        servers[victim].kill_nine();
        let t = Instant::now();
        std::thread::sleep(rng.between(Duration::from_millis(200), Duration::from_secs(1)));
        servers[victim].restart();
        // Rejoined: the restarted server holds the JVM's copies again, while it runs.
        while servers[victim].pages() == 0 && !jvm.is_finished() {
            std::thread::yield_now();
        }
        let rejoined_after = t.elapsed();
        let back = servers[victim].pages() > 0;
        let out = jvm.join().unwrap();
        let r = check_run(&out, w, &what);
        if !back && r.servers[victim].rejoins == 0 {
            // The run ended on the other server's copies before the rejoin could happen:
            // right and lossless (checked above), but it says nothing about rejoining.
            eprintln!("{what}: the JVM finished before the server rejoined; not counted");
            continue;
        }
        let s = &r.servers[victim];
        assert!(
            s.losses == 1 && s.rejoins == 1 && r.servers.iter().all(|s| s.up),
            "{what}: the server did not rejoin: {r:?}\nstderr: {}",
            out.stderr
        );
        eprintln!(
            "{what}: killed holding {held} pages; back with copies after {:.1} s; {} pages copied again, {} reads failed over, 0 lost; wall {:.1} s",
            rejoined_after.as_secs_f64(),
            r.pages_recopied,
            r.reads_failed_over,
            out.wall.as_secs_f64()
        );
        done += 1;
    }
}

#[test]
fn soak() {
    let secs = env_number("MEMLINER_SOAK_SECS", 60);
    let every = Duration::from_secs(env_number("MEMLINER_SOAK_RESTART_SECS", 20));
    let mut rng = Rng::new("soak");
    let first = Server::start();
    let second = std::sync::Mutex::new(Server::start());
    let (a_url, b_url) = (first.url(), second.lock().unwrap().url());
    let stop = AtomicBool::new(false);
    let restarts = AtomicU64::new(0);
    let end = Instant::now() + Duration::from_secs(secs);
    let (mut runs, mut losses, mut rejoins, mut recopied) = (0u64, 0u64, 0u64, 0u64);
    std::thread::scope(|s| {
        // One of the two servers, killed and started again every `every`, whatever the JVMs
        // are doing at the time.
        let mut rng = Rng(rng.next() | 1);
        let (stop, restarts, second) = (&stop, &restarts, &second);
        s.spawn(move || {
            let mut next = Instant::now() + every;
            while !stop.load(Ordering::SeqCst) {
                if Instant::now() < next {
                    std::thread::sleep(Duration::from_millis(50).min(next - Instant::now()));
                    continue;
                }
                let mut b = second.lock().unwrap();
                b.kill_nine();
                std::thread::sleep(rng.between(Duration::from_millis(200), Duration::from_secs(2)));
                b.restart();
                drop(b);
                restarts.fetch_add(1, Ordering::SeqCst);
                next = Instant::now() + every;
            }
        });
        while Instant::now() < end {
            let gc = if runs % 2 == 0 { "G1" } else { "Shenandoah" };
            let cfg = RunConfig::default()
                .local(25)
                .servers(&format!("{a_url}+{b_url}"))
                .unwrap()
                .with(|o| o.stats = Some(temp("soak.json").display().to_string()));
            let out = launch(&cfg, &command(Workload::Kv, gc), true).unwrap();
            let r = check_run(
                &out,
                Workload::Kv,
                &format!("soak run {} (kv {gc})", runs + 1),
            );
            losses += r.servers[1].losses;
            rejoins += r.servers[1].rejoins;
            recopied += r.pages_recopied;
            runs += 1;
        }
        stop.store(true, Ordering::SeqCst);
    });
    let restarts = restarts.load(Ordering::SeqCst);
    eprintln!(
        "soak: {secs} s, {runs} kv runs (checksums right, 0 pages lost), {restarts} restarts of {b_url}; the JVMs saw {losses} losses and {rejoins} rejoins, copied {recopied} pages again"
    );
    assert!(restarts >= 1 && losses >= 1, "the soak never met a restart");
}

#[test]
fn a_server_down_at_start_is_reported_and_the_jvm_runs_on_the_other() {
    let up = Server::start();
    // Ports nothing listens on.
    let (dead, dead_too) = (free_addr(), free_addr());
    let target = temp("down-at-start.metrics.json");
    let _ = std::fs::remove_file(&target);
    let cfg = RunConfig::default()
        .local(25)
        .servers(&format!("{}+tcp://{dead}", up.url()))
        .unwrap()
        .with(|o| {
            o.metrics = Some("127.0.0.1:0".parse().unwrap());
            o.metrics_file = Some(target.display().to_string());
        });
    let run = cfg.clone();
    let jvm = std::thread::spawn(move || launch(&run, &command(Workload::Kv, "G1"), true).unwrap());
    // While it runs, its /metrics shows one server up and one down.
    let mut page = None;
    while !jvm.is_finished() && page.is_none() {
        let addr = memliner_contracts::targets::TargetGroup::read(&target)
            .and_then(|g| g.addr().map(str::to_string));
        page = addr
            .and_then(|a| memliner_cli::scrape::get(&a, Duration::from_secs(5)).ok())
            .filter(|p| p.find(jvm::SERVER_UP, &[]).count() == 2);
        std::thread::yield_now();
    }
    let out = jvm.join().unwrap();
    let page = page.expect("the JVM's /metrics showed its servers while it ran");
    let up_url = up.url();
    let dead_url = format!("tcp://{dead}");
    assert_eq!(
        page.value(jvm::SERVER_UP, &[("server", &up_url)]),
        Some(1.0)
    );
    assert_eq!(
        page.value(jvm::SERVER_UP, &[("server", &dead_url)]),
        Some(0.0)
    );
    assert_eq!(page.value(jvm::REPLICAS, &[]), Some(2.0));
    // The families of a replicated store and of checksums (on by default), as the contracts
    // name them; cli/tests/observing.rs scrapes the others.
    for family in jvm::REPLICATED.iter().chain(jvm::INTEGRITY) {
        assert!(page.find(family, &[]).next().is_some(), "no {family}");
    }
    assert_eq!(page.value(jvm::PAGES_LOST_TOTAL, &[]), Some(0.0));
    assert!(
        out.stderr.contains(&format!(
            "cannot use memory server tcp://{dead}: memory server tcp://{dead}: Connection refused"
        )) && out
            .stderr
            .contains("starting on 1 of 2 servers and reconnecting"),
        "{}",
        out.stderr
    );
    let r = check_run(&out, Workload::Kv, "one server down at start");
    assert!(r.servers[0].up && !r.servers[1].up, "{r:?}");
    // Both down: the JVM does not start, and says why for each.
    let cfg = cfg
        .servers(&format!("tcp://{dead}+tcp://{dead_too}"))
        .unwrap();
    let out = launch(&cfg, &command(Workload::Kv, "G1"), true).unwrap();
    assert!(!out.status.success());
    assert!(out.stderr.contains("Connection refused"), "{}", out.stderr);
    assert!(!out.stdout.contains("RESULT"), "{}", out.stdout);
}

#[test]
fn wrong_bytes_from_a_server_are_caught_and_read_from_the_other_copy() {
    let (bad, good) = (Server::start(), Server::start());
    let relay = Relay::start(bad.port, Fault::Corrupt { every: 20 });
    let out = kv_behind(&relay, &good, "corrupt.json", |_| {});
    let what = "kv behind a relay that flips bytes and puts other pages' bytes in";
    let r = check_run(&out, Workload::Kv, what);
    let (injected, foreign) = (relay.injected(), relay.foreign());
    let integrity = out
        .stats
        .as_ref()
        .and_then(|s| s.pager.as_ref())
        .and_then(|p| p.integrity.clone())
        .expect("integrity figures");
    assert!(
        injected > foreign && foreign > 0,
        "{what}: {injected} corruptions, {foreign} of them foreign bytes"
    );
    // The relay's server is caught. (Once in about ten runs, all under the whole suite's load,
    // one page also mismatched on the other server: not yet explained, see the notes.)
    assert!(
        integrity.mismatches > 0 && r.servers[0].mismatches > 0,
        "{what}: {injected} corruptions, {integrity:?}, {r:?}\nstderr: {}",
        out.stderr
    );
    assert!(integrity.pages_verified > 0);
    assert!(
        out.stderr
            .contains(&format!("memory server tcp://{}: page ", relay.addr)),
        "{}",
        out.stderr
    );
    eprintln!(
        "{what}: {injected} corruptions ({foreign} foreign bytes), {} pages caught ({} on the other server), {} read from the other copy, {} verified, wall {:.1} s",
        integrity.mismatches,
        r.servers[1].mismatches,
        r.reads_failed_over,
        integrity.pages_verified,
        out.wall.as_secs_f64()
    );
}

#[test]
fn a_slow_server_is_not_lost() {
    let (slow, other) = (Server::start(), Server::start());
    // 20-30 ms on each of its first 120 replies, two of them a second later still: half the
    // default deadline.
    let relay = Relay::start(
        slow.port,
        Fault::Delay {
            base: Duration::from_millis(20),
            jitter: Duration::from_millis(10),
            count: 120,
            spike_every: 60,
            spike: Duration::from_secs(1),
        },
    );
    let out = kv_behind(&relay, &other, "slow.json", |_| {});
    let what = "kv with one of two servers behind a slow link";
    let r = check_run(&out, Workload::Kv, what);
    assert_eq!(relay.injected(), 120, "{what}: replies delayed");
    assert!(relay.max_delay() >= Duration::from_secs(1));
    assert!(
        r.servers[0].losses == 0 && r.servers[0].up && !out.stderr.contains(" lost ("),
        "{what}: a slow server was taken for a dead one: {r:?}\nstderr: {}",
        out.stderr
    );
    eprintln!(
        "{what}: 120 replies delayed 20-30 ms (the longest {:.2} s), never lost, wall {:.1} s",
        relay.max_delay().as_secs_f64(),
        out.wall.as_secs_f64()
    );
}

#[test]
fn a_reply_cut_short_loses_the_server_at_the_deadline_and_the_run_finishes_on_the_other() {
    let (cut, other) = (Server::start(), Server::start());
    let relay = Relay::start(cut.port, Fault::CutShort { nth: 200 });
    let out = kv_behind(&relay, &other, "cut.json", |o| {
        o.deadline = Some(Duration::from_millis(500))
    });
    let what = "kv with a reply from one of two servers cut short";
    assert_eq!(relay.injected(), 1, "{what}: no reply was cut");
    lost_at_deadline(&out, &format!("tcp://{}", relay.addr), what);
}

/// Checks a run during which the first of its two servers went silent: right checksum, no
/// page lost, the server lost at the 500 ms deadline (said on stderr) and the other still up;
/// prints the figures.
fn lost_at_deadline(out: &RunOutcome, url: &str, what: &str) {
    let r = check_run(out, Workload::Kv, what);
    assert!(
        r.servers[0].losses >= 1 && r.servers[1].up,
        "{what}: {r:?}\nstderr: {}",
        out.stderr
    );
    let lost = out
        .stderr
        .lines()
        .find(|l| l.contains(&format!("memory server {url} lost (")))
        .unwrap_or_else(|| panic!("{what}: no loss reported\nstderr: {}", out.stderr));
    assert!(
        lost.contains("no answer within the 500ms deadline"),
        "{what}: {lost}"
    );
    eprintln!(
        "{what}: lost {}x, {} reads failed over, 0 pages lost, wall {:.1} s",
        r.servers[0].losses,
        r.reads_failed_over,
        out.wall.as_secs_f64()
    );
}

#[test]
fn a_silent_server_is_lost_at_the_deadline_and_the_run_finishes_on_the_other() {
    let servers = [Server::start(), Server::start()];
    let what = "kv with one of two servers stopped (SIGSTOP) mid-run";
    let before = servers[0].pages();
    let jvm = start_jvm_with(
        Workload::Kv,
        "G1",
        &[&servers[0], &servers[1]],
        temp("silent.json"),
        |o| o.deadline = Some(Duration::from_millis(500)),
    );
    // Once the JVM depends on it.
    while servers[0].pages() <= before && !jvm.is_finished() {
        std::thread::yield_now();
    }
    assert!(
        !jvm.is_finished(),
        "{what}: the JVM finished before the stop"
    );
    servers[0].stop();
    let out = jvm.join().unwrap();
    servers[0].cont();
    lost_at_deadline(&out, &servers[0].url(), what);
}

#[test]
fn a_server_whose_link_goes_down_is_lost_at_the_deadline_and_the_run_finishes_on_the_other() {
    let net = match netns::Netns::create() {
        Ok(n) => n,
        Err(why) => {
            swap_backend::conformance::skip("a pulled link (network namespace)", &why);
            return;
        }
    };
    let (far, near) = (Server::start_in(&net), Server::start());
    let what = "kv with the link to one of two servers pulled mid-run";
    let before = far.pages();
    let jvm = start_jvm_with(
        Workload::Kv,
        "G1",
        &[&far, &near],
        temp("pulled.json"),
        |o| {
            o.deadline = Some(Duration::from_millis(500));
            o.token_file = Some(netns_token().display().to_string());
        },
    );
    // Once the JVM depends on it.
    while far.pages() <= before && !jvm.is_finished() {
        std::thread::yield_now();
    }
    assert!(
        !jvm.is_finished(),
        "{what}: the JVM finished before the link went down"
    );
    net.link_down();
    let out = jvm.join().unwrap();
    lost_at_deadline(&out, &far.url(), what);
}

#[test]
fn a_single_unix_server_killed_stops_the_jvm_naming_the_page_and_the_server() {
    let mut server = Server::start_unix();
    let what = "kv with its only server (unix://) killed (SIGKILL) mid-run";
    let (fatal, _) = fatal_after(&mut server, what, |_| {}, Server::kill_nine);
    assert!(
        fatal.contains("closed this client's session") || fatal.contains("control channel lost"),
        "{fatal}"
    );
    eprintln!("{what}: {fatal}");
}

/// A server that empties the memory files under a running JVM (ours never does): the JVM
/// stops with a FATAL line naming the server and the page, not a crash in the agent's copy
/// (nor a silent death on one of the agent's threads). The newest file is left alone, as it
/// may be on its way; should it have been an older one (inode numbers are only roughly in
/// order), the client's size check stops the JVM instead, and the run is repeated.
#[test]
fn a_server_that_empties_its_memory_files_stops_the_jvm_naming_it() {
    let what = "kv with its only server (unix://) emptying its memory files mid-run";
    for attempt in 1..=3 {
        let mut server = Server::start_unix();
        let (fatal, _) = fatal_after(
            &mut server,
            what,
            |_| {},
            |s| {
                // Two grants at least: one to empty, the newest left alone.
                while s.pages() < 512 {
                    std::thread::yield_now();
                }
                assert!(s.empty_memory_files() > 0, "no memory file to empty");
            },
        );
        if fatal.contains("emptied a memory file this JVM still had pages in") {
            eprintln!("{what} (run {attempt}): {fatal}");
            return;
        }
        assert!(fatal.contains("holds 0 bytes, not the"), "{what}: {fatal}");
        eprintln!("{what} (run {attempt}): a grant on its way was emptied: {fatal}");
    }
    panic!("{what}: no copy from an emptied file in 3 runs");
}

/// kv at 25% local with `server` its only server (options changed as `f` says), `cut` done
/// to the server once the JVM depends on it: the JVM's FATAL line, which names a heap page and
/// the server (exit code 70), and how long after the cut the JVM ended.
fn fatal_after(
    server: &mut Server,
    what: &str,
    f: impl FnOnce(&mut memliner_contracts::options::Options),
    cut: impl FnOnce(&mut Server),
) -> (String, Duration) {
    let cfg = RunConfig::default()
        .local(25)
        .servers(&server.url())
        .unwrap()
        .with(f);
    let jvm = std::thread::spawn(move || launch(&cfg, &command(Workload::Kv, "G1"), true).unwrap());
    while server.pages() == 0 && !jvm.is_finished() {
        std::thread::yield_now();
    }
    assert!(
        !jvm.is_finished(),
        "{what}: the JVM finished before the cut"
    );
    cut(server);
    let at = Instant::now();
    let out = jvm.join().unwrap();
    let took = at.elapsed();
    assert_eq!(
        out.status.code(),
        Some(70),
        "{what}\nstderr: {}",
        out.stderr
    );
    let fatal = out
        .stderr
        .lines()
        .find(|l| l.contains("memliner: FATAL"))
        .unwrap_or_else(|| panic!("{what}: no FATAL line\nstderr: {}", out.stderr))
        .to_string();
    assert!(
        fatal.contains("heap page") && fatal.contains(&server.url()),
        "{fatal}"
    );
    (fatal, took)
}

#[test]
fn a_single_silent_server_stops_the_jvm_naming_the_page_and_the_server() {
    single_silent_server(Server::start());
}

#[test]
fn a_single_silent_fabric_server_stops_the_jvm_naming_the_page_and_the_server() {
    if swap_backend::conformance::libfabric_or_skip("a silent fabric:// server") {
        single_silent_server(Server::start_fabric());
    }
}

/// `server` stopped (SIGSTOP) under a JVM that keeps its pages there alone: the JVM ends at
/// the deadline with the FATAL line naming a page and the server.
fn single_silent_server(mut server: Server) {
    let what = format!(
        "kv with its only server ({}) stopped (SIGSTOP) mid-run",
        server.scheme
    );
    let (fatal, took) = fatal_after(
        &mut server,
        &what,
        |o| o.deadline = Some(Duration::from_millis(500)),
        |s| s.stop(),
    );
    server.cont();
    assert!(
        fatal.contains("no answer within the 500ms deadline"),
        "{fatal}"
    );
    eprintln!(
        "{what}: the JVM stopped {:.2} s after the server: {fatal}",
        took.as_secs_f64()
    );
}

/// The body of `GET /metrics` at `addr`, if it answers.
fn scrape(addr: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    Some(text.split_once("\r\n\r\n")?.1.to_string())
}

#[test]
fn metrics_are_scraped_while_a_jvm_pages() {
    let (listen, metrics) = (free_addr(), free_addr());
    let mut server = memliner()
        .args(["server", "--listen", &listen.to_string()])
        .args(["--metrics", &metrics.to_string()])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let metrics = metrics.to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    while scrape(&metrics).is_none() {
        assert!(Instant::now() < deadline, "no metrics listener");
        std::thread::yield_now();
    }
    let cfg = RunConfig::default()
        .local(25)
        .servers(&format!("tcp://{listen}"))
        .unwrap();
    let cmd = command(Workload::Kv, "G1");
    let jvm = std::thread::spawn(move || launch(&cfg, &cmd, true).unwrap());
    // While it runs, its namespace shows pages held and traffic.
    let held = |body: &str| -> u64 {
        body.lines()
            .filter(|l| l.starts_with("memliner_namespace_pages{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .max()
            .unwrap_or(0)
    };
    let written = |body: &str| -> u64 {
        body.lines()
            .filter(|l| l.starts_with("memliner_namespace_written_pages_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    // A namespace holds its granted one-sided slots from the start, before any page is
    // written: scraped until both show (or the JVM ends).
    let (mut seen, mut body) = (0, String::new());
    while !jvm.is_finished() && (seen == 0 || written(&body) == 0) {
        if let Some(b) = scrape(&metrics) {
            seen = seen.max(held(&b));
            body = b;
        }
        std::thread::yield_now();
    }
    let out = jvm.join().unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(checksum(&out, "kv with metrics"), reference(Workload::Kv));
    assert!(seen > 0, "no namespace held pages during the run:\n{body}");
    assert!(
        written(&body) > 0,
        "no page written during the run:\n{body}"
    );
    eprintln!("metrics: a namespace held {seen} pages when first scraped during the run");
}

/// `scripts/spark-job.py JOB ARGS...` with target/spark-venv's Python (`scripts/spark-setup.sh`),
/// the agent string in MEMLINER_AGENT_OPTS when given; `None` (and why) without PySpark, which
/// fails the test instead where MEMLINER_REQUIRE_SPARK is set (CI installs it).
fn spark_job(args: &[&str], agent: Option<&str>) -> Option<std::process::Output> {
    let root = locate::project_root().unwrap();
    let python = root.join("target/spark-venv/bin/python");
    if !python.exists() {
        let why = "no PySpark in target/spark-venv (scripts/spark-setup.sh installs it)";
        assert!(
            std::env::var_os("MEMLINER_REQUIRE_SPARK").is_none(),
            "{why}"
        );
        swap_backend::conformance::skip(&format!("spark job {args:?}"), why);
        return None;
    }
    let mut cmd = Command::new(python);
    cmd.arg(root.join("scripts/spark-job.py")).args(args);
    cmd.env_remove("MEMLINER_AGENT_OPTS");
    if let Some(a) = agent {
        cmd.env("MEMLINER_AGENT_OPTS", a);
    }
    Some(cmd.output().unwrap())
}

fn spark_checksum(out: &std::process::Output, what: &str) -> String {
    workloads::verified_checksum(out, what).unwrap_or_else(|e| panic!("{e}"))
}

/// `job` on two executor JVMs at 25% local, both paging to one standalone server: the
/// local-mode checksum, a stats file per executor with remote faults, and each executor's
/// traffic in the server's metrics under its own namespace.
fn executors_page_to_one_server(job: &str) {
    let Some(local) = spark_job(&[job], None) else {
        return;
    };
    let reference = spark_checksum(&local, &format!("{job}, local mode, no agent"));
    let metrics = free_addr().to_string();
    let server = Server::start_with(&["--metrics", &metrics]);
    let dir = temp(&format!("spark-executors-{job}"));
    let _ = std::fs::remove_dir_all(&dir);
    // young=keep: G1 sizes the young generation itself. Fitted to the budget (the default),
    // group-by's executors keep eden local and page nothing at 25%; this test is about two
    // executors' traffic reaching one server under their own namespaces.
    let agent = format!(
        "-agentpath:{}=server={},local=25%,young=keep,stats={}/",
        locate::agent().unwrap().display(),
        server.url(),
        dir.display()
    );
    let out = spark_job(
        &[job, "--executors", "2", "--executor-heap", "512m"],
        Some(&agent),
    )
    .unwrap();
    assert_eq!(
        spark_checksum(&out, &format!("{job} on 2 executors at 25% local")),
        reference
    );
    // Each executor wrote its own stats file, and each paged to the server.
    let (jvms, skipped) = memliner_cli::aggregate::load(std::slice::from_ref(&dir)).unwrap();
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_eq!(jvms.len(), 2, "one stats file per executor: {jvms:?}");
    // The executors' namespaces wait out the grace period: the server still shows each one's
    // traffic, under its host/pid.
    let body = scrape(&metrics).expect("metrics");
    let host = memliner_contracts::host_name();
    for j in &jvms {
        assert!(j.doc.faults.remote > 0, "{} never paged", j.name);
        let store = &j.doc.pager.as_ref().unwrap().store;
        assert_eq!(store, &server.url(), "{}", j.name);
        let pid = j.name.rsplit('-').next().unwrap();
        let written = body
            .lines()
            .filter(|l| l.starts_with("memliner_namespace_written_pages_total{"))
            .find(|l| l.contains(&format!("namespace=\"{host}/{pid}/")))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no namespace for executor {pid} in:\n{body}"));
        let pager = j.doc.pager.as_ref().unwrap();
        // The stats are written at VMDeath while the pager still runs: a write-back batch (64
        // pages by default; the reclaimer's and a few direct reclaimers') can reach the server
        // before the agent counts it, never after. CI saw 13 such pages.
        let in_flight = 8 * 64;
        let counted = pager.remote.pages_written;
        assert!(
            (counted..=counted + in_flight).contains(&written),
            "{}: the server saw {written} pages written, the agent counted {counted}",
            j.name
        );
    }
    // Two namespaces, one per executor (the probe's is the third).
    let namespaces = server.probe.server_stats().unwrap().namespaces;
    assert_eq!(namespaces, 3, "namespaces on the server");
    eprintln!("{}", memliner_cli::aggregate::table(&jvms));
}

#[test]
fn spark_groupby_executors_page_to_one_server() {
    executors_page_to_one_server("groupby");
}

#[test]
fn spark_pagerank_executors_page_to_one_server() {
    executors_page_to_one_server("pagerank");
}
