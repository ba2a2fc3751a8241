//! `memliner bench`: the policy matrix, measured side by side in one run.
//!
//! Workloads x collectors x {no agent, `policy=baseline`, `policy=memliner`, kernel swap} x
//! local memory {100, 50, 31, 25%}, on 1 GiB heaps. Each repetition runs every cell once, cells interleaved
//! (the two policies swap order every repetition) so that drift on a shared machine hits all
//! alike; the report gives medians of repetitions and ratios of those medians. Every run's
//! checksum must equal the all-local run's, or the bench stops.
//!
//! Output in `benchmarks/results/<stamp>/`: `report.md`, `runs.csv` (one row per run),
//! `raw.json` (everything, with the agent's stats), and PNG plots.

mod cells;
pub mod kernel;
pub mod lucene;
mod plots;
mod replacement;
mod report;
pub mod service;
pub mod spark;
pub mod stores;
mod versus_kernel;

use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Deserializer, Serialize};

use memliner_cli::run::{launch, RunConfig};
use memliner_cli::workloads::{self, Workload};
use memliner_contracts::options::{
    Budget, CardHold, Checksums, Dirty, FaultDelivery, PauseReads, Policy, Reclaim, Streams,
};
use memliner_contracts::stats::StatsDoc;

/// Local memory ratios of the matrix, in percent of the heap.
pub const LOCALS: [u32; 4] = [100, 50, 31, 25];
/// Local ratios of the (minutes-long) Spark jobs (MemLiner's artifact runs its Spark jobs at
/// 25% and 13%).
pub const SPARK_LOCALS: [u32; 3] = [100, 25, 13];

/// How a cell runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Plain JVM, all heap local: the reference.
    NoAgent,
    Baseline,
    Memliner,
    /// No agent; the kernel swaps to zram under a cgroup memory limit that leaves the heap
    /// the same local share as the agent's budget (see `kernel_limit`).
    Kernel,
    /// `policy=baseline` with `dirty=assume`, for the dirty-tracking comparison.
    BaselineAssume,
    /// `policy=memliner` with `streams=class`: one prefetch stream per thread class.
    MemlinerClassStreams,
    /// No agent, in the kernel baseline's cgroup without a limit: measures what the JVM
    /// holds, to size the kernel runs' limits.
    KernelCalibrate,
    /// `policy=memliner` with `reclaim=fifo`: arrival order, for what the replacement saves.
    MemlinerFifo,
    /// `policy=memliner` with the in-process store (`server=local`): the pager's cost alone.
    MemlinerInProcess,
    /// `policy=memliner` with `faults=thread`: handler threads instead of self-service faults.
    MemlinerThreadFaults,
    /// `policy=memliner` on the GC-hook patched JDK with `-XX:+MemLinerLineUp` (G1 and
    /// Shenandoah; planned when target/jdk-memliner exists).
    MemlinerGcHooks,
    /// `policy=memliner` over one-sided reads and writes to the embedded server
    /// (`fabric://`, libfabric's tcp provider here; `--transports`).
    MemlinerFabric,
    /// `policy=memliner` over two-sided TCP to the embedded server (`--transports`; the
    /// `memliner` cell uses the default, memory files where the host has them).
    MemlinerTcp,
    /// `policy=memliner` with two copies of every page on two embedded servers (`--replicas`).
    MemlinerReplicated,
    /// `policy=memliner` with a budget of the heap memory the kernel actually left its JVM's
    /// heap under the same limit (the kernel run's peak heap RSS): the kernel also swaps out
    /// the JVM's cold memory beside the heap and gives the room to the heap.
    MemlinerKernelHeap,
    /// `memliner-at-kernel-heap` with the in-process store (Java workloads): the pager at the
    /// kernel's heap memory without the co-located server's wakes.
    MemlinerInProcessKernelHeap,
    /// `policy=memliner` serving `/metrics` (`metrics=127.0.0.1:0`), scraped every second
    /// by the bench while it runs: what watching a JVM costs it.
    MemlinerScraped,
    /// `memliner-in-process` with `pause_reads=off`: what reading a pause's pages in bulk
    /// does, without the co-located server hiding it.
    MemlinerInProcessNoPauseReads,
    /// `memliner-in-process` with `card_hold=off`: what keeping pages with dirty cards local
    /// until the collector reads them does.
    MemlinerInProcessNoCardHold,
    /// `policy=memliner` with `checksums=off`: what the end-to-end page checks cost
    /// (`--checksums`).
    MemlinerNoChecksums,
}

