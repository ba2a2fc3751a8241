//! `memliner`: run a JVM with its heap in far memory, serve that memory, measure it.
//!
//! One function per subcommand; each takes its arguments as clap parsed and typed them (sizes,
//! durations, counts and shares are checked by their value parsers, so a bad one is clap's
//! one-line error naming the flag).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use memliner_cli::run::{launch, GcHooks, RunConfig, Transport};
use memliner_cli::{locate, summary, workloads};
use swap_backend::units;

#[derive(Parser, Debug)]
#[command(
    name = "memliner",
    version,
    about = "Far-memory paging for the Java heap"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run a JVM with the agent: `memliner run --local 25% -- java -Xmx4g -jar app.jar`.
    Run(RunArgs),
    /// Merge the stats of a job's JVMs (files, or directories of them as `stats=DIR/` writes
    /// them, or the pids of running JVMs, asked for their figures now by SIGQUIT): each JVM's
    /// faults, remote traffic, GC share and prefetch, and the total. Exit status: 0; 3 when a
    /// pid runs no memliner agent; 75 when its JVM does not page (yet): ask again; 2 otherwise.
    Stats(StatsArgs),
    /// A live view of every paged JVM on this host (and the memory servers they use):
    /// budget, resident, faults/s by thread class, remote MiB/s, fault latency, history.
    /// Keys: s sorts, up/down pick a JVM, enter shows it, q quits. JVMs are found by their
    /// agent and serve /metrics (metrics=0).
    Top(TopArgs),
    /// Serve memory to agents: `memliner server --listen tcp://127.0.0.1:7070 --capacity 8g`.
    Server(ServerArgs),
    /// Build the workloads and run one sized like a service (index, 1 GiB heap) all-local,
    /// paged by memliner at 31% local on the embedded server, and under kernel swap to zram
    /// with the same heap memory (where root, cgroup v1 and zram allow); compare the three
    Demo(DemoArgs),
    /// The benchmark harness (`memliner-bench`, built beside `memliner`): the policy matrix
    /// against kernel swap, with a report, CSV and plots. `memliner bench --help` lists its
    /// options.
    #[command(disable_help_flag = true)]
    Bench {
        /// The harness's arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Check that this machine can run the agent: kernel and userfaultfd, the agent, the JDK
    /// (version, collectors, GC hooks, heap discovery), the RDMA stack, memory servers.
    Doctor(DoctorArgs),
}

