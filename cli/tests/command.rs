//! The `memliner` command with real JVMs and servers: `doctor`, servers at their URLs, a
//! server killed mid-run, bad options and unreachable servers, fallback, ZGC refused, options
//! from the environment, exit codes and signals.
//!
//! Needs `cargo build --release --workspace` first (the agent is a cdylib that `cargo test`
//! does not build); `scripts/test.sh` does both.

#[macro_use]
mod common;

use common::*;
use std::process::{Command, Stdio};

use memliner_cli::locate;
use memliner_cli::workloads::Workload;
use memliner_contracts::options::Policy;
use memliner_contracts::stats::StatsDoc;

/// The RDMA stack is loaded at run time, never linked: the agent and the command start on a
/// machine without libfabric or libibverbs.
#[test]
fn no_rdma_library_is_linked() {
    for bin in [
        locate::agent().unwrap(),
        std::path::PathBuf::from(env!("CARGO_BIN_EXE_memliner")),
    ] {
        let out = Command::new("readelf")
            .arg("-d")
            .arg(&bin)
            .output()
            .unwrap();
        assert!(out.status.success(), "readelf -d {}", bin.display());
        let dynamic = String::from_utf8_lossy(&out.stdout);
        assert!(dynamic.contains("(NEEDED)"), "{dynamic}");
        for lib in ["libfabric", "libibverbs", "librdmacm"] {
            assert!(
                !dynamic.contains(lib),
                "{} links {lib}:\n{dynamic}",
                bin.display()
            );
        }
    }
}

/// `memliner doctor --json`: every check named with a status, the JDK's heap found with the
/// agent, live servers reached (over tcp://, unix:// and fabric:// where libfabric is
/// installed, the one-sided ones with a page written and read back) and a dead one failed with
/// its fix (exit code 1).
#[test]
fn doctor_checks_the_machine_the_jdk_and_the_servers() {
    let fabric = swap_backend::conformance::libfabric_or_skip("doctor's fabric:// check");
    let live = memliner_server::spawn(
        "127.0.0.1:0",
        memliner_server::ServerConfig {
            fabric,
            ..memliner_server::ServerConfig::with_capacity(64 << 20)
        },
    )
    .unwrap();
    let socket = std::env::temp_dir().join(format!("memliner-doctor-{}.sock", std::process::id()));
    let files = memliner_server::spawn_unix(
        &socket,
        memliner_server::ServerConfig::with_capacity(64 << 20),
    )
    .unwrap();
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = memliner()
        .args(["doctor", "--json", "--java"])
        .arg(java())
        .args(["--server", &format!("tcp://{}", live.local_addr())])
        .args(["--server", &files.url()])
        .args(["--server", &format!("127.0.0.1:{dead}")])
        .args(
            fabric
                .then(|| {
                    [
                        "--server".to_string(),
                        format!("fabric://{}", live.local_addr()),
                    ]
                })
                .into_iter()
                .flatten(),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "a dead server fails the report");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = r["checks"].as_array().unwrap();
    let get = |name: &str| {
        checks
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no check {name}: {r}"))
    };
    for c in checks {
        assert!(
            ["ok", "warn", "fail"].contains(&c["status"].as_str().unwrap()),
            "{c}"
        );
        assert!(!c["detail"].as_str().unwrap().is_empty(), "{c}");
        if c["status"] != "ok" {
            assert!(
                c["fix"].is_string(),
                "a check that is not ok says what to do: {c}"
            );
        }
    }
    assert_eq!(get("userfaultfd")["status"], "ok");
    assert_eq!(get("java")["status"], "ok");
    let heap = get("heap discovery");
    assert_eq!(heap["status"], "ok", "{heap}");
    assert!(
        heap["detail"].as_str().unwrap().contains("64 MiB"),
        "{heap}"
    );
    let ok = get(&format!("server tcp://{}", live.local_addr()));
    assert_eq!(ok["status"], "ok", "{ok}");
    assert!(
        ok["detail"].as_str().unwrap().contains("64 MiB capacity"),
        "{ok}"
    );
    if fabric {
        let one_sided = get(&format!("server fabric://{}", live.local_addr()));
        assert_eq!(one_sided["status"], "ok", "{one_sided}");
        assert!(
            one_sided["detail"]
                .as_str()
                .unwrap()
                .contains("one-sided write and read of a page over tcp: ok"),
            "{one_sided}"
        );
    }
    let in_files = get(&format!("server {}", files.url()));
    assert_eq!(in_files["status"], "ok", "{in_files}");
    assert!(
        in_files["detail"]
            .as_str()
            .unwrap()
            .contains("one-sided write and read of a page in a memory file: ok"),
        "{in_files}"
    );
    assert_eq!(get("memory files")["status"], "ok");
    if fabric {
        let rdm = get("libfabric RDM providers");
        assert!(
            rdm["detail"].as_str().unwrap().contains("FI_EP_RDM"),
            "{rdm}"
        );
    }
    let bad = get(&format!("server tcp://127.0.0.1:{dead}"));
    assert_eq!(bad["status"], "fail");
    assert!(bad["detail"].as_str().unwrap().contains("refused"), "{bad}");
    // The RDMA stack is listed whatever this machine has.
    assert_eq!(r["rdma"]["libraries"].as_array().unwrap().len(), 3);
    assert!(["ok", "warn"].contains(&get("rdma devices")["status"].as_str().unwrap()));
    live.stop();
    files.stop();
}