impl Mode {
    /// Runs whose budget is the heap memory the kernel left the heap (its run comes first).
    pub fn at_kernel_heap(self) -> bool {
        matches!(
            self,
            Mode::MemlinerKernelHeap | Mode::MemlinerInProcessKernelHeap
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::NoAgent => "no-agent",
            Mode::Baseline => "baseline",
            Mode::Memliner => "memliner",
            Mode::Kernel => "kernel-zram",
            Mode::BaselineAssume => "baseline-dirty-assume",
            Mode::MemlinerClassStreams => "memliner-class-streams",
            Mode::KernelCalibrate => "kernel-calibrate",
            Mode::MemlinerFifo => "memliner-reclaim-fifo",
            Mode::MemlinerInProcess => "memliner-in-process",
            Mode::MemlinerThreadFaults => "memliner-faults-thread",
            Mode::MemlinerGcHooks => "memliner-gc-hooks",
            Mode::MemlinerFabric => "memliner-fabric",
            Mode::MemlinerTcp => "memliner-tcp",
            Mode::MemlinerReplicated => "memliner-replicated",
            Mode::MemlinerKernelHeap => "memliner-at-kernel-heap",
            Mode::MemlinerInProcessKernelHeap => "memliner-in-process-at-kernel-heap",
            Mode::MemlinerScraped => "memliner-scraped",
            Mode::MemlinerInProcessNoPauseReads => "memliner-in-process-no-pause-reads",
            Mode::MemlinerInProcessNoCardHold => "memliner-in-process-no-card-hold",
            Mode::MemlinerNoChecksums => "memliner-checksums-off",
        }
    }
}

/// A workload the bench can run.
#[derive(Clone, Debug, PartialEq)]
pub enum BenchWorkload {
    Java(Workload),
    /// A Spark job, in local mode or on executors (see `spark`).
    Spark(spark::Job, spark::Deploy),
    /// Apache Cassandra under the verifying YCSB-style load (see `service`).
    Cassandra,
    /// Lucene indexing and search, the index in the heap (see `lucene`).
    Lucene,
}

impl BenchWorkload {
    pub fn name(&self) -> String {
        match self {
            BenchWorkload::Java(w) => w.name().to_string(),
            BenchWorkload::Spark(j, spark::Deploy::Local) => format!("spark-{}", j.name()),
            BenchWorkload::Spark(j, spark::Deploy::Cluster) => {
                format!("spark-cluster-{}", j.name())
            }
            BenchWorkload::Cassandra => "cassandra".into(),
            BenchWorkload::Lucene => "lucene".into(),
        }
    }

    /// Every workload the bench knows, as `--workloads` names them.
    pub fn all() -> Vec<BenchWorkload> {
        let spark = |deploy| spark::Job::ALL.map(move |j| BenchWorkload::Spark(j, deploy));
        Workload::ALL
            .map(BenchWorkload::Java)
            .into_iter()
            .chain(spark(spark::Deploy::Local))
            .chain(spark(spark::Deploy::Cluster))
            .chain([BenchWorkload::Cassandra, BenchWorkload::Lucene])
            .collect()
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    pub reps: usize,
    pub collectors: Vec<String>,
    pub workloads: Vec<BenchWorkload>,
    pub locals: Vec<u32>,
    pub heap_mb: u64,
    pub kernel: bool,
    /// Only what the kernel rows need: no agent, memliner at 100%, the calibration run and
    /// the kernel runs.
    pub kernel_only: bool,
    pub out: PathBuf,
    pub tcp_mib: usize,
    /// The command line that produced the report, for the report.
    pub command: String,
    /// Add `memliner-gc-hooks` runs on the patched JDK (G1, Shenandoah).
    pub gc_hooks: bool,
    /// Emulated latency every paged run's store requests take at least (`latency=`).
    pub emulate_latency: Option<String>,
    /// Compare the transports: memliner over tcp, over fabric (one-sided) and in-process at
    /// 25% for every Java workload and collector, and each store alone.
    pub transports: bool,
    /// Measure replication: memliner at 25% with two copies of every page on two servers,
    /// beside one server, for every Java workload and collector.
    pub replicas: bool,
    /// Measure the end-to-end page checksums: memliner at 25% with `checksums=off` beside
    /// the `memliner` cell (on), for every Java workload and collector.
    pub checksums: bool,
    /// Add the data path's variants at 25% on the first collector (reclaim=fifo, faults on
    /// handler threads, scraped, no pause reads, no card holds; on graph dirty=assume and
    /// class streams).
    pub variants: bool,
}

impl BenchConfig {
    /// About 10 minutes on 2 cores: G1, the three Java workloads on a 64 MiB heap (JVM
    /// start-up weighs in), 100 and 25% local, 2 repetitions.
    pub fn quick(out: PathBuf) -> Self {
        BenchConfig {
            reps: 2,
            collectors: vec!["G1".into()],
            workloads: Workload::ALL.map(BenchWorkload::Java).to_vec(),
            locals: vec![100, 25],
            heap_mb: 64,
            kernel: true,
            kernel_only: false,
            out,
            tcp_mib: 64,
            command: "memliner bench --quick".into(),
            gc_hooks: memliner_cli::locate::patched_java().is_some(),
            emulate_latency: None,
            transports: false,
            replicas: false,
            checksums: false,
            variants: true,
        }
    }

