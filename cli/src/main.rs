//! `memliner`: run a JVM with its heap in far memory, serve that memory, measure it.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use memliner_cli::run::{launch, GcHooks, RunConfig, Transport};
use memliner_cli::{locate, summary, workloads};

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
// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
enum Cmd {
    /// Run a JVM with the agent: `memliner run --local 25% -- java -Xmx4g -jar app.jar`.
    Run {
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
    },
    /// Merge the stats of a job's JVMs (files, or directories of them as `stats=DIR/` writes
    /// them, or the pids of running JVMs, asked for their figures now by SIGQUIT): each JVM's
    /// faults, remote traffic, GC share and prefetch, and the total. Exit status: 0; 3 when a
    /// pid runs no memliner agent; 75 when its JVM does not page (yet): ask again; 2 otherwise.
    Stats {
        /// Stats files, directories holding them, or pids of running JVMs with the agent.
        #[arg(required = true, value_name = "PATH|PID", value_parser = parse_source)]
        sources: Vec<memliner_cli::live::Source>,
        /// With one PID: a line every DURATION (1s, 500ms) until the JVM exits, as `jstat`
        /// does: remote faults/s, GC share, MiB/s in and out, resident, budget, p50/p99 remote
        /// fault latency. Read from the JVM's /metrics (metrics=); without it, by SIGQUIT.
        #[arg(long, value_name = "DURATION", value_parser = parse_every)]
        every: Option<std::time::Duration>,
    },
    /// A live view of every paged JVM on this host (and the memory servers they use):
    /// budget, resident, faults/s by thread class, remote MiB/s, fault latency, history.
    /// Keys: s sorts, up/down pick a JVM, enter shows it, q quits. JVMs are found by their
    /// agent and serve /metrics (metrics=0).
    Top {
        /// Refresh interval.
        #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_every)]
        every: std::time::Duration,
        /// A memory server's metrics address (`memliner server --metrics`), for its capacity
        /// and what it holds; give it again for more.
        #[arg(long, value_name = "HOST:PORT")]
        server_metrics: Vec<String>,
    },
    /// Serve memory to agents: `memliner server --listen tcp://127.0.0.1:7070 --capacity 8g`.
    Server {
        /// URL to listen on, tcp://HOST:PORT (or HOST:PORT; port 0: any free port; loopback
        /// unless told otherwise), fabric://HOST:PORT (one-sided through libfabric), or
        /// unix:///PATH (one-sided in memory files, for JVMs on this host).
        #[arg(long, default_value = "tcp://127.0.0.1:7070")]
        listen: swap_backend::ListenUrl,
        /// Bytes of page storage for all clients together (512m, 8g).
        #[arg(long, default_value = "8g")]
        capacity: String,
        /// Require clients to present the token in this file (else MEMLINER_TOKEN, if set); a
        /// listener other than loopback needs one.
        #[arg(long, value_name = "PATH")]
        token_file: Option<PathBuf>,
        /// Refused: a token on the command line is readable by every user (/proc/PID/cmdline).
        #[arg(long, hide = true)]
        token: Option<String>,
        /// How long a client's pages wait for it to reconnect after its last connection closed
        /// (30s, 5m; 0: freed at once).
        #[arg(long, value_name = "DURATION", default_value = "30s")]
        grace: String,
        /// Most one client may hold (512m, 4g); default: only --capacity bounds it.
        #[arg(long, value_name = "SIZE")]
        quota: Option<String>,
        /// Most connections open at once, all clients together (more are refused).
        #[arg(long, value_name = "N", default_value_t = 512)]
        max_connections: usize,
        /// Most connections one client may open (a JVM opens one per fault handler, plus two).
        #[arg(long, value_name = "N", default_value_t = 64)]
        max_client_connections: usize,
        /// How long a new connection may take to say hello before it is closed.
        #[arg(long, value_name = "DURATION", default_value = "5s")]
        hello_deadline: String,
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
        #[arg(long, value_name = "DURATION")]
        emulate_latency: Option<String>,
    },
    /// Build the workloads and run one sized like a service (index, 1 GiB heap) all-local,
    /// paged by memliner at 31% local on the embedded server, and under kernel swap to zram
    /// with the same heap memory (where root, cgroup v1 and zram allow); compare the three
    Demo {
        /// Workload: index, kv or graph.
        #[arg(long, default_value = "index")]
        workload: String,
        /// Local budget of the paged run, in percent of the heap.
        #[arg(long, default_value = "31%")]
        local: String,
        /// Collector: G1, Parallel, Shenandoah, Serial.
        #[arg(long, default_value = "G1")]
        gc: String,
        /// Java heap, MiB.
        #[arg(long, default_value_t = 1024)]
        heap_mb: u64,
    },
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
    Doctor {
        /// The java to check (default: $JAVA_HOME/bin/java, else java on PATH).
        #[arg(long)]
        java: Option<PathBuf>,
        /// A memory server to reach (URL; repeatable, or several joined by '+').
        #[arg(long, value_delimiter = '+')]
        server: Vec<swap_backend::ServerUrl>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn parse_source(arg: &str) -> Result<memliner_cli::live::Source, String> {
    Ok(memliner_cli::live::Source::parse(arg))
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("memliner: {msg}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Run {
            agent,
            token,
            gc_hooks,
            agent_env,
            transport,
            quiet,
            command,
        } => {
            if token.is_some() {
                return fail("--token: a token on the command line is readable by every user (/proc/PID/cmdline), the JVM's too; put it in a file for --token-file, or in MEMLINER_TOKEN");
            }
            let options = match agent.options() {
                Ok(o) => o,
                Err(e) => return fail(e),
            };
            if options.server_given && transport != Transport::Auto {
                return fail("--transport is for the embedded server: give the server's URL (tcp://, fabric://HOST:PORT or unix:///PATH) to --server instead");
            }
            let cfg = RunConfig {
                agent: true,
                options,
                gc_hooks,
                agent_env,
                transport,
                embedded_servers: 1,
            };
            match launch(&cfg, &command, false) {
                Ok(out) => {
                    if !quiet {
                        match &out.stats {
                            Some(s) => {
                                for l in summary::lines(s) {
                                    eprintln!("memliner: {l}");
                                }
                            }
                            None => eprintln!(
                                "memliner: the JVM wrote no stats (it exited before VM death)"
                            ),
                        }
                    }
                    ExitCode::from(out.exit_code().clamp(0, 255) as u8)
                }
                Err(e) => fail(e),
            }
        }
        Cmd::Server {
            listen,
            capacity,
            token_file,
            token,
            grace,
            quota,
            max_connections,
            max_client_connections,
            hello_deadline,
            metrics,
            verbose,
            emulate_latency,
        } => {
            let hello_deadline = match swap_backend::units::parse_duration(&hello_deadline) {
                Ok(d) if !d.is_zero() => d,
                Ok(_) => return fail("--hello-deadline must be longer than 0"),
                Err(e) => return fail(format!("--hello-deadline: {e}")),
            };
            if max_connections == 0 || max_client_connections == 0 {
                return fail("--max-connections and --max-client-connections must be at least 1");
            }
            if token.is_some() {
                return fail("--token: a token on the command line of a long-lived process is readable by every user (/proc/PID/cmdline); put it in a file for --token-file, or in MEMLINER_TOKEN");
            }
            let token = match swap_backend::auth::load_token(token_file.as_deref()) {
                Ok(t) => t,
                Err(e) => return fail(format!("--token-file: {e}")),
            };
            let grace = match swap_backend::units::parse_duration(&grace) {
                Ok(d) => d,
                Err(e) => return fail(format!("--grace: {e}")),
            };
            let quota_pages = match quota.as_deref().map(swap_backend::units::parse_size) {
                None => None,
                Some(Ok(b)) if b >= 4096 => Some(b / 4096),
                Some(Ok(_)) => return fail("--quota must be at least one page (4096)"),
                Some(Err(e)) => return fail(format!("--quota: {e}")),
            };
            let latency = match emulate_latency
                .as_deref()
                .map(swap_backend::units::parse_duration)
            {
                None => None,
                Some(Ok(d)) => (!d.is_zero()).then_some(d),
                Some(Err(e)) => return fail(format!("--emulate-latency: {e}")),
            };
            let capacity_bytes = match swap_backend::units::parse_size(&capacity) {
                Ok(b) if b >= 4096 => b,
                Ok(_) => return fail("--capacity must be at least one page (4096)"),
                Err(e) => return fail(format!("--capacity: {e}")),
            };
            let listen = listen.0;
            let cfg = swap_backend::server::ServerConfig {
                capacity_bytes,
                token,
                verbose,
                latency,
                fabric: listen.scheme == swap_backend::Scheme::Fabric,
                grace,
                quota_pages,
                limits: swap_backend::server::Limits {
                    connections: max_connections,
                    connections_per_client: max_client_connections,
                    hello_deadline,
                },
                metrics: metrics.clone(),
                fabric_provider: None,
            };
            let spawned = match listen.scheme {
                swap_backend::Scheme::Unix => {
                    swap_backend::server::spawn_unix(std::path::Path::new(&listen.authority()), cfg)
                }
                _ => swap_backend::server::spawn(&listen.authority(), cfg),
            };
            match spawned {
                Ok(h) => {
                    let at = h.url();
                    eprintln!(
                        "memliner-server: listening on {at} with {} for pages{}{}{}{}",
                        swap_backend::units::format_size(capacity_bytes),
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
                            swap_backend::units::format_duration(l)
                        )),
                        h.metrics_addr().map_or(String::new(), |a| format!(
                            "; metrics at http://{a}/metrics"
                        ))
                    );
                    h.wait();
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    let needs_token = e
                        .get_ref()
                        .is_some_and(|i| i.is::<swap_backend::server::TokenRequired>());
                    let hint = if needs_token {
                        " (--token-file PATH, or MEMLINER_TOKEN)"
                    } else {
                        ""
                    };
                    fail(format!("cannot listen on {listen}: {e}{hint}"))
                }
            }
        }
        Cmd::Demo {
            workload,
            local,
            gc,
            heap_mb,
        } => {
            let demo = workloads::Workload::parse(&workload).and_then(|w| {
                let local = local
                    .trim_end_matches('%')
                    .parse::<u32>()
                    .ok()
                    .filter(|l| (1..=100).contains(l))
                    .ok_or_else(|| {
                        format!("bad --local '{local}': a percentage of the heap, 1-100%")
                    })?;
                Ok(memliner_cli::demo::Demo {
                    workload: w,
                    local,
                    collector: gc,
                    heap_mb,
                })
            });
            match demo.and_then(|d| memliner_cli::demo::run(&d)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(e),
            }
        }
        Cmd::Bench { args } => bench(&args),
        Cmd::Stats {
            sources,
            every: Some(every),
        } => {
            let [memliner_cli::live::Source::Pid(pid)] = sources.as_slice() else {
                return fail("--every follows one running JVM: give its pid alone");
            };
            match memliner_cli::watch::run(*pid, every, &mut std::io::stdout().lock()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("memliner: {e}");
                    ExitCode::from(e.exit_code())
                }
            }
        }
        Cmd::Top {
            every,
            server_metrics,
        } => match memliner_cli::top::run(every, &server_metrics) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e),
        },
        Cmd::Stats {
            sources,
            every: None,
        } => match memliner_cli::aggregate::gather(&sources) {
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
        },
        Cmd::Doctor { java, server, json } => {
            let java = java.unwrap_or_else(locate::java);
            let r = memliner_cli::doctor::run(&java, &server);
            if json {
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
    }
}

/// A positive duration (`1s`, `500ms`).
fn parse_every(s: &str) -> Result<std::time::Duration, String> {
    match swap_backend::units::parse_duration(s)? {
        d if d.is_zero() => Err("an interval must be above zero".into()),
        d => Ok(d),
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