/// Server addresses are URLs on both sides: the server says where it listens as one, a client
/// reaches it at that URL, and a bad URL is one clear line from either command.
#[test]
fn servers_listen_and_are_reached_at_urls() {
    use std::io::BufRead;
    let mut server = memliner()
        .args([
            "server",
            "--listen",
            "tcp://127.0.0.1:0",
            "--capacity",
            "16m",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(server.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let at = line
        .split_whitespace()
        .find(|w| w.starts_with("tcp://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"));
    let url: swap_backend::ServerUrl = at.parse().unwrap();
    assert!(url.port > 0 && url.is_loopback(), "{line}");
    let store = swap_backend::TcpStore::connect(
        &url.authority(),
        swap_backend::ClientOptions {
            namespace: "url-test".into(),
            connections: 1,
            ..Default::default()
        },
    )
    .unwrap();
    use swap_backend::PageStore;
    let page = vec![0xa5u8; swap_backend::PAGE_SIZE];
    store.write_pages(&[9], &page).unwrap();
    let mut back = vec![0u8; swap_backend::PAGE_SIZE];
    store.read_pages(&[9], &mut back).unwrap();
    assert_eq!(back, page);
    assert_eq!(store.describe(), url.to_string());
    server.kill().unwrap();
    let _ = server.wait();

    let out = memliner()
        .args(["server", "--listen", "udp://127.0.0.1:0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("unknown scheme 'udp://'"), "{err}");
    // A listener others can reach needs a token, and never on the command line.
    let out = memliner()
        .args(["server", "--listen", "tcp://0.0.0.0:0"])
        .env_remove("MEMLINER_TOKEN")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("not a loopback address") && err.contains("--token-file"),
        "{err}"
    );
    for cmd in [
        &["server", "--token", "s3cret"][..],
        &["run", "--token", "s3cret", "--", "java"],
    ] {
        let out = memliner().args(cmd).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{cmd:?}");
        assert!(err.contains("/proc/PID/cmdline"), "{cmd:?}: {err}");
    }
    let out = memliner()
        .args([
            "run",
            "-q",
            "--server",
            "rdma://mem1:7070",
            "--",
            "java",
            "-version",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("bad value for 'server'") && err.contains("unknown scheme 'rdma://'"),
        "{err}"
    );
    assert!(!err.contains("version \""), "no JVM may start: {err}");
}

#[test]
fn memory_server_killed_mid_run_stops_the_jvm_naming_server_and_page() {
    // A real server process on a port we pick by binding first.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut server = memliner()
        .args(["server", "--listen", &addr, "--capacity", "1g"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until it accepts (bounded): connect attempts, not sleeps.
    let probe = (0..2000)
        .find_map(|_| {
            swap_backend::TcpStore::connect(
                &addr,
                swap_backend::ClientOptions {
                    namespace: "probe".into(),
                    connections: 1,
                    ..Default::default()
                },
            )
            .ok()
            .or_else(|| {
                std::thread::yield_now();
                None
            })
        })
        .expect("server never came up");
    let mut cmd = command(Workload::Graph, "G1", HEAP);
    cmd.extend(["--rounds".to_string(), "400".to_string()]);
    let agent = locate::agent().unwrap();
    let jvm = Command::new(&cmd[0])
        .arg(format!(
            "-agentpath:{}=server={addr},local=25%",
            agent.display()
        ))
        .args(&cmd[1..])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Kill the server once the JVM depends on it (pages stored there).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while probe.server_stats().unwrap().pages_stored < 1000 {
        assert!(
            std::time::Instant::now() < deadline,
            "the JVM never paged out"
        );
        std::thread::yield_now();
    }
    server.kill().unwrap();
    server.wait().unwrap();
    let out = jvm.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(memliner_contracts::FATAL_EXIT_CODE),
        "stderr: {err}"
    );
    assert!(err.contains("FATAL"), "{err}");
    assert!(
        err.contains(&format!("tcp://{addr}")),
        "the message must name the server: {err}"
    );
    assert!(
        err.contains("heap page"),
        "the message must name the page: {err}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("verified=true"));
}

#[test]
fn bad_agent_options_fail_with_one_clear_line() {
    for (opts, expect) in [
        ("locall=25%", "unknown option 'locall'"),
        ("local=lots", "bad value for 'local': 'lots'"),
        ("policy=fast", "expected one of memliner, baseline, off"),
        ("server=nohost", "HOST:PORT"),
        ("token=s3cret", "token_file=PATH"),
        (
            "server=127.0.0.1:1+127.0.0.1:2,replicas=3",
            "3 copies need 3 memory servers, and server= gives 2",
        ),
        ("replicas=0", "expected a number of copies from 1 to 16"),
        ("server=h:1+tcp://h:1", "tcp://h:1 is given twice"),
    ] {
        let out = java_with_agent(opts);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{opts}: must fail");
        let ours: Vec<&str> = err.lines().filter(|l| l.starts_with("memliner:")).collect();
        assert_eq!(
            ours.len(),
            1,
            "{opts}: exactly one line from the agent: {err}"
        );
        assert!(ours[0].contains(expect), "{opts}: {err}");
    }
}

#[test]
fn unreachable_server_is_reported_before_the_jvm_runs() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = java_with_agent(&format!("server=127.0.0.1:{port}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!("cannot use memory server tcp://127.0.0.1:{port}")),
        "{err}"
    );
}

/// `fallback=local`: the same unreachable server, but the JVM runs (on local memory) with one
/// line saying why; a ZGC heap, which cannot be paged, stays local the same way.
#[test]
fn fallback_local_runs_the_jvm_without_far_memory_and_says_why() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = java_with_agent(&format!("server=127.0.0.1:{port},fallback=local"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let ours: Vec<&str> = err.lines().filter(|l| l.starts_with("memliner:")).collect();
    assert_eq!(ours.len(), 1, "{err}");
    assert!(
        ours[0].contains(&format!("cannot use memory server tcp://127.0.0.1:{port}"))
            && ours[0].contains("fallback=local: the JVM runs without far memory"),
        "{err}"
    );
    let out = Command::new(java())
        .arg(format!(
            "-agentpath:{}=server=local,local=25%,fallback=local",
            locate::agent().unwrap().display()
        ))
        .args(["-XX:+UseZGC", "-Xmx64m", "-version"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "memliner: cannot page the Java heap: {}",
            memliner_contracts::ZGC_REFUSED
        )) && err.contains("fallback=local: the JVM runs with its whole heap local"),
        "{err}"
    );
}

/// `-XX:+UseZGC` without a fallback: the JVM stops with the line that names ZGC and the
/// collectors that work, on JDK 17 and JDK 25 (whose ZGC is generational only).
#[test]
fn zgc_is_refused_with_a_line_naming_it_on_both_jdks() {
    let mut javas = vec![java()];
    javas.extend(jdk25().map(|h| h.join("bin/java").display().to_string()));
    for java in javas {
        let out = memliner()
            .args([
                "run",
                "--server",
                "local",
                "--",
                &java,
                "-XX:+UseZGC",
                "-Xmx64m",
            ])
            .args(["-version"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{java}: {err}");
        assert!(
            err.contains(memliner_contracts::ZGC_REFUSED),
            "{java}: {err}"
        );
        assert!(!err.contains("implausible"), "{java}: {err}");
    }
}

#[test]
fn options_come_from_java_tool_options_and_memliner_options() {
    let dir = std::env::temp_dir().join(format!("memliner-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stats = dir.join("s.json");
    let agent = locate::agent().unwrap();
    let cmd = command(Workload::Kv, "G1", HEAP);
    let out = Command::new(&cmd[0])
        .args(&cmd[1..])
        .env(
            "JAVA_TOOL_OPTIONS",
            format!(
                "-agentpath:{}=server=local,stats={}",
                agent.display(),
                stats.display()
            ),
        )
        .env("MEMLINER_OPTIONS", "local=50%,policy=off")
        .env_remove("MEMLINER_AGENT")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = StatsDoc::parse(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    // MEMLINER_OPTIONS said policy=off; the agent string did not override it.
    assert_eq!(s.policy, Policy::Off);
    assert!(s.pager.is_none());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn memliner_run_propagates_the_exit_code_and_prints_a_summary() {
    let mut cmd = command(Workload::Graph, "G1", HEAP);
    cmd.extend(["--bogus".to_string(), "1".to_string()]);
    let out = memliner()
        .args(["run", "--local", "50%", "--"])
        .args(&cmd)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("unknown option --bogus"), "{err}");
    assert!(
        err.contains("memliner: G1 heap 32.0 MiB, local 16.0 MiB (50%)"),
        "{err}"
    );

    let ok = memliner()
        .args(["run", "--local", "25%", "--"])
        .args(command(Workload::Kv, "G1", HEAP))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&ok.stderr);
    assert!(ok.status.success(), "{err}");
    assert!(String::from_utf8_lossy(&ok.stdout).contains("verified=true"));
    assert!(err.contains("remote traffic:"), "{err}");

    let bad = memliner()
        .args(["run", "--local", "lots", "--", &java(), "-version"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("bad value for 'local'"));
}

/// Whether process `pid` has a thread named `name`.
fn has_thread(pid: u32, name: &str) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| {
            rd.flatten().any(|t| {
                std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name)
            })
        })
        .unwrap_or(false)
}

/// User + system CPU time of process `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of stat; 12 and 13 after the name and state.
    fields
        .get(11)
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        + fields
            .get(12)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
}

#[test]
fn sigterm_to_memliner_run_stops_the_jvm_cleanly_with_the_embedded_server_alive() {
    let mut cmd = command(Workload::Graph, "G1", HEAP);
    cmd.extend(["--rounds".to_string(), "400".to_string()]);
    let run = memliner()
        .args(["run", "--local", "25%", "--"])
        .args(&cmd)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait (bounded) until the JVM child runs the pager.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let jvm = loop {
        let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", run.id()))
            .unwrap_or_default();
        if let Some(pid) = children
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
            .next()
        {
            // Paging, and far enough in (half a second of CPU) that pages live on the server.
            if has_thread(pid, "memliner-fault0") && cpu_ticks(pid) >= 50 {
                break pid;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the JVM never started paging"
        );
        std::thread::yield_now();
    };
    eprintln!("jvm {jvm} paging; sending SIGTERM to memliner {}", run.id());
    let rc = Command::new("kill")
        .args(["-TERM", &run.id().to_string()])
        .status()
        .unwrap();
    assert!(rc.success());
    let out = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(143),
        "memliner must exit as the JVM did: {err}"
    );
    assert!(
        !err.contains("FATAL"),
        "the JVM lost its memory server on the way out: {err}"
    );
    assert!(
        err.contains("remote traffic:"),
        "stats written at VM death: {err}"
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{jvm}")).exists() || {
            // A zombie entry may linger briefly; it must not be running.
            std::fs::read_to_string(format!("/proc/{jvm}/stat")).map_or(true, |s| s.contains(") Z"))
        }
    );
}

#[test]
fn bad_values_of_the_commands_are_one_line_naming_the_flag_and_bench_runs_its_harness() {
    for (args, says) in [
        (
            &["server", "--capacity", "10"][..],
            "invalid value '10' for '--capacity <CAPACITY>': must be at least one page (4096)",
        ),
        (
            &["server", "--max-client-connections", "0"],
            "invalid value '0' for '--max-client-connections <N>': must be at least 1",
        ),
        (
            &["server", "--hello-deadline", "0s"],
            "invalid value '0s' for '--hello-deadline <DURATION>': must be longer than 0",
        ),
        (
            &["demo", "--local", "120%"],
            "'120%' is not a percentage of the heap, 1-100%",
        ),
        (&["stats", "--every", "0s", "1"], "must be longer than 0"),
        // `memliner bench` hands its arguments to memliner-bench, which says what it knows.
        (
            &["bench", "--workloads", "nope"],
            "memliner bench: --workloads: unknown workload 'nope' (choose from kv, graph, index",
        ),
    ] {
        let out = memliner().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert_eq!(
            stderr
                .lines()
                .filter(|l| l.contains("error") || l.contains("memliner"))
                .count(),
            1,
            "{args:?}: {stderr}"
        );
    }
    let help = memliner().args(["bench", "--help"]).output().unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("Usage: memliner bench [OPTIONS]"));
}