#[derive(Args, Debug)]
struct RunArgs {
    /// The agent's options (its option table: `contracts/src/options.rs`).
    #[command(flatten)]
    agent: memliner_cli::flags::AgentFlags,
    /// Refused: a token on the command line is readable by every user (/proc/PID/cmdline).
    #[arg(long, hide = true)]
    token: Option<String>,
    /// GC hooks of a patched JDK (scripts/build-jdk.sh): auto (on under policy memliner
    /// when the command's java is a patched build; the default), on, or off. The command's
    /// own -XX:[+-]MemLinerLineUp wins.
    #[arg(long, value_enum, default_value_t = GcHooks::Auto)]
    gc_hooks: GcHooks,
    /// Pass the -agentpath argument in this environment variable instead of on the command
    /// line, for launchers that start the JVM themselves (the Spark scripts read
    /// MEMLINER_AGENT_OPTS).
    #[arg(long, value_name = "VAR")]
    agent_env: Option<String>,
    /// How the JVM reaches the embedded server (without --server): auto (unix where this
    /// host hands out memory files, else tcp), unix (one-sided, memory files), tcp, or
    /// fabric (one-sided through libfabric).
    #[arg(long, value_enum, default_value_t = Transport::Auto)]
    transport: Transport,
    /// Do not print the summary.
    #[arg(long, short)]
    quiet: bool,
    /// The JVM command line.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

#[derive(Args, Debug)]
struct StatsArgs {
    /// Stats files, directories holding them, or pids of running JVMs with the agent.
    #[arg(required = true, value_name = "PATH|PID", value_parser = parse_source)]
    sources: Vec<memliner_cli::live::Source>,
    /// With one PID: a line every DURATION (1s, 500ms) until the JVM exits, as `jstat`
    /// does: remote faults/s, GC share, MiB/s in and out, resident, budget, p50/p99 remote
    /// fault latency. Read from the JVM's /metrics (metrics=); without it, by SIGQUIT.
    #[arg(long, value_name = "DURATION", value_parser = parse_positive)]
    every: Option<Duration>,
}

#[derive(Args, Debug)]
struct TopArgs {
    /// Refresh interval.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_positive)]
    every: Duration,
    /// A memory server's metrics address (`memliner server --metrics`), for its capacity
    /// and what it holds; give it again for more.
    #[arg(long, value_name = "HOST:PORT")]
    server_metrics: Vec<String>,
}

#[derive(Args, Debug)]
struct ServerArgs {
    /// URL to listen on, tcp://HOST:PORT (or HOST:PORT; port 0: any free port; loopback
    /// unless told otherwise), fabric://HOST:PORT (one-sided through libfabric), or
    /// unix:///PATH (one-sided in memory files, for JVMs on this host).
    #[arg(long, default_value = "tcp://127.0.0.1:7070")]
    listen: swap_backend::ListenUrl,
    /// Bytes of page storage for all clients together (512m, 8g).
    #[arg(long, default_value = "8g", value_parser = parse_capacity)]
    capacity: u64,
    /// Require clients to present the token in this file (else MEMLINER_TOKEN, if set); a
    /// listener other than loopback needs one.
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// Refused: a token on the command line is readable by every user (/proc/PID/cmdline).
    #[arg(long, hide = true)]
    token: Option<String>,
    /// How long a client's pages wait for it to reconnect after its last connection closed
    /// (30s, 5m; 0: freed at once).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = units::parse_duration)]
    grace: Duration,
    /// Most one client may hold (512m, 4g); default: only --capacity bounds it.
    #[arg(long, value_name = "SIZE", value_parser = parse_pages)]
    quota: Option<u64>,
    /// Most connections open at once, all clients together (more are refused).
    #[arg(long, value_name = "N", default_value = "512", value_parser = parse_count)]
    max_connections: usize,
    /// Most connections one client may open (a JVM opens one per fault handler, plus two).
    #[arg(long, value_name = "N", default_value = "64", value_parser = parse_count)]
    max_client_connections: usize,
    /// How long a new connection may take to say hello before it is closed.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_positive)]
    hello_deadline: Duration,
    /// Serve the counters (capacity, connections, and per namespace pages held, pages and
    /// bytes read and written, errors) in the Prometheus text format at
    /// http://ADDR/metrics (HOST:PORT, e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// Log every attach, detach and refusal, with the namespace and the peer's address.
    #[arg(long, short)]
    verbose: bool,
    /// Emulated latency: each reply leaves no sooner than this after its request arrived
    /// (3us, 1ms), for planning.
    #[arg(long, value_name = "DURATION", value_parser = units::parse_duration)]
    emulate_latency: Option<Duration>,
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Workload: index, kv or graph.
    #[arg(long, default_value = "index", value_parser = workloads::Workload::parse)]
    workload: workloads::Workload,
    /// Local budget of the paged run, in percent of the heap.
    #[arg(long, default_value = "31%", value_parser = parse_percent)]
    local: u32,
    /// Collector: G1, Parallel, Shenandoah, Serial.
    #[arg(long, default_value = "G1")]
    gc: String,
    /// Java heap, MiB.
    #[arg(long, default_value_t = 1024)]
    heap_mb: u64,
}

#[derive(Args, Debug)]
struct DoctorArgs {
    /// The java to check (default: $JAVA_HOME/bin/java, else java on PATH).
    #[arg(long)]
    java: Option<PathBuf>,
    /// A memory server to reach (URL; repeatable, or several joined by '+').
    #[arg(long, value_delimiter = '+')]
    server: Vec<swap_backend::ServerUrl>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Cmd::Run(a) => run(a),
        Cmd::Stats(a) => stats(a),
        Cmd::Top(a) => top(a),
        Cmd::Server(a) => server(a),
        Cmd::Demo(a) => demo(a),
        Cmd::Bench { args } => bench(&args),
        Cmd::Doctor(a) => doctor(a),
    }
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("memliner: {msg}");
    ExitCode::from(2)
}

