//! `memliner bench`: the foundation's figures, measured side by side in one run.
//!
//! 1. agent overhead: the graph workload with no agent vs the agent at 100% local;
//! 2. fault service from the in-process store at 25% local (handler-side latency);
//! 3. TCP loopback throughput of pipelined page reads and writes;
//! 4. 25% local with `policy=baseline` vs all-local, per collector: wall-time ratio and the
//!    GC threads' share of remote faults.
//!
//! JVM configurations are interleaved within each repetition so that drift on a shared machine
//! hits all alike; ratios are of medians over repetitions.

use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};

use crate::run::{launch, RunConfig};
use crate::workloads::{self, Workload};

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    pub reps: usize,
    pub collectors: Vec<String>,
    pub heap_mb: u64,
    pub out: PathBuf,
    pub tcp_mib: usize,
    /// The command line that produced the report, for the report.
    pub command: String,
}

impl BenchConfig {
    pub fn quick(out: PathBuf) -> Self {
        BenchConfig {
            reps: 3,
            collectors: vec!["G1".into()],
            heap_mb: 64,
            out,
            tcp_mib: 64,
            command: "memliner bench --quick".into(),
        }
    }

    pub fn full(out: PathBuf) -> Self {
        BenchConfig {
            reps: 5,
            collectors: vec!["G1".into(), "Parallel".into(), "Shenandoah".into()],
            heap_mb: 64,
            out,
            tcp_mib: 256,
            command: "memliner bench".into(),
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
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

/// One JVM run of a workload; returns (process wall ms, workload ms, stats).
fn workload_run(
    classes: &Path,
    workload: Workload,
    collector: &str,
    heap_mb: u64,
    rounds: u32,
    cfg: &RunConfig,
) -> Result<(f64, f64, Option<Value>), String> {
    let mut cmd: Vec<String> = vec![
        crate::locate::java().display().to_string(),
        format!("-XX:+Use{collector}GC"),
        format!("-Xms{heap_mb}m"),
        format!("-Xmx{heap_mb}m"),
        "-cp".into(),
        classes.display().to_string(),
        workload.class().into(),
    ];
    // Scale the live set with the heap (the defaults are sized for 64 MiB).
    let scaled = |n: u64| (n * heap_mb / 64).to_string();
    match workload {
        Workload::Graph => cmd.extend([
            "--nodes".into(),
            scaled(60_000),
            "--rounds".into(),
            rounds.to_string(),
        ]),
        Workload::Kv => cmd.extend([
            "--keys".into(),
            scaled(200_000),
            "--capacity".into(),
            scaled(100_000),
        ]),
    }
    let out = launch(cfg, &cmd, true)?;
    let name = workload.name();
    let result = workloads::parse_result(&out.stdout)
        .ok_or_else(|| format!("{name}: no RESULT line; stderr: {}", out.stderr.trim()))?;
    if !out.status.success() || workloads::field(&result, "verified") != Some("true") {
        return Err(format!(
            "{name} run failed ({}): {}",
            out.status,
            out.stderr.trim()
        ));
    }
    let ms: f64 = workloads::field(&result, "elapsed_ms")
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    Ok((out.wall.as_secs_f64() * 1e3, ms, out.stats))
}

/// Pipelined page reads and writes over TCP loopback: (write GB/s, read GB/s) medians.
pub fn tcp_throughput(mib: usize, reps: usize) -> Result<(f64, f64), String> {
    use swap_backend::{PageStore, TcpOptions, TcpStore, PAGE_SIZE};
    let server = crate::run::embedded_server()?;
    let store = TcpStore::connect(
        &server.local_addr().to_string(),
        TcpOptions {
            namespace: "bench".into(),
            connections: 1,
            ..TcpOptions::default()
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

fn gf(v: &Option<Value>, path: &[&str]) -> Option<f64> {
    let mut cur = v.as_ref()?;
    for k in path {
        cur = cur.get(k)?;
    }
    cur.as_f64()
}

/// Runs the whole benchmark and writes `report.md` and `raw.json` under `cfg.out`.
pub fn run(cfg: &BenchConfig) -> Result<PathBuf, String> {
    let root = crate::locate::project_root()?;
    let classes = workloads::ensure_built(&root)?;
    std::fs::create_dir_all(&cfg.out)
        .map_err(|e| format!("cannot create {}: {e}", cfg.out.display()))?;

    let none = RunConfig {
        agent: false,
        ..RunConfig::default()
    };
    let full_local = RunConfig {
        local: "100%".into(),
        ..RunConfig::default()
    };
    let assume = RunConfig {
        local: "25%".into(),
        dirty: Some("assume".into()),
        ..RunConfig::default()
    };
    let in_process = RunConfig {
        local: "25%".into(),
        server: Some("local".into()),
        ..RunConfig::default()
    };
    let quarter = RunConfig {
        local: "25%".into(),
        ..RunConfig::default()
    };

    // Plan: per repetition and collector, each workload without the agent and at 25%; for the
    // first collector also the graph workload at 100% local and with the in-process store.
    let first = cfg.collectors[0].clone();
    let mut plan: Vec<(String, Workload, &str, &RunConfig)> = Vec::new();
    for _ in 0..cfg.reps {
        for c in &cfg.collectors {
            for w in Workload::ALL {
                plan.push((c.clone(), w, "no-agent", &none));
                plan.push((c.clone(), w, "baseline-25", &quarter));
            }
            if *c == first {
                plan.push((c.clone(), Workload::Graph, "long-no-agent", &none));
                plan.push((c.clone(), Workload::Graph, "long-agent-100", &full_local));
                plan.push((c.clone(), Workload::Graph, "in-process-25", &in_process));
                plan.push((c.clone(), Workload::Graph, "assume-dirty-25", &assume));
            }
        }
    }
    let bar = ProgressBar::new(plan.len() as u64 + 1);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {msg} [{elapsed_precise}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut raw = Vec::new();
    for (collector, w, name, rc) in &plan {
        bar.set_message(format!("{collector} {} {name}", w.name()));
        // The overhead rows ("long-") run for seconds, so that JVM start-up and the first
        // touch of the heap do not dominate them.
        let rounds = if name.starts_with("long-") { 60 } else { 6 };
        let (wall, ms, stats) = workload_run(&classes, *w, collector, cfg.heap_mb, rounds, rc)?;
        raw.push(
            json!({"collector": collector, "workload": w.name(), "config": name,
                        "wall_ms": wall, "workload_ms": ms, "stats": stats}),
        );
        bar.inc(1);
    }
    bar.set_message("tcp loopback");
    let (wgbs, rgbs) = tcp_throughput(cfg.tcp_mib, cfg.reps)?;
    bar.finish_with_message("done");

    let pick_w = |collector: &str, w: Workload, config: &str| -> Vec<&Value> {
        raw.iter()
            .filter(|r| {
                r["collector"] == collector && r["config"] == config && r["workload"] == w.name()
            })
            .collect()
    };
    let pick = |collector: &str, config: &str| pick_w(collector, Workload::Graph, config);
    let med =
        |rows: &[&Value], key: &str| median(rows.iter().filter_map(|r| r[key].as_f64()).collect());
    let med_stat = |rows: &[&Value], path: &[&str]| {
        median(
            rows.iter()
                .filter_map(|r| gf(&Some(r["stats"].clone()), path))
                .collect(),
        )
    };

    let mut md = String::new();
    md.push_str("# memliner bench\n\n");
    md.push_str(&format!(
        "{} MiB heap (-Xms = -Xmx), median of {} repetitions, configurations interleaved. \
         Ratios are of medians measured in this run.\n\n",
        cfg.heap_mb, cfg.reps
    ));
    let none_first = pick(&first, "long-no-agent");
    let agent100 = pick(&first, "long-agent-100");
    md.push_str(
        "## Agent overhead at 100% local (graph, 60 rounds)\n\n| | process wall ms | workload ms |\n|---|---|---|\n",
    );
    md.push_str(&format!(
        "| no agent ({first}) | {:.0} | {:.0} |\n| agent, local=100% | {:.0} | {:.0} |\n| ratio | {:.3} | {:.3} |\n\n",
        med(&none_first, "wall_ms"),
        med(&none_first, "workload_ms"),
        med(&agent100, "wall_ms"),
        med(&agent100, "workload_ms"),
        med(&agent100, "wall_ms") / med(&none_first, "wall_ms"),
        med(&agent100, "workload_ms") / med(&none_first, "workload_ms"),
    ));
    let inproc = pick(&first, "in-process-25");
    md.push_str("## Fault service, in-process store, 25% local (handler side)\n\n");
    md.push_str(&format!(
        "| faults | p50 us | p99 us |\n|---|---|---|\n| all | {:.2} | {:.2} |\n| remote (fetched) | {:.2} | {:.2} |\n\n",
        med_stat(&inproc, &["pager", "latency", "all", "p50_us"]),
        med_stat(&inproc, &["pager", "latency", "all", "p99_us"]),
        med_stat(&inproc, &["pager", "latency", "remote", "p50_us"]),
        med_stat(&inproc, &["pager", "latency", "remote", "p99_us"]),
    ));
    let track = pick(&first, "baseline-25");
    let assume = pick(&first, "assume-dirty-25");
    md.push_str(&format!(
        "## Dirty tracking at 25% local ({first}, graph, TCP)\n\n"
    ));
    md.push_str("| dirty= | wall ms | write faults | pages written | clean evictions |\n|---|---|---|---|---|\n");
    for (label, rows) in [("track", &track), ("assume", &assume)] {
        md.push_str(&format!(
            "| {label} | {:.0} | {:.0} | {:.0} | {:.0} |\n",
            med(rows, "wall_ms"),
            med_stat(rows, &["faults", "write"]),
            med_stat(rows, &["pager", "remote", "pages_written"]),
            med_stat(rows, &["pager", "evictions", "clean"]),
        ));
    }
    md.push_str(&format!(
        "\nassume/track wall-time ratio: {:.3}\n\n",
        med(&assume, "wall_ms") / med(&track, "wall_ms")
    ));
    md.push_str(&format!(
        "## TCP loopback, pipelined batches of 1024 pages, {} MiB\n\n| direction | GB/s |\n|---|---|\n| write | {wgbs:.2} |\n| read | {rgbs:.2} |\n\n",
        cfg.tcp_mib
    ));
    md.push_str("## 25% local, policy=baseline, TCP loopback server, vs no agent\n\n");
    md.push_str("| workload | collector | all-local ms | 25% ms | slowdown | GC share of remote faults | GC share of all faults | remote faults | TCP fault p50 us |\n|---|---|---|---|---|---|---|---|---|\n");
    let mut summary = Vec::new();
    for w in Workload::ALL {
        for c in &cfg.collectors {
            let n = pick_w(c, w, "no-agent");
            let q = pick_w(c, w, "baseline-25");
            let slow = med(&q, "wall_ms") / med(&n, "wall_ms");
            let share = med_stat(&q, &["faults", "gc_share_of_remote"]);
            md.push_str(&format!(
                "| {} | {c} | {:.0} | {:.0} | {slow:.2}x | {:.1}% | {:.1}% | {:.0} | {:.1} |\n",
                w.name(),
                med(&n, "wall_ms"),
                med(&q, "wall_ms"),
                share * 100.0,
                med_stat(&q, &["faults", "gc_share_of_all"]) * 100.0,
                med_stat(&q, &["faults", "remote"]),
                med_stat(&q, &["pager", "latency", "remote", "p50_us"]),
            ));
            summary.push(json!({"workload": w.name(), "collector": c, "slowdown_25": slow, "gc_share_of_remote": share}));
        }
    }
    md.push_str(&format!("\nCommand: `{}`.\n", cfg.command));
    let report = cfg.out.join("report.md");
    std::fs::write(&report, &md).map_err(|e| e.to_string())?;
    let raw_doc = json!({
        "heap_mb": cfg.heap_mb, "reps": cfg.reps,
        "tcp": {"mib": cfg.tcp_mib, "write_gbs": wgbs, "read_gbs": rgbs},
        "summary": summary, "runs": raw,
    });
    std::fs::write(
        cfg.out.join("raw.json"),
        serde_json::to_string_pretty(&raw_doc).unwrap_or_default(),
    )
    .map_err(|e| e.to_string())?;
    print!("{md}");
    Ok(report)
}