    /// Sized like a service: a 1 GiB heap (all-local runs of 9-13 s), G1 and Shenandoah, the
    /// three Java workloads at 100, 50, 31 and 25% local, 3 repetitions (about 4 hours on 2
    /// cores with the kernel rows).
    pub fn full(out: PathBuf) -> Self {
        BenchConfig {
            reps: 3,
            collectors: vec!["G1".into(), "Shenandoah".into()],
            workloads: Workload::ALL.map(BenchWorkload::Java).to_vec(),
            locals: LOCALS.to_vec(),
            heap_mb: 1024,
            kernel: true,
            kernel_only: false,
            out,
            tcp_mib: 256,
            command: "memliner bench".into(),
            gc_hooks: memliner_cli::locate::patched_java().is_some(),
            emulate_latency: None,
            transports: false,
            replicas: false,
            checksums: false,
            variants: true,
        }
    }
}

/// A bench's raw.json: how it was run, the TCP and store figures, and every run. Written
/// and read (`--from-raw`) as this one type.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDoc {
    command: String,
    heap_mb: u64,
    reps: usize,
    emulate_latency: Option<String>,
    #[serde(deserialize_with = "nan_if_null")]
    elapsed_s: f64,
    kernel_skipped: Option<String>,
    tcp: TcpFigures,
    #[serde(default)]
    stores: Vec<stores::StoreFigures>,
    runs: Vec<Record>,
}

/// Pipelined page writes and reads over TCP loopback (`tcp_throughput`).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TcpFigures {
    mib: usize,
    #[serde(deserialize_with = "nan_if_null")]
    write_gbs: f64,
    #[serde(deserialize_with = "nan_if_null")]
    read_gbs: f64,
}

/// How a run ended; in raw.json and runs.csv the text its Display gives (`ok`, `oom-killed`,
/// `skipped: WHY`, `failed: WHY`), read back by [`Outcome::parse`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Outcome {
    Ok,
    /// The kernel's cgroup OOM killer stopped it.
    OomKilled,
    /// Not run: why.
    Skipped(String),
    /// The JVM died: its exit and the frame HotSpot names.
    Failed(String),
}

impl Outcome {
    pub fn parse(s: &str) -> Result<Outcome, String> {
        Ok(match s {
            "ok" => Outcome::Ok,
            "oom-killed" => Outcome::OomKilled,
            _ => {
                if let Some(why) = s.strip_prefix("skipped: ") {
                    Outcome::Skipped(why.into())
                } else if let Some(why) = s.strip_prefix("failed: ") {
                    Outcome::Failed(why.into())
                } else {
                    return Err(format!("'{s}' is not a run's outcome"));
                }
            }
        })
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Ok => write!(f, "ok"),
            Outcome::OomKilled => write!(f, "oom-killed"),
            Outcome::Skipped(why) => write!(f, "skipped: {why}"),
            Outcome::Failed(why) => write!(f, "failed: {why}"),
        }
    }
}

impl From<Outcome> for String {
    fn from(o: Outcome) -> String {
        o.to_string()
    }
}

impl TryFrom<String> for Outcome {
    type Error = String;
    fn try_from(s: String) -> Result<Outcome, String> {
        Outcome::parse(&s)
    }
}

/// One run of one cell.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    pub rep: usize,
    pub workload: String,
    pub collector: String,
    pub mode: Mode,
    pub local: u32,
    #[serde(deserialize_with = "nan_if_null")]
    pub wall_ms: f64,
    /// The workload's own timing (its RESULT line).
    #[serde(deserialize_with = "nan_if_null")]
    pub workload_ms: f64,
    pub checksum: String,
    /// Finished, or why there is no timing.
    pub outcome: Outcome,
    /// The agent's stats document.
    pub stats: Option<StatsDoc>,
    /// The stats documents of a cluster run's executors (its `stats` is then empty: the
    /// driver is not paged).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub executors: Vec<StatsDoc>,
    /// The kernel baseline's figures: limit, peak usage, major faults, swap-ins.
    pub kernel: Option<kernel::KernelFigures>,
    /// CPU time the embedded memory server spent on this run (ms).
    #[serde(default)]
    pub server_cpu_ms: Option<f64>,
    /// Scrapes of the JVM's `/metrics` during the run (`memliner-scraped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrapes: Option<u64>,
    /// A service's phases: throughput and latency per operation (see `service`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service: Vec<service::Phase>,
}

/// JSON has no NaN: serde_json writes it as null; read null back as NaN.
fn nan_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

impl Record {
    pub fn ok(&self) -> bool {
        self.outcome == Outcome::Ok
    }