/// `memliner run`: the JVM with the agent, its exit code, and a summary.
fn run(a: RunArgs) -> ExitCode {
    if a.token.is_some() {
        return fail("--token: a token on the command line is readable by every user (/proc/PID/cmdline), the JVM's too; put it in a file for --token-file, or in MEMLINER_TOKEN");
    }
    let options = match a.agent.options() {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    if options.server_given && a.transport != Transport::Auto {
        return fail("--transport is for the embedded server: give the server's URL (tcp://, fabric://HOST:PORT or unix:///PATH) to --server instead");
    }
    let cfg = RunConfig {
        agent: true,
        options,
        gc_hooks: a.gc_hooks,
        agent_env: a.agent_env,
        transport: a.transport,
        embedded_servers: 1,
    };
    match launch(&cfg, &a.command, false) {
        Ok(out) => {
            if !a.quiet {
                match &out.stats {
                    Some(s) => {
                        for l in summary::lines(s) {
                            eprintln!("memliner: {l}");
                        }
                    }
                    None => {
                        eprintln!("memliner: the JVM wrote no stats (it exited before VM death)")
                    }
                }
            }
            ExitCode::from(out.exit_code().clamp(0, 255) as u8)
        }
        Err(e) => fail(e),
    }
}

/// `memliner stats`: a job's documents merged, or one running JVM followed (`--every`).
fn stats(a: StatsArgs) -> ExitCode {
    if let Some(every) = a.every {
        let [memliner_cli::live::Source::Pid(pid)] = a.sources.as_slice() else {
            return fail("--every follows one running JVM: give its pid alone");
        };
        return match memliner_cli::watch::run(*pid, every, &mut std::io::stdout().lock()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("memliner: {e}");
                ExitCode::from(e.exit_code())
            }
        };
    }
    match memliner_cli::aggregate::gather(&a.sources) {
        Ok((jvms, notes)) => {
            for n in notes {
                eprintln!("memliner: {n}");
            }
            print!("{}", memliner_cli::aggregate::table(&jvms));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("memliner: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// `memliner top`: the live view.
fn top(a: TopArgs) -> ExitCode {
    match memliner_cli::top::run(a.every, &a.server_metrics) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// `memliner server`: serves until killed.
fn server(a: ServerArgs) -> ExitCode {
    if a.token.is_some() {
        return fail("--token: a token on the command line of a long-lived process is readable by every user (/proc/PID/cmdline); put it in a file for --token-file, or in MEMLINER_TOKEN");
    }
    let token = match swap_backend::auth::load_token(a.token_file.as_deref()) {
        Ok(t) => t,
        Err(e) => return fail(format!("--token-file: {e}")),
    };
    let latency = a.emulate_latency.filter(|d| !d.is_zero());
    let listen = a.listen.0;
    let cfg = memliner_server::ServerConfig {
        capacity_bytes: a.capacity,
        token,
        verbose: a.verbose,
        latency,
        fabric: listen.scheme == swap_backend::Scheme::Fabric,
        grace: a.grace,
        quota_pages: a.quota,
        limits: memliner_server::Limits {
            connections: a.max_connections,
            connections_per_client: a.max_client_connections,
            hello_deadline: a.hello_deadline,
        },
        metrics: a.metrics,
        fabric_provider: None,
    };
    let spawned = match listen.scheme {
        swap_backend::Scheme::Unix => {
            memliner_server::spawn_unix(std::path::Path::new(&listen.authority()), cfg)
        }
        _ => memliner_server::spawn(&listen.authority(), cfg),
    };
    let h = match spawned {
        Ok(h) => h,
        Err(e) => {
            let needs_token = e
                .get_ref()
                .is_some_and(|i| i.is::<memliner_server::TokenRequired>());
            let hint = if needs_token {
                " (--token-file PATH, or MEMLINER_TOKEN)"
            } else {
                ""
            };
            return fail(format!("cannot listen on {listen}: {e}{hint}"));
        }
    };
    eprintln!(
        "memliner-server: listening on {} with {} for pages{}{}{}{}",
        h.url(),
        units::format_size(a.capacity),
        h.fabric().map_or(String::new(), |(provider, port)| format!(
            ", registered for one-sided access (libfabric's {provider} provider, data endpoints on port {port})"
        )),
        if listen.scheme == swap_backend::Scheme::Unix {
            ", handed to clients on this host as memory files they read and write themselves (one-sided)"
        } else {
            ""
        },
        latency.map_or(String::new(), |l| format!(
            ", replies delayed to {} after each request (emulated latency)",
            units::format_duration(l)
        )),
        h.metrics_addr()
            .map_or(String::new(), |a| format!("; metrics at http://{a}/metrics"))
    );
    h.wait();
    ExitCode::SUCCESS
}

/// `memliner demo`: the main job, all-local, paged, and under kernel swap.
fn demo(a: DemoArgs) -> ExitCode {
    let d = memliner_cli::demo::Demo {
        workload: a.workload,
        local: a.local,
        collector: a.gc,
        heap_mb: a.heap_mb,
    };
    match memliner_cli::demo::run(&d) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// `memliner doctor`: exit status 1 when a check failed.
fn doctor(a: DoctorArgs) -> ExitCode {
    let java = a.java.unwrap_or_else(locate::java);
    let r = memliner_cli::doctor::run(&java, &a.server);
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).expect("a report serializes")
        );
    } else {
        print!("{}", r.text());
    }
    if r.failed() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Runs `memliner-bench` from beside this executable with `args`: the harness and its plotting
/// live in their own binary, so that the operator's `memliner` carries neither.
fn bench(args: &[std::ffi::OsString]) -> ExitCode {
    let harness = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("memliner-bench")))
        .filter(|p| p.is_file());
    let Some(harness) = harness else {
        return fail(
            "bench: memliner-bench is not beside this memliner; build it with `cargo build --release --workspace`",
        );
    };
    use std::os::unix::process::CommandExt;
    let e = std::process::Command::new(&harness).args(args).exec();
    fail(format!("bench: cannot run {}: {e}", harness.display()))
}

fn parse_source(arg: &str) -> Result<memliner_cli::live::Source, String> {
    Ok(memliner_cli::live::Source::parse(arg))
}

/// A duration above zero (an interval, a deadline).
fn parse_positive(s: &str) -> Result<Duration, String> {
    match units::parse_duration(s)? {
        d if d.is_zero() => Err("must be longer than 0".into()),
        d => Ok(d),
    }
}

/// A size of at least one page (`512m`, `8g`), in bytes.
fn parse_capacity(s: &str) -> Result<u64, String> {
    match units::parse_size(s)? {
        b if b < swap_backend::PAGE_SIZE as u64 => Err("must be at least one page (4096)".into()),
        b => Ok(b),
    }
}

/// A size of at least one page, in pages.
fn parse_pages(s: &str) -> Result<u64, String> {
    Ok(parse_capacity(s)? / swap_backend::PAGE_SIZE as u64)
}

/// A count of at least 1.
fn parse_count(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{s}' is not a count")),
    }
}

/// A share of the heap, 1-100 (`31%` or `31`).
fn parse_percent(s: &str) -> Result<u32, String> {
    s.trim_end_matches('%')
        .parse::<u32>()
        .ok()
        .filter(|l| (1..=100).contains(l))
        .ok_or_else(|| format!("'{s}' is not a percentage of the heap, 1-100%"))
}
