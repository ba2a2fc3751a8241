//! `memliner-bench`: the benchmark harness, apart from the operator's `memliner` (which runs
//! it as `memliner bench`). The policy matrix with its report, CSV and plots; see
//! benchmarks/README.md.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use memliner_bench as bench;
use memliner_cli::locate;

/// The policy matrix: workloads x collectors x {no agent, baseline, memliner, kernel
/// swap to zram at the same heap memory} x local {100, 50, 31, 25%} on 1 GiB heaps, with a report, CSV and plots.
#[derive(Parser, Debug)]
#[command(name = "memliner bench", bin_name = "memliner bench", version)]
struct Args {
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
    /// Skip the data path's variants at 25% local on the first collector (reclaim=fifo,
    /// faults on handler threads, scraped, no pause reads, no card holds, dirty=assume,
    /// class streams): the policy matrix alone.
    #[arg(long)]
    no_variants: bool,
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
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("memliner bench: {msg}");
    ExitCode::from(2)
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

fn main() -> ExitCode {
    let Args {
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
        no_variants,
        emulate_latency,
        transports,
        replicas,
        checksums,
        out,
    } = Args::parse();
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
    cfg.variants = !no_variants;
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
        .fold("memliner bench".to_string(), |a, b| a + " " + &b);
    match bench::run(&cfg) {
        Ok(report) => {
            eprintln!("memliner: report written to {}", report.display());
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