    /// A number from the agent's stats.
    pub fn stat(&self, f: impl Fn(&StatsDoc) -> Option<f64>) -> Option<f64> {
        self.stats.as_ref().and_then(f)
    }
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Collectors the GC hooks patch.
pub const HOOKED_COLLECTORS: [&str; 2] = ["G1", "Shenandoah"];

pub use memliner_cli::workloads::java_command;

/// One planned run.
#[derive(Clone, Debug)]
struct Planned {
    rep: usize,
    workload: BenchWorkload,
    collector: String,
    mode: Mode,
    local: u32,
}

fn plan(cfg: &BenchConfig) -> Vec<Planned> {
    let mut out = Vec::new();
    for rep in 0..cfg.reps {
        for c in &cfg.collectors {
            for w in &cfg.workloads {
                let java = matches!(w, BenchWorkload::Java(_));
                let service = *w == BenchWorkload::Cassandra;
                // Libraries nobody here wrote, at the services' budgets.
                let library = *w == BenchWorkload::Lucene;
                // The kernel's twin for the Java workloads, Spark's local mode (the cgroup
                // holds PySpark's python too, as the JVM's launcher: what the job needs beside
                // the heap, either way) and the service (its load runs outside the cgroup); not
                // for a cluster run's several heaps.
                let twin = java
                    || service
                    || library
                    || matches!(w, BenchWorkload::Spark(_, spark::Deploy::Local));
                // Spark jobs are long: the first collector only.
                if !java && *c != cfg.collectors[0] {
                    continue;
                }
                let p = |mode, local| Planned {
                    rep,
                    workload: w.clone(),
                    collector: c.clone(),
                    mode,
                    local,
                };
                out.push(p(Mode::NoAgent, 100));
                let locals: Vec<u32> = if java {
                    cfg.locals.clone()
                } else if service || library {
                    service::LOCALS.to_vec()
                } else {
                    SPARK_LOCALS.to_vec()
                };
                if cfg.kernel && twin {
                    out.push(p(Mode::KernelCalibrate, 100));
                }
                for &local in &locals {
                    // Alternate which policy goes first, so that neither always runs on a
                    // machine the other just warmed or disturbed.
                    // With the patched JDK (G1, Shenandoah) the hooked run joins the rotation;
                    // the pager without a network (in-process store) runs at every budget.
                    let mut order = vec![Mode::Baseline, Mode::Memliner];
                    if twin && local < 100 {
                        order.push(Mode::MemlinerInProcess);
                    }
                    // A service is measured over TCP too: where the memory server is another
                    // machine's.
                    if service && local < 100 {
                        order.push(Mode::MemlinerTcp);
                    }
                    if cfg.gc_hooks && !service && HOOKED_COLLECTORS.contains(&c.as_str()) {
                        order.push(Mode::MemlinerGcHooks);
                    }
                    let k = order.len();
                    order.rotate_left(rep % k);
                    for m in order {
                        if !cfg.kernel_only || (m == Mode::Memliner && local == 100) {
                            out.push(p(m, local));
                        }
                    }
                    // Sized from this repetition's calibration and memliner-at-100% runs
                    // (which come first).
                    if cfg.kernel && twin && local < 100 {
                        out.push(p(Mode::Kernel, local));
                        if !cfg.kernel_only {
                            out.push(p(Mode::MemlinerKernelHeap, local));
                            if java {
                                out.push(p(Mode::MemlinerInProcessKernelHeap, local));
                            }
                        }
                    }
                }
                let variants = cfg.variants && !cfg.kernel_only && *c == cfg.collectors[0];
                if variants && matches!(w, BenchWorkload::Java(Workload::Graph)) {
                    out.push(p(Mode::BaselineAssume, 25));
                    out.push(p(Mode::MemlinerClassStreams, 25));
                }
                // The data path's own variants, on every Java workload of the first
                // collector: arrival-order replacement, and faults delivered to handler
                // threads.
                if variants && java {
                    out.push(p(Mode::MemlinerFifo, 25));
                    out.push(p(Mode::MemlinerThreadFaults, 25));
                    out.push(p(Mode::MemlinerScraped, 25));
                    if twin {
                        out.push(p(Mode::MemlinerInProcessNoPauseReads, 25));
                        out.push(p(Mode::MemlinerInProcessNoCardHold, 25));
                    }
                }
                // The transports side by side: the default (the memliner cell), tcp, fabric,
                // in-process.
                if cfg.transports && !cfg.kernel_only && java {
                    out.push(p(Mode::MemlinerTcp, 25));
                    out.push(p(Mode::MemlinerFabric, 25));
                    if *c != cfg.collectors[0] {
                        out.push(p(Mode::MemlinerInProcess, 25));
                    }
                }
                if cfg.replicas && !cfg.kernel_only && java {
                    out.push(p(Mode::MemlinerReplicated, 25));
                }
                if cfg.checksums && !cfg.kernel_only && java {
                    out.push(p(Mode::MemlinerNoChecksums, 25));
                }
            }
        }
    }
    out
}

/// Runs the whole benchmark and writes the report files under `cfg.out`.
pub fn run(cfg: &BenchConfig) -> Result<PathBuf, String> {
    let root = memliner_cli::locate::project_root()?;
    let classes = workloads::ensure_built(&root)?;
    std::fs::create_dir_all(&cfg.out)
        .map_err(|e| format!("cannot create {}: {e}", cfg.out.display()))?;
    let spark_env = if cfg
        .workloads
        .iter()
        .any(|w| matches!(w, BenchWorkload::Spark(..)))
    {
        Some(spark::prepare(&root)?)
    } else {
        None
    };
    if cfg.workloads.contains(&BenchWorkload::Cassandra) {
        service::prepare(&root)?;
    }
    let lucene_cp = if cfg.workloads.contains(&BenchWorkload::Lucene) {
        Some(lucene::prepare(&root)?)
    } else {
        None
    };
    let kernel_skip = if cfg.kernel {
        kernel::available(&root).err()
    } else {
        Some("not asked for".to_string())
    };
    if let Some(why) = &kernel_skip {
        eprintln!("memliner: kernel baseline skipped: {why}");
    }

    let command_of = |p: &Planned| {
        command_for(
            &classes,
            spark_env.as_ref(),
            lucene_cp.as_deref(),
            cfg.heap_mb,
            p,
        )
    };
    let planned = plan(cfg);
    let bar = ProgressBar::new(planned.len() as u64 + 1);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {msg} [{elapsed_precise}, eta {eta}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let mut records: Vec<Record> = Vec::new();
    for p in &planned {
        bar.set_message(format!(
            "rep {} {} {} {} {}%",
            p.rep + 1,
            p.collector,
            p.workload.name(),
            p.mode.name(),
            p.local
        ));
        let what = format!(
            "{} {} {} {}%",
            p.workload.name(),
            p.collector,
            p.mode.name(),
            p.local
        );
        let rec = match p.mode {
            Mode::Kernel | Mode::KernelCalibrate => {
                let find = |mode: Mode| {
                    records.iter().rev().find(|r| {
                        r.rep == p.rep
                            && r.workload == p.workload.name()
                            && r.collector == p.collector
                            && r.mode == mode
                            && r.local == 100
                    })
                };
                let limit = match p.mode {
                    Mode::KernelCalibrate => Some(None),
                    _ => find(Mode::KernelCalibrate)
                        .and_then(|cal| kernel_limit(cal, p.local, cfg.heap_mb))
                        .map(Some),
                };
                match (&kernel_skip, limit) {
                    (Some(why), _) => skipped(p, why),
                    (None, None) => skipped(p, "no calibration run to size the limit from"),
                    (None, Some(limit)) => {
                        let cmd = command_of(p)?;
                        kernel::run(&root, limit.map(|l| l as u64), &cmd, p, &what)?
                    }
                }
            }
            m if m.at_kernel_heap() && !records.iter().any(|r| kernel_heap_of(r, p).is_some()) => {
                skipped(p, "the kernel run under the same limit did not finish")
            }
            _ => {
                let mut rc = run_config(p, spark_env.is_some());
                if let (true, Some(l)) = (rc.agent, &cfg.emulate_latency) {
                    rc.options.set("latency", l).map_err(|e| e.to_string())?;
                }
                if p.mode.at_kernel_heap() {
                    if let Some(heap) = records.iter().find_map(|r| kernel_heap_of(r, p)) {
                        rc.options.budget = Budget::Bytes(heap as u64 / 1024 * 1024);
                    }
                }
                let executors_dir = executors_stats_dir(p, &mut rc);
                let cmd = command_of(p)?;
                let scraper = (p.mode == Mode::MemlinerScraped).then(|| Scraper::start(&mut rc));
                let out = launch(&rc, &cmd, true);
                let scrapes = scraper.map(Scraper::stop);
                let out = out?;
                let executors = executors_dir
                    .as_deref()
                    .map_or_else(Vec::new, read_executors);
                let checked = out.checked(&what).and_then(|ok| match &executors_dir {
                    Some(_) if executors.len() != spark::EXECUTORS => Err(format!(
                        "{what}: {} executors wrote stats, not {}",
                        executors.len(),
                        spark::EXECUTORS
                    )),
                    _ => Ok(ok),
                });
                match checked {
                    Ok((checksum, ms)) => Record {
                        wall_ms: out.wall.as_secs_f64() * 1e3,
                        workload_ms: ms,
                        checksum,
                        stats: out.stats,
                        executors,
                        server_cpu_ms: out.server_cpu.map(|t| t.as_secs_f64() * 1e3),
                        scrapes,
                        service: service::parse(&out.stdout),
                        ..blank(p, Outcome::Ok)
                    },
                    // A JVM that died is a finding: recorded, reported and counted, and the
                    // matrix goes on (a wrong checksum still stops it, below).
                    Err(e) => {
                        bar.suspend(|| eprintln!("memliner: {e}"));
                        // HotSpot's crash report names the frame on the line after this.
                        let crash = out
                            .stdout
                            .lines()
                            .skip_while(|l| !l.starts_with("# Problematic frame"))
                            .nth(1)
                            .map(|l| l.trim_start_matches('#').trim().to_string());
                        blank(
                            p,
                            Outcome::Failed(format!(
                                "exit {}{}",
                                out.exit_code(),
                                crash.map(|c| format!(" ({c})")).unwrap_or_default()
                            )),
                        )
                    }
                }
            }
        };
        // Ctrl-C (or a kill) reached the JVM too: stop here, not start the next run.
        if let Some(sig) = memliner_cli::run::stop_requested() {
            return Err(format!(
                "stopped by signal {sig} during run {} of {} ({what})",
                records.len() + 1,
                planned.len()
            ));
        }
        // Every paged run must compute what the all-local run computed.
        if rec.ok() && rec.mode != Mode::NoAgent {
            let reference = records.iter().find(|r| {
                r.workload == rec.workload
                    && r.mode == Mode::NoAgent
                    && r.collector == rec.collector
            });
            if let Some(r) = reference {
                if r.checksum != rec.checksum {
                    return Err(format!(
                        "{what}: checksum {} differs from the all-local run's {}",
                        rec.checksum, r.checksum
                    ));
                }
            }
        }
        records.push(rec);
        bar.inc(1);
    }
    bar.set_message("tcp loopback");
    let (wgbs, rgbs) = tcp_throughput(cfg.tcp_mib, cfg.reps)?;
    let stores = if cfg.transports {
        bar.set_message("each transport's store alone");
        stores::measure(cfg.tcp_mib, cfg.reps.max(3))?
    } else {
        Vec::new()
    };
    bar.finish_with_message(format!("done in {:.0} s", started.elapsed().as_secs_f64()));

    let extras = report::Extras {
        tcp_write_gbs: wgbs,
        tcp_read_gbs: rgbs,
        stores,
        kernel_skipped: kernel_skip.filter(|_| cfg.kernel),
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    write_outputs(cfg, &records, &extras)
}

/// Writes report.md, runs.csv, raw.json and the plots for `records` into `cfg.out`.
fn write_outputs(
    cfg: &BenchConfig,
    records: &[Record],
    extras: &report::Extras,
) -> Result<PathBuf, String> {
    let (wgbs, rgbs) = (extras.tcp_write_gbs, extras.tcp_read_gbs);
    let records = records.to_vec();
    let md = report::markdown(cfg, &records, extras);
    let plots = plots::draw(cfg, &records, &cfg.out);
    let md = match &plots {
        Ok(files) => report::with_plots(md, files),
        Err(e) => format!("{md}\nPlots not drawn: {e}\n"),
    };
    let report_path = cfg.out.join("report.md");
    std::fs::write(&report_path, &md).map_err(|e| e.to_string())?;
    std::fs::write(cfg.out.join("runs.csv"), report::csv(&records)).map_err(|e| e.to_string())?;
    let raw = RawDoc {
        command: cfg.command.clone(),
        heap_mb: cfg.heap_mb,
        reps: cfg.reps,
        emulate_latency: cfg.emulate_latency.clone(),
        elapsed_s: extras.elapsed_s,
        kernel_skipped: extras.kernel_skipped.clone(),
        tcp: TcpFigures {
            mib: cfg.tcp_mib,
            write_gbs: wgbs,
            read_gbs: rgbs,
        },
        stores: extras.stores.clone(),
        runs: records,
    };
    std::fs::write(
        cfg.out.join("raw.json"),
        serde_json::to_string_pretty(&raw).unwrap_or_default(),
    )
    .map_err(|e| e.to_string())?;
    print!("{md}");
    Ok(report_path)
}

/// The cgroup limit that leaves the kernel's JVM the heap memory the agent's budget leaves its
/// own: what the JVM needs beside the heap in the calibration run (no limit) plus `local`% of
/// the heap. A heap that touches less than that is not limited at all by it (nor paged by the
/// agent).
fn kernel_limit(calibration: &Record, local: u32, heap_mb: u64) -> Option<f64> {
    let budget = (heap_mb << 20) as f64 * local as f64 / 100.0;
    kernel::same_heap_memory(calibration.kernel.as_ref()?, budget)
}

/// The heap's peak RSS (bytes) in `r`, if `r` is the finished kernel run of `p`'s cell.
fn kernel_heap_of(r: &Record, p: &Planned) -> Option<f64> {
    let same = r.rep == p.rep
        && r.workload == p.workload.name()
        && r.collector == p.collector
        && r.local == p.local
        && r.mode == Mode::Kernel
        && r.ok();
    same.then(|| r.kernel.as_ref()?.get(|k| k.max_heap))
        .flatten()
        .filter(|h| *h > 0.0)
}

/// For a paged cluster run: the directory its executors write their stats files into (they
/// share one agent string), emptied, and set as `rc`'s stats path.
fn executors_stats_dir(p: &Planned, rc: &mut RunConfig) -> Option<PathBuf> {
    if !rc.agent || !matches!(p.workload, BenchWorkload::Spark(_, spark::Deploy::Cluster)) {
        return None;
    }
    let dir = std::env::temp_dir().join(format!("memliner-bench-executors-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    rc.options.stats = Some(format!("{}/", dir.display()));
    Some(dir)
}

/// The executors' stats documents in `dir`, which goes.
fn read_executors(dir: &Path) -> Vec<StatsDoc> {
    let docs =
        memliner_cli::aggregate::load(&[dir.to_path_buf()]).map_or_else(|_| Vec::new(), |(j, _)| j);
    let _ = std::fs::remove_dir_all(dir);
    docs.into_iter().map(|j| j.doc).collect()
}

/// A record of `p` with no figures yet.
fn blank(p: &Planned, outcome: Outcome) -> Record {
    Record {
        rep: p.rep,
        workload: p.workload.name(),
        collector: p.collector.clone(),
        mode: p.mode,
        local: p.local,
        wall_ms: f64::NAN,
        workload_ms: f64::NAN,
        checksum: String::new(),
        outcome,
        stats: None,
        executors: Vec::new(),
        kernel: None,
        server_cpu_ms: None,
        scrapes: None,
        service: Vec::new(),
    }
}

/// Writes the report, CSV and plots again from a bench's raw.json into `out` (for a report
/// format changed after the runs, without running them again).
pub fn rerender(raw: &Path, out: PathBuf) -> Result<PathBuf, String> {
    let text = std::fs::read_to_string(raw).map_err(|e| format!("{}: {e}", raw.display()))?;
    let doc: RawDoc = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", raw.display()))?;
    let records = doc.runs;
    let mut collectors: Vec<String> = Vec::new();
    let mut locals: Vec<u32> = Vec::new();
    for r in &records {
        if !collectors.contains(&r.collector) {
            collectors.push(r.collector.clone());
        }
        if !locals.contains(&r.local) {
            locals.push(r.local);
        }
    }
    locals.sort_unstable_by(|a, b| b.cmp(a));
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let cfg = BenchConfig {
        reps: doc.reps,
        collectors,
        workloads: Vec::new(),
        locals,
        heap_mb: doc.heap_mb,
        kernel: true,
        kernel_only: false,
        out,
        tcp_mib: doc.tcp.mib,
        command: doc.command,
        gc_hooks: records.iter().any(|r| r.mode == Mode::MemlinerGcHooks),
        emulate_latency: doc.emulate_latency,
        transports: records
            .iter()
            .any(|r| matches!(r.mode, Mode::MemlinerFabric | Mode::MemlinerTcp)),
        replicas: records.iter().any(|r| r.mode == Mode::MemlinerReplicated),
        checksums: records.iter().any(|r| r.mode == Mode::MemlinerNoChecksums),
        variants: records.iter().any(|r| r.mode == Mode::MemlinerFifo),
    };
    let extras = report::Extras {
        tcp_write_gbs: doc.tcp.write_gbs,
        tcp_read_gbs: doc.tcp.read_gbs,
        stores: doc.stores,
        kernel_skipped: doc.kernel_skipped,
        elapsed_s: doc.elapsed_s,
    };
    write_outputs(&cfg, &records, &extras)
}

fn skipped(p: &Planned, why: &str) -> Record {
    blank(p, Outcome::Skipped(why.into()))
}

fn run_config(p: &Planned, spark: bool) -> RunConfig {
    let base = RunConfig {
        agent_env: match p.workload {
            BenchWorkload::Spark(..) if spark => Some(spark::AGENT_ENV.into()),
            BenchWorkload::Cassandra => Some(service::AGENT_ENV.into()),
            _ => None,
        },
        ..RunConfig::default()
    }
    .local(p.local);
    match p.mode {
        Mode::NoAgent | Mode::Kernel | Mode::KernelCalibrate => RunConfig {
            agent: false,
            ..base
        },
        Mode::Baseline => base.with(|o| o.policy = Policy::Baseline),
        Mode::BaselineAssume => base.with(|o| {
            o.policy = Policy::Baseline;
            o.dirty = Dirty::Assume;
        }),
        Mode::MemlinerClassStreams => base.with(|o| o.streams = Streams::Class),
        Mode::MemlinerFifo => base.with(|o| o.reclaim = Reclaim::Fifo),
        // `server=local`: pages in the JVM's own memory.
        Mode::MemlinerInProcess | Mode::MemlinerInProcessKernelHeap => {
            base.with(|o| o.server_given = true)
        }
        Mode::MemlinerInProcessNoPauseReads => base.with(|o| {
            o.server_given = true;
            o.pause_reads = PauseReads::Off;
        }),
        Mode::MemlinerInProcessNoCardHold => base.with(|o| {
            o.server_given = true;
            o.card_hold = CardHold::Off;
        }),
        Mode::MemlinerThreadFaults => base.with(|o| o.faults = FaultDelivery::Thread),
        Mode::MemlinerNoChecksums => base.with(|o| o.checksums = Checksums::Off),
        Mode::MemlinerGcHooks => RunConfig {
            gc_hooks: memliner_cli::run::GcHooks::On,
            ..base
        },
        Mode::MemlinerFabric => RunConfig {
            transport: memliner_cli::run::Transport::Fabric,
            ..base
        },
        Mode::MemlinerTcp => RunConfig {
            transport: memliner_cli::run::Transport::Tcp,
            ..base
        },
        Mode::MemlinerReplicated => RunConfig {
            embedded_servers: 2,
            ..base
        },
        Mode::Memliner | Mode::MemlinerKernelHeap | Mode::MemlinerScraped => base,
    }
}

/// Scrapes a bench JVM's `/metrics` every second while it runs, as Prometheus would.
struct Scraper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl Scraper {
    /// Sets `rc` to serve `/metrics` on a free port with its target file in a temporary
    /// directory, and starts scraping once the file names the port.
    fn start(rc: &mut RunConfig) -> Scraper {
        use std::sync::atomic::Ordering;
        let file = std::env::temp_dir().join(format!(
            "memliner-bench-metrics-{}.json",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&file);
        rc.options.metrics = Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
        rc.options.metrics_file = Some(file.display().to_string());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut scrapes = 0;
            let mut addr = None;
            while !flag.load(Ordering::SeqCst) {
                // Until the agent names its port: look every 50 ms; then scrape each second.
                let pause = match &addr {
                    None => {
                        addr = memliner_contracts::targets::TargetGroup::read(&file)
                            .and_then(|g| g.addr().map(str::to_string));
                        std::time::Duration::from_millis(50)
                    }
                    Some(a) => {
                        if memliner_cli::scrape::get(a, std::time::Duration::from_secs(2)).is_ok() {
                            scrapes += 1;
                        }
                        std::time::Duration::from_secs(1)
                    }
                };
                std::thread::park_timeout(pause);
            }
            let _ = std::fs::remove_file(&file);
            scrapes
        });
        Scraper { stop, thread }
    }

    /// Ends the scraping; returns how many scrapes were answered.
    fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.thread.thread().unpark();
        self.thread.join().unwrap_or(0)
    }
}

fn command_for(
    classes: &Path,
    spark_env: Option<&spark::Env>,
    lucene_cp: Option<&str>,
    heap_mb: u64,
    p: &Planned,
) -> Result<Vec<String>, String> {
    let patched = match p.mode {
        Mode::MemlinerGcHooks => Some(
            memliner_cli::locate::patched_java()
                .ok_or("memliner-gc-hooks needs target/jdk-memliner (scripts/build-jdk.sh)")?,
        ),
        _ => None,
    };
    match &p.workload {
        BenchWorkload::Java(w) => {
            let mut cmd = java_command(classes, *w, &p.collector, heap_mb);
            if let Some(java) = patched {
                cmd[0] = java.display().to_string();
            }
            Ok(cmd)
        }
        BenchWorkload::Spark(job, deploy) => {
            // target/jdk-memliner/bin/java -> target/jdk-memliner
            let home = patched
                .as_deref()
                .and_then(Path::parent)
                .and_then(Path::parent);
            Ok(spark_env
                .ok_or("spark workloads need the spark environment")?
                .command(*job, *deploy, &p.collector, heap_mb, home))
        }
        BenchWorkload::Cassandra => service::command(
            &memliner_cli::locate::project_root()?,
            heap_mb,
            &p.collector,
        ),
        BenchWorkload::Lucene => {
            let java = patched.unwrap_or_else(memliner_cli::locate::java);
            Ok(lucene::command(
                &java.display().to_string(),
                lucene_cp.ok_or("lucene needs its classpath (scripts/lucene.sh)")?,
                heap_mb,
                &p.collector,
            ))
        }
    }
}

/// Pipelined page reads and writes over TCP loopback: (write GB/s, read GB/s) medians.
pub fn tcp_throughput(mib: usize, reps: usize) -> Result<(f64, f64), String> {
    use swap_backend::{ClientOptions, PageStore, TcpStore, PAGE_SIZE};
    let server = memliner_cli::run::embedded_server(memliner_cli::run::Transport::Tcp)?;
    let store = TcpStore::connect(
        &server.handle.local_addr().to_string(),
        ClientOptions {
            namespace: "bench".into(),
            connections: 1,
            ..ClientOptions::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let pages = mib * 256;
    let batch = 1024;
    let data: Vec<u8> = (0..batch * PAGE_SIZE).map(|i| i as u8).collect();
    let mut buf = vec![0u8; batch * PAGE_SIZE];
    let (mut w, mut r) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let t = Instant::now();
        for start in (0..pages).step_by(batch) {
            let ids: Vec<u64> = (start as u64..(start + batch) as u64).collect();
            store.write_pages(&ids, &data).map_err(|e| e.to_string())?;
        }
        w.push((pages * PAGE_SIZE) as f64 / t.elapsed().as_secs_f64() / 1e9);
        let t = Instant::now();
        for start in (0..pages).step_by(batch) {
            let ids: Vec<u64> = (start as u64..(start + batch) as u64).collect();
            store
                .read_pages(&ids, &mut buf)
                .map_err(|e| e.to_string())?;
        }
        r.push((pages * PAGE_SIZE) as f64 / t.elapsed().as_secs_f64() / 1e9);
        if buf != data {
            return Err("pages read back differ from those written".into());
        }
    }
    drop(store);
    server.stop();
    Ok((median(w), median(r)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The data path's variants run at 25% on the first collector only, and not at all
    /// with `--no-variants`.
    #[test]
    fn variants_run_on_the_first_collector_unless_left_out() {
        let mut cfg = BenchConfig::full(PathBuf::from("/nonexistent"));
        cfg.reps = 1;
        cfg.gc_hooks = false;
        cfg.kernel = false;
        let is_variant = |m: Mode| {
            matches!(
                m,
                Mode::MemlinerFifo
                    | Mode::MemlinerThreadFaults
                    | Mode::MemlinerScraped
                    | Mode::MemlinerInProcessNoPauseReads
                    | Mode::MemlinerInProcessNoCardHold
                    | Mode::BaselineAssume
                    | Mode::MemlinerClassStreams
            )
        };
        let with = plan(&cfg);
        let variants: Vec<&Planned> = with.iter().filter(|p| is_variant(p.mode)).collect();
        // Five for each Java workload, two more for graph.
        assert_eq!(variants.len(), 5 * 3 + 2, "{variants:?}");
        assert!(variants
            .iter()
            .all(|p| p.collector == "G1" && p.local == 25));
        cfg.variants = false;
        let without = plan(&cfg);
        assert!(without.iter().all(|p| !is_variant(p.mode)));
        assert_eq!(without.len(), with.len() - variants.len());
    }
}
