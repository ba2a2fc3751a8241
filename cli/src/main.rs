//! `memliner`: run a JVM with its heap in far memory, serve that memory, measure it.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use memliner_cli::run::{launch, GcHooks, RunConfig, Transport};
use memliner_cli::{bench, locate, summary, workloads};

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
        /// The agent's options (its option table: `agent/src/options.rs`).
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
    /// The policy matrix: workloads x collectors x {no agent, baseline, memliner, kernel
    /// swap to zram at the same heap memory} x local {100, 50, 31, 25%} on 1 GiB heaps, with a report, CSV and plots.
    Bench {
        /// A shorter run (G1 only, 64 MiB heap, 100 and 25% local, 2 repetitions; about 10 minutes on 2 cores).
        #[arg(long)]
        quick: bool,
        /// Add the Spark jobs (PageRank, group-by, MLlib logistic regression and KMeans,
        /// connected components; 100, 25 and 13% local) on the first collector; needs
        /// scripts/spark-setup.sh once.
        #[arg(long)]
        spark: bool,
        /// Only the Spark jobs (implies --spark; with --spark-cluster, the cluster rows too).
        #[arg(long)]
        spark_only: bool,
        /// Add the Spark jobs on 2 executor JVMs (Spark's local-cluster master, 512 MiB
        /// each, the agent in every executor, the driver not paged) on the first collector;
        /// needs scripts/spark-setup.sh once.
        #[arg(long)]
        spark_cluster: bool,
        /// Skip the kernel baseline (zram swap under a cgroup memory limit; needs root).
        #[arg(long)]
        no_kernel: bool,
        /// Run only what the kernel rows need (no agent, memliner at 100%, the kernel runs).
        #[arg(long, conflicts_with = "no_kernel")]
        kernel_only: bool,
        /// Java heap of the matrix workloads, MiB.
        #[arg(long)]
        heap_mb: Option<u64>,
        /// Write the report, CSV and plots again from a finished bench's raw.json (into
        /// --out, default: the raw.json's folder) instead of running anything.
        #[arg(long, value_name = "RAW_JSON")]
        from_raw: Option<PathBuf>,
        /// Collectors, comma-separated (default G1,Shenandoah; G1 with --quick; Parallel too
        /// where asked for).
        #[arg(long, value_delimiter = ',')]
        collectors: Option<Vec<String>>,
        /// Repetitions (overrides the preset).
        #[arg(long)]
        reps: Option<usize>,
        /// Workloads, comma-separated (default kv,graph,index): the Java ones, and
        /// spark-pagerank, spark-groupby, spark-lr, spark-kmeans, spark-cc (as --spark adds them),
        /// cassandra (a node under a verifying YCSB-style load, A and B, at 100, 50 and 25%
        /// local; heap at least 1 GiB; Cassandra from Maven Central, scripts/cassandra.sh) and
        /// lucene (indexing and search, the index in the heap; lucene-core from Maven Central,
        /// scripts/lucene.sh; at 100, 50 and 25%).
        #[arg(long, value_delimiter = ',')]
        workloads: Option<Vec<String>>,
        /// Local shares in percent, comma-separated (default 100,50,31,25); 100 is always run,
        /// since every ratio is taken against it.
        #[arg(long, value_delimiter = ',')]
        locals: Option<Vec<u32>>,
        /// Skip the patched JDK's memliner-gc-hooks runs even when target/jdk-memliner exists.
        #[arg(long)]
        no_gc_hooks: bool,
        /// Emulated latency for every paged run: each request to the pages' store takes at
        /// least this long (3us, 1ms); the report says so. The memliner-in-process rows then
        /// approximate an RDMA fabric.
        #[arg(long, value_name = "DURATION")]
        emulate_latency: Option<String>,
        /// Compare the transports: memliner at 25% over tcp and one-sided fabric:// (libfabric;
        /// its tcp provider without an RDMA NIC) beside the memliner cell (the default:
        /// unix:// memory files where the host has them) and in-process, for every Java
        /// workload and collector, and each transport's store alone.
        #[arg(long)]
        transports: bool,
        /// Measure replication: memliner at 25% with two copies of every page on two
        /// embedded servers, beside one server, for every Java workload and collector.
        #[arg(long)]
        replicas: bool,
        /// Measure the end-to-end page checksums: memliner at 25% with checksums=off beside
        /// the memliner cell (on), for every Java workload and collector.
        #[arg(long)]
        checksums: bool,
        /// Output folder (default benchmarks/results/<timestamp>).
        #[arg(long)]
        out: Option<PathBuf>,
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
        Cmd::Bench {
            quick,
            spark,
            spark_only,
            spark_cluster,
            no_kernel,
            kernel_only,
            heap_mb,
            from_raw,
            collectors,
            reps,
            workloads,
            locals,
            no_gc_hooks,
            emulate_latency,
            transports,
            replicas,
            checksums,
            out,
        } => {
            if let Some(l) = &emulate_latency {
                if let Err(e) = swap_backend::units::parse_duration(l) {
                    return fail(format!("--emulate-latency: {e}"));
                }
            }
            if let Some(raw) = from_raw {
                let dir = out.unwrap_or_else(|| {
                    raw.parent()
                        .map(PathBuf::from)
                        .unwrap_or_else(|| PathBuf::from("."))
                });
                return match bench::rerender(&raw, dir) {
                    Ok(report) => {
                        eprintln!("memliner: report written to {}", report.display());
                        ExitCode::SUCCESS
                    }
                    Err(e) => fail(e),
                };
            }
            let out = out.unwrap_or_else(|| {
                let root = locate::project_root().unwrap_or_else(|_| PathBuf::from("."));
                root.join("benchmarks/results").join(timestamp())
            });
            let mut cfg = if quick {
                bench::BenchConfig::quick(out)
            } else {
                bench::BenchConfig::full(out)
            };
            if let Some(r) = reps {
                cfg.reps = r.max(1);
            }
            if let Some(ws) = workloads {
                let known = bench::BenchWorkload::all();
                let mut picked = Vec::new();
                for name in ws {
                    match known.iter().find(|w| w.name() == name) {
                        Some(w) => picked.push(w.clone()),
                        None => {
                            let names: Vec<String> = known.iter().map(|w| w.name()).collect();
                            return fail(format!(
                                "--workloads: unknown workload '{name}' (choose from {})",
                                names.join(", ")
                            ));
                        }
                    }
                }
                cfg.workloads = picked;
            }
            if let Some(mut ls) = locals {
                if let Some(bad) = ls.iter().find(|&&l| l == 0 || l > 100) {
                    return fail(format!("--locals: {bad} is not a share between 1 and 100"));
                }
                if !ls.contains(&100) {
                    ls.push(100);
                }
                ls.sort_unstable_by(|a, b| b.cmp(a));
                ls.dedup();
                cfg.locals = ls;
            }
            if no_gc_hooks {
                cfg.gc_hooks = false;
            }
            cfg.emulate_latency = emulate_latency;
            cfg.transports = transports;
            cfg.replicas = replicas;
            cfg.checksums = checksums;
            if spark_only {
                cfg.workloads.clear();
            }
            let mut deploys = Vec::new();
            if spark || spark_only {
                deploys.push(bench::spark::Deploy::Local);
            }
            if spark_cluster {
                deploys.push(bench::spark::Deploy::Cluster);
            }
            for deploy in deploys {
                for job in bench::spark::Job::ALL {
                    let w = bench::BenchWorkload::Spark(job, deploy);
                    if !cfg.workloads.contains(&w) {
                        cfg.workloads.push(w);
                    }
                }
            }
            cfg.kernel = !no_kernel;
            cfg.kernel_only = kernel_only;
            if let Some(h) = heap_mb {
                cfg.heap_mb = h.max(16);
            }
            if let Some(c) = collectors {
                cfg.collectors = c;
            }
            cfg.command = std::env::args()
                .skip(1)
                .fold("memliner".to_string(), |a, b| a + " " + &b);
            match bench::run(&cfg) {
                Ok(report) => {
                    eprintln!("memliner: report written to {}", report.display());
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e),
            }
        }
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

fn timestamp() -> String {
    let out = std::process::Command::new("date")
        .arg("+%Y%m%d-%H%M%S")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .unwrap_or_default();
    out.trim().to_string()
}
