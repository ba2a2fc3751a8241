//! The bench's Markdown report and CSV, from the run records. Every ratio is of medians
//! measured in the same run.

use std::fmt::Write;

use memliner_contracts::model::GcActivity;
use memliner_contracts::model::ThreadClass;
use memliner_contracts::stats::{
    ActivityDoc, GcHooksDoc, PagerDoc, Percentiles, PrefetchClassDoc, StatsDoc,
};

use super::cells::{cell, med, paged_cells, paged_workloads, pairs, workloads_of};
use super::kernel::KernelFigures;
use super::{median, BenchConfig, Mode, Record};

/// Figures measured outside the matrix.
pub struct Extras {
    pub tcp_write_gbs: f64,
    pub tcp_read_gbs: f64,
    /// Each transport's store alone (`--transports`).
    pub stores: Vec<super::stores::StoreFigures>,
    pub kernel_skipped: Option<String>,
    pub elapsed_s: f64,
}

/// A thread class of the tables and plots, by its stats name.
fn class_named(class: &str) -> ThreadClass {
    ThreadClass::from_name(class).unwrap_or_else(|| panic!("no thread class '{class}'"))
}

/// Remote faults of a class; `other` takes in the JIT and VM threads too (the tables and
/// plots show four classes).
pub fn class_remote(r: &Record, class: &str) -> Option<f64> {
    let by = &r.stats.as_ref()?.faults.by_class;
    Some(if class == "other" {
        (by.jit.remote + by.vm.remote + by.other.remote) as f64
    } else {
        by.get(class_named(class)).remote as f64
    })
}

/// Application demand faults: pages application threads waited for from the server.
pub fn app_demand(r: &Record) -> Option<f64> {
    class_remote(r, "application")
}

/// A prefetch figure of one stream class (`all`: every class).
pub fn prefetch(
    r: &Record,
    class: &str,
    f: impl Fn(&PrefetchClassDoc) -> Option<f64>,
) -> Option<f64> {
    let pf = r.stats.as_ref()?.prefetch.as_ref()?;
    if class == "all" {
        f(&pf.all)
    } else {
        f(pf.by_class.get(class_named(class)))
    }
}

/// The pages a prefetch figure counts.
pub fn pages(p: &PrefetchClassDoc) -> Option<f64> {
    Some(p.pages as f64)
}

pub fn accuracy(p: &PrefetchClassDoc) -> Option<f64> {
    p.accuracy
}

pub fn coverage(p: &PrefetchClassDoc) -> Option<f64> {
    p.coverage
}

fn wall(r: &Record) -> Option<f64> {
    Some(r.wall_ms)
}

fn fmt(v: f64, digits: usize) -> String {
    if v.is_finite() {
        format!("{v:.digits$}")
    } else {
        "–".into()
    }
}

fn pct(v: f64) -> String {
    if v.is_finite() {
        format!("{:.1}%", v * 100.0)
    } else {
        "–".into()
    }
}

/// Why a cell has no median: every run was OOM-killed or skipped.
fn outcome_note(cell: &[&Record]) -> Option<String> {
    if cell.is_empty() || cell.iter().any(|r| r.ok()) {
        return None;
    }
    Some(cell[0].outcome.to_string())
}

pub fn markdown(cfg: &BenchConfig, rs: &[Record], x: &Extras) -> String {
    let mut md = String::new();
    let first = &cfg.collectors[0];
    let ok_runs = rs.iter().filter(|r| r.ok()).count();
    let paged_ok = rs
        .iter()
        .filter(|r| r.ok() && r.mode != Mode::NoAgent)
        .count();
    let failed: Vec<&Record> = rs
        .iter()
        .filter(|r| matches!(r.outcome, super::Outcome::Failed(_)))
        .collect();
    let _ = writeln!(md, "# memliner bench\n");
    let _ = writeln!(
        md,
        "{} MiB heap (-Xms = -Xmx), {} repetitions, configurations interleaved; every figure is \
         the median of the repetitions and every ratio a ratio of medians from this run. \
         {ok_runs} runs finished; all {paged_ok} paged and kernel runs computed the checksum \
         of the all-local run. Took {:.1} min. Command: `{}`.\n",
        cfg.heap_mb,
        cfg.reps,
        x.elapsed_s / 60.0,
        cfg.command
    );
    if let Some(l) = &cfg.emulate_latency {
        let _ = writeln!(
            md,
            "**Emulated latency: every request of every paged run to its page store took at \
             least {l}** (`latency={l}`): these figures are a model, not a measurement of a \
             fabric. The memliner-in-process rows (pages in the JVM's own memory, plus this \
             latency) approximate one-sided RDMA reads.\n"
        );
    }
    if !failed.is_empty() {
        let _ = writeln!(
            md,
            "**{} runs failed** (left out of every median):\n",
            failed.len()
        );
        for r in &failed {
            let _ = writeln!(
                md,
                "- {} {} {} {}% rep {}: {}",
                r.workload,
                r.collector,
                r.mode.name(),
                r.local,
                r.rep,
                r.outcome
            );
        }
        let _ = writeln!(md);
    }
    let _ = writeln!(
        md,
        "Modes: **no-agent** (all local), **baseline** (`policy=baseline`: one global prefetch \
         stream, every page admitted alike, every read-in page write-protected to track \
         dirtiness), **memliner** (`policy=memliner`: pages the GC reads admitted cold, at once \
         for concurrent tracing and when the pause ends for stop-the-world work; per-thread \
         prefetch streams; dirty tracking per thread class while it pays), \
         **memliner-in-process** (memliner with the store in the JVM's own memory: the pager \
         without a network), **kernel-zram** (no agent; the kernel swaps to zram under a \
         cgroup v1 limit that leaves the JVM the same heap memory as the agent's budget). \
         Both policies replace pages with the kernel's active and inactive lists and \
         working-set detection (`reclaim=lru`) and drop the collector's dead space after \
         every collection. Local % is of the heap; memory servers are embedded (`unix://` \
         memory files the JVM reads and writes itself where the host has them, else loopback \
         TCP; the `memliner` rows of the transports section say which).\n"
    );
    if let Some(why) = &x.kernel_skipped {
        let _ = writeln!(md, "Kernel baseline skipped: {why}.\n");
    }

    super::versus_kernel::section(&mut md, cfg, rs);

    // Headline.
    if rs
        .iter()
        .any(|r| r.workload == "graph" && r.collector == *first && r.mode == Mode::Baseline)
    {
        let b = cell(rs, "graph", first, Mode::Baseline, 25);
        let m = cell(rs, "graph", first, Mode::Memliner, 25);
        let k = cell(rs, "graph", first, Mode::Kernel, 25);
        let n = cell(rs, "graph", first, Mode::NoAgent, 100);
        let (bw, mw, nw, kw) = (med(&b, wall), med(&m, wall), med(&n, wall), med(&k, wall));
        let (ba, ma) = (med(&b, app_demand), med(&m, app_demand));
        let acc = |c: &[&Record]| med(c, |r| prefetch(r, "application", accuracy));
        let cov = |c: &[&Record]| med(c, |r| prefetch(r, "application", coverage));
        let share = |c: &[&Record]| med(c, |r| r.stat(|d| d.faults.gc_share_of_remote));
        let _ = writeln!(
            md,
            "## Headline: {first}, graph, 25% local — memliner vs baseline\n"
        );
        let _ = writeln!(
            md,
            "| | baseline | memliner | memliner vs baseline | target |\n|---|---|---|---|---|"
        );
        let _ = writeln!(
            md,
            "| wall ms (all-local {}) | {} | {} | **{}x faster** | ≥ 1.5x |",
            fmt(nw, 0),
            fmt(bw, 0),
            fmt(mw, 0),
            fmt(bw / mw, 2)
        );
        let _ = writeln!(
            md,
            "| application demand faults | {} | {} | **{} fewer** | ≥ 40% |",
            fmt(ba, 0),
            fmt(ma, 0),
            pct(1.0 - ma / ba)
        );
        let _ = writeln!(
            md,
            "| application-stream prefetch accuracy | {} | {} | | ≥ 80% |",
            pct(acc(&b)),
            pct(acc(&m))
        );
        let _ = writeln!(
            md,
            "| application-stream prefetch coverage | {} | {} | | ≥ 60% |",
            pct(cov(&b)),
            pct(cov(&m))
        );
        let _ = writeln!(
            md,
            "| GC share of remote faults | {} | {} | | |",
            pct(share(&b)),
            pct(share(&m))
        );
        let _ = writeln!(
            md,
            "| kernel-zram, same heap share | {} ms | | memliner/kernel {}x | |\n",
            outcome_note(&k).unwrap_or_else(|| fmt(kw, 0)),
            fmt(mw / kw, 1)
        );
    }

    // Slowdowns.
    let _ = writeln!(md, "## Slowdown vs all-local\n");
    let _ = writeln!(
        md,
        "Median wall time over the median all-local wall time of the same workload and collector.\n"
    );
    let _ = writeln!(
        md,
        "| workload | collector | local | all-local ms | baseline | memliner | kernel-zram | memliner speedup over baseline |\n|---|---|---|---|---|---|---|---|"
    );
    for (w, c) in pairs(cfg, rs) {
        let c = &c;
        let n = med(&cell(rs, &w, c, Mode::NoAgent, 100), wall);
        for &l in &cfg.locals {
            if !rs
                .iter()
                .any(|r| r.workload == w && r.collector == *c && r.local == l)
            {
                continue;
            }
            let b = med(&cell(rs, &w, c, Mode::Baseline, l), wall);
            let m = med(&cell(rs, &w, c, Mode::Memliner, l), wall);
            let kc = cell(rs, &w, c, Mode::Kernel, l);
            let k = med(&kc, wall);
            let kcell = if l == 100 || kc.is_empty() {
                "".into()
            } else {
                outcome_note(&kc).unwrap_or_else(|| format!("{}x", fmt(k / n, 2)))
            };
            let _ = writeln!(
                md,
                "| {w} | {c} | {l}% | {} | {}x | {}x | {kcell} | {}x |",
                fmt(n, 0),
                fmt(b / n, 2),
                fmt(m / n, 2),
                fmt(b / m, 2)
            );
        }
    }

    gc_hooks_section(&mut md, cfg, rs);

    agent_sections(&mut md, cfg, rs);

    super::replacement::section(&mut md, cfg, rs);

    // The data path's targets, per Java workload of the first collector.
    let mut target_rows = String::new();
    for w in paged_workloads(rs) {
        let n = med(&cell(rs, &w, first, Mode::NoAgent, 100), wall);
        let tcp = cell(rs, &w, first, Mode::Memliner, 25);
        let local = cell(rs, &w, first, Mode::MemlinerInProcess, 25);
        let full = cell(rs, &w, first, Mode::Memliner, 100);
        if tcp.is_empty() {
            continue;
        }
        let lat = |f: fn(&Percentiles) -> Option<f64>| {
            med(&tcp, |r| {
                r.stat(|d| f(&d.pager.as_ref()?.latency.thread_remote))
            })
        };
        let _ = writeln!(
            target_rows,
            "| {w} | {}x (<= 6x) | {}x (<= 3x) | {} / {} us (<= 15 / 100) | {}% (<= 3%) |",
            fmt(med(&tcp, wall) / n, 1),
            fmt(med(&local, wall) / n, 1),
            fmt(lat(|p| p.p50_us), 1),
            fmt(lat(|p| p.p99_us), 0),
            fmt((med(&full, wall) / n - 1.0) * 100.0, 1),
        );
    }
    if !target_rows.is_empty() {
        let _ = writeln!(
            md,
            "\n## Data-path targets, {first}, memliner at 25% local (medians; target in brackets)\n"
        );
        let _ = writeln!(
            md,
            "| workload | TCP loopback vs all-local | in-process store vs all-local | faulting-thread remote fault p50 / p99 | agent overhead at 100% local |\n|---|---|---|---|---|\n{target_rows}"
        );
    }

    // What the replacement saves over arrival order, side by side.
    let compared: Vec<(String, String)> = pairs(cfg, rs)
        .into_iter()
        .filter(|(w, c)| !cell(rs, w, c, Mode::MemlinerFifo, 25).is_empty())
        .collect();
    if !compared.is_empty() {
        let _ = writeln!(
            md,
            "\n## Replacement at 25% local: reclaim=lru vs reclaim=fifo (medians)\n"
        );
        let _ = writeln!(
            md,
            "| workload | collector | wall ms lru / fifo | remote faults lru / fifo | remote faults saved | working-set activations | reactivations (local faults paid) |\n|---|---|---|---|---|---|---|"
        );
        for (w, c) in compared {
            let lru = cell(rs, &w, &c, Mode::Memliner, 25);
            let fifo = cell(rs, &w, &c, Mode::MemlinerFifo, 25);
            let remote = |x: &[&Record]| med(x, |r| r.stat(|d| Some(d.faults.remote as f64)));
            let _ = writeln!(
                md,
                "| {w} | {c} | {} / {} | {} / {} | {} | {} | {} |",
                fmt(med(&lru, wall), 0),
                fmt(med(&fifo, wall), 0),
                fmt(remote(&lru), 0),
                fmt(remote(&fifo), 0),
                fmt(remote(&fifo) - remote(&lru), 0),
                fmt(
                    med(&lru, |r| r.stat(|d| Some(
                        d.pager.as_ref()?.reclaim.workingset_activations as f64
                    ))),
                    0
                ),
                fmt(
                    med(&lru, |r| r.stat(|d| Some(d.faults.reactivate as f64))),
                    0
                ),
            );
        }
    }

    // Variants: dirty tracking, stream scope.
    let t = cell(rs, "graph", first, Mode::Baseline, 25);
    let a = cell(rs, "graph", first, Mode::BaselineAssume, 25);
    let mm = cell(rs, "graph", first, Mode::Memliner, 25);
    let mc = cell(rs, "graph", first, Mode::MemlinerClassStreams, 25);
    if !a.is_empty() || !mc.is_empty() {
        let _ = writeln!(
            md,
            "\n## Variants: dirty tracking and stream scope, {first}, graph, 25% local (medians)\n"
        );
        let _ = writeln!(
            md,
            "| configuration | wall ms | write faults | pages written | clean evictions | app demand faults | app accuracy | app coverage |\n|---|---|---|---|---|---|---|---|"
        );
        for (label, c) in [
            ("baseline, dirty=track", &t),
            ("baseline, dirty=assume", &a),
            ("memliner, dirty=auto, streams=thread", &mm),
            ("memliner, dirty=auto, streams=class", &mc),
        ] {
            if c.is_empty() {
                continue;
            }
            let _ = writeln!(
                md,
                "| {label} | {} | {} | {} | {} | {} | {} | {} |",
                fmt(med(c, wall), 0),
                fmt(med(c, |r| r.stat(|d| Some(d.faults.write as f64))), 0),
                fmt(
                    med(c, |r| r.stat(|d| Some(
                        d.pager.as_ref()?.remote.pages_written as f64
                    ))),
                    0
                ),
                fmt(
                    med(c, |r| r
                        .stat(|d| Some(d.pager.as_ref()?.evictions.clean as f64))),
                    0
                ),
                fmt(med(c, app_demand), 0),
                pct(med(c, |r| prefetch(r, "application", accuracy))),
                pct(med(c, |r| prefetch(r, "application", coverage))),
            );
        }
    }

    // Kernel details.
    if rs
        .iter()
        .any(|r| r.mode == Mode::Kernel && r.kernel.is_some())
    {
        let _ = writeln!(md, "\n## Kernel baseline details (medians)\n");
        let _ = writeln!(md, "zram is compressed local RAM, not far memory: it bounds from below what kernel swap costs; an RDMA swap device (the original MemLiner's setup) adds the network to every major fault.\n");
        let _ = writeln!(
            md,
            "| workload | collector | local | limit MiB | peak usage MiB | major faults | swap-ins | outcome |\n|---|---|---|---|---|---|---|---|"
        );
        for (w, c, l) in paged_cells(cfg, rs) {
            let c = &c;
            let k = cell(rs, &w, c, Mode::Kernel, l);
            if k.is_empty() {
                continue;
            }
            let kf = |f: fn(&KernelFigures) -> Option<u64>| {
                median(k.iter().filter_map(|r| r.kernel.as_ref()?.get(f)).collect())
            };
            let oks = k.iter().filter(|r| r.ok()).count();
            let _ = writeln!(
                md,
                "| {w} | {c} | {l}% | {} | {} | {} | {} | {} |",
                fmt(kf(|k| k.limit_bytes) / 1048576.0, 1),
                fmt(kf(|k| k.max_usage) / 1048576.0, 1),
                fmt(kf(|k| k.pgmajfault), 0),
                fmt(kf(|k| k.pswpin), 0),
                if oks == k.len() {
                    "ok".to_string()
                } else {
                    format!(
                        "{oks}/{} ok; {}",
                        k.len(),
                        k.iter().find(|r| !r.ok()).unwrap().outcome
                    )
                }
            );
        }
    }

    let _ = writeln!(
        md,
        "\n## TCP loopback, pipelined batches of 1024 pages, {} MiB\n\n| direction | GB/s |\n|---|---|\n| write | {:.2} |\n| read | {:.2} |\n",
        cfg.tcp_mib, x.tcp_write_gbs, x.tcp_read_gbs
    );
    transports(&mut md, cfg, rs, x);
    replication(&mut md, cfg, rs);
    scraping(&mut md, cfg, rs);
    checksums(&mut md, cfg, rs);
    spark_cluster(&mut md, cfg, rs);
    super::service::section(&mut md, cfg, rs);
    md
}

/// What the end-to-end page checks cost (`--checksums`): the `memliner` cell at 25% (checks
/// on, the default) beside the same with `checksums=off`.
fn checksums(md: &mut String, cfg: &BenchConfig, rs: &[Record]) {
    if !cfg.checksums {
        return;
    }
    let wall = |r: &Record| r.ok().then_some(r.wall_ms);
    let verified = |r: &Record| {
        r.stat(|d| {
            let i = d.pager.as_ref()?.integrity.as_ref()?;
            Some(i.pages_verified as f64)
        })
    };
    let rows: Vec<String> = pairs(cfg, rs)
        .into_iter()
        .filter_map(|(w, c)| {
            let on = cell(rs, &w, &c, Mode::Memliner, 25);
            let off = cell(rs, &w, &c, Mode::MemlinerNoChecksums, 25);
            if on.is_empty() || off.is_empty() {
                return None;
            }
            let (a, b) = (med(&on, wall), med(&off, wall));
            // Each repetition's on/off ratio, its pair run side by side (the runs go in
            // repetition order), then their median.
            let ratios: Vec<f64> = on
                .iter()
                .zip(&off)
                .filter_map(|(x, y)| Some(wall(x)? / wall(y)?))
                .collect();
            Some(format!(
                "| {w} | {c} | {} | {} | {} | {} | {} |",
                fmt(a, 0),
                fmt(b, 0),
                fmt(median(ratios.clone()), 3),
                fmt(ratios.iter().cloned().fold(f64::INFINITY, f64::min), 3),
                fmt(med(&on, verified), 0),
            ))
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "\n## End-to-end page checksums at 25% local: their cost (medians)\n\n\
         The `memliner` cell (`checksums=on`, the default: a CRC-32 of every page written to the \
         server kept by the agent, every page read back checked before it is installed) beside \
         the same runs with `checksums=off`. The ratio is taken per repetition, the two runs side \
         by side, then its median; its minimum says how much of it is noise.\n\n\
         | workload | collector | on ms | off ms | on / off | least on / off | pages verified |\n\
         |---|---|---|---|---|---|---|"
    );
    for r in rows {
        let _ = writeln!(md, "{r}");
    }
}

/// What watching a JVM costs it: memliner at 25%, and the same with `/metrics` scraped every
/// second (`memliner-scraped`).
fn scraping(md: &mut String, cfg: &BenchConfig, rs: &[Record]) {
    let wall = |r: &Record| r.ok().then_some(r.wall_ms);
    let rows: Vec<String> = pairs(cfg, rs)
        .into_iter()
        .filter_map(|(w, c)| {
            let scraped = cell(rs, &w, &c, Mode::MemlinerScraped, 25);
            let plain = cell(rs, &w, &c, Mode::Memliner, 25);
            if scraped.is_empty() || plain.is_empty() {
                return None;
            }
            let (a, b) = (med(&plain, wall), med(&scraped, wall));
            let spread = |runs: &[&Record]| {
                let v: Vec<f64> = runs.iter().filter_map(|r| wall(r)).collect();
                let (lo, hi) = v
                    .iter()
                    .fold((f64::INFINITY, 0f64), |(l, h), &x| (l.min(x), h.max(x)));
                if v.is_empty() {
                    f64::NAN
                } else {
                    (hi - lo) / a
                }
            };
            Some(format!(
                "| {w} | {c} | {} | {} | {} | {} | {} |",
                fmt(a, 0),
                fmt(b, 0),
                fmt(b / a, 3),
                fmt(spread(&plain), 3),
                fmt(med(&scraped, |r| r.scrapes.map(|n| n as f64)), 0),
            ))
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "\n## Watching a JVM: /metrics scraped every second at 25% local (medians)\n\n\
         The `memliner` cell again with `metrics=127.0.0.1:0`, its page read every second by the \
         bench while the JVM runs (a scrape reads counters on the agent's metrics thread). Within \
         noise when the ratio is inside the spread of the unscraped runs.\n\n\
         | workload | collector | wall ms | scraped wall ms | scraped / not | spread of unscraped runs / median | scrapes per run |\n\
         |---|---|---|---|---|---|---|"
    );
    for r in rows {
        let _ = writeln!(md, "{r}");
    }
}

/// GC threads' remote faults by what the collector was doing, and the time they waited on them
/// (`gc_faults`): one column per activity that any run saw.
fn gc_activity_section(md: &mut String, cfg: &BenchConfig, rs: &[Record]) {
    let modes = [
        Mode::Baseline,
        Mode::Memliner,
        Mode::MemlinerInProcess,
        Mode::MemlinerInProcessNoPauseReads,
        Mode::MemlinerInProcessNoCardHold,
        Mode::MemlinerGcHooks,
    ];
    let seen: Vec<GcActivity> = GcActivity::ALL
        .iter()
        .copied()
        .filter(|a| {
            rs.iter()
                .filter_map(|r| r.stats.as_ref())
                .any(|d| d.gc_faults.get(a).is_some_and(|x| x.remote > 0))
        })
        .collect();
    if seen.is_empty() {
        return;
    }
    // Shenandoah's collection-set pages read back soon and kept (`cold_rereads_kept`): a
    // column only when some run kept any.
    let kept_of = |d: &StatsDoc| Some(d.pager.as_ref()?.reclaim.cold_rereads_kept as f64);
    let kept = rs
        .iter()
        .filter_map(|r| r.stats.as_ref())
        .any(|d| kept_of(d).is_some_and(|k| k > 0.0));
    let _ = writeln!(md, "\n## GC threads' remote faults by activity (medians)\n");
    let _ = writeln!(
        md,
        "What the collector was doing when its threads read a remote page: remote faults, and in brackets the seconds its threads waited on them (all threads together). Pauses' faults are told by the page's region when the pause started and by what the pause freed; concurrent threads' by their names. `pause s`: the pauses' wall time.\n"
    );
    let head: Vec<&str> = seen.iter().map(|a| a.name()).collect();
    let (kept_head, kept_rule) = if kept {
        (" collection-set pages read back, kept |", "---|")
    } else {
        ("", "")
    };
    let _ = writeln!(
        md,
        "| workload | collector | local | policy | {} | GC wait s | pause s |{kept_head}\n|---|---|---|---|{}---|---|{kept_rule}",
        head.join(" | "),
        "---|".repeat(seen.len())
    );
    for (w, c, l) in paged_cells(cfg, rs) {
        for mode in modes {
            let cl = cell(rs, &w, &c, mode, l);
            if cl.is_empty() {
                continue;
            }
            let by = |a: GcActivity, f: fn(&ActivityDoc) -> f64| {
                med(&cl, |r| r.stat(|d| d.gc_faults.get(&a).map(f)))
            };
            let cols: Vec<String> = seen
                .iter()
                .map(|&a| {
                    format!(
                        "{} ({})",
                        fmt(by(a, |x| x.remote as f64), 0),
                        fmt(by(a, |x| x.wait_ms / 1e3), 2)
                    )
                })
                .collect();
            let wait = med(&cl, |r| {
                r.stat(|d| Some(d.gc_faults.values().map(|x| x.wait_ms).sum::<f64>() / 1e3))
            });
            let pause = med(&cl, |r| r.stat(|d| Some(d.gc.pause_total_ms / 1e3)));
            let kept_col = if kept {
                format!(" {} |", fmt(med(&cl, |r| r.stat(kept_of)), 0))
            } else {
                String::new()
            };
            let _ = writeln!(
                md,
                "| {w} | {c} | {l}% | {} | {} | {} | {} |{kept_col}",
                mode.name(),
                cols.join(" | "),
                fmt(wait, 2),
                fmt(pause, 2)
            );
        }
    }
}

/// The sections read from each paged run's own stats document: faults by class, prefetching,
/// memliner's levers, the data path. Left out when no run has one (a kernel-only or a
/// cluster-only bench).
fn agent_sections(md: &mut String, cfg: &BenchConfig, rs: &[Record]) {
    if paged_cells(cfg, rs).is_empty() {
        return;
    }
    // Faults by class.
    let _ = writeln!(md, "\n## Remote faults by thread class (medians)\n");
    let _ = writeln!(md, "Demand faults served from the memory server, by the class of the faulting thread; prefetch hits are faults on marker pages served locally.\n");
    let _ = writeln!(
        md,
        "| workload | collector | local | policy | application | gc (pauses) | gc-concurrent | other | prefetch hits | GC share of remote | write faults | pages written |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (w, c, l) in paged_cells(cfg, rs) {
        let c = &c;
        for mode in [Mode::Baseline, Mode::Memliner, Mode::MemlinerGcHooks] {
            let cl = cell(rs, &w, c, mode, l);
            if cl.is_empty() {
                continue;
            }
            let f = |class: &str| fmt(med(&cl, |r| class_remote(r, class)), 0);
            let _ = writeln!(
                md,
                "| {w} | {c} | {l}% | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                mode.name(),
                f("application"),
                f("gc"),
                f("gc-concurrent"),
                f("other"),
                fmt(
                    med(&cl, |r| r.stat(|d| Some(d.faults.prefetch_hit as f64))),
                    0
                ),
                pct(med(&cl, |r| r.stat(|d| d.faults.gc_share_of_remote))),
                fmt(med(&cl, |r| r.stat(|d| Some(d.faults.write as f64))), 0),
                fmt(
                    med(&cl, |r| r.stat(|d| Some(
                        d.pager.as_ref()?.remote.pages_written as f64
                    ))),
                    0
                ),
            );
        }
    }

    gc_activity_section(md, cfg, rs);

    // Prefetching.
    let _ = writeln!(md, "\n## Prefetching (medians)\n");
    let _ = writeln!(md, "Accuracy: share of prefetch windows whose marker page (the middle of the window) was touched before it was dropped. Coverage: pages of hit windows / (those + demand faults). Both per stream class; `all` is every class together.\n");
    let _ = writeln!(
        md,
        "| workload | collector | local | policy | pages prefetched | app accuracy | app coverage | gc accuracy | gc-concurrent accuracy | all accuracy | all coverage |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (w, c, l) in paged_cells(cfg, rs) {
        let c = &c;
        for mode in [Mode::Baseline, Mode::Memliner] {
            let cl = cell(rs, &w, c, mode, l);
            let p = |class: &str, k: fn(&PrefetchClassDoc) -> Option<f64>| {
                pct(med(&cl, |r| prefetch(r, class, k)))
            };
            let _ = writeln!(
                md,
                "| {w} | {c} | {l}% | {} | {} | {} | {} | {} | {} | {} | {} |",
                mode.name(),
                fmt(med(&cl, |r| prefetch(r, "all", pages)), 0),
                p("application", accuracy),
                p("application", coverage),
                p("gc", accuracy),
                p("gc-concurrent", accuracy),
                p("all", accuracy),
                p("all", coverage),
            );
        }
    }

    // memliner's own levers.
    let _ = writeln!(md, "\n## memliner's levers (medians)\n");
    let _ = writeln!(
        md,
        "| workload | collector | local | cold evictions | promoted by the application | concurrent cycles seen | app faults during concurrent cycles | GC pause total ms (baseline / memliner) |\n|---|---|---|---|---|---|---|---|"
    );
    for (w, c, l) in paged_cells(cfg, rs) {
        let c = &c;
        let m = cell(rs, &w, c, Mode::Memliner, l);
        let b = cell(rs, &w, c, Mode::Baseline, l);
        let _ = writeln!(
            md,
            "| {w} | {c} | {l}% | {} | {} | {} | {} | {} / {} |",
            fmt(
                med(&m, |r| r
                    .stat(|d| Some(d.pager.as_ref()?.cold.evicted as f64))),
                0
            ),
            fmt(
                med(&m, |r| r
                    .stat(|d| Some(d.pager.as_ref()?.cold.promoted as f64))),
                0
            ),
            fmt(
                med(&m, |r| r
                    .stat(|d| Some(d.pager.as_ref()?.concurrent_cycles as f64))),
                0
            ),
            fmt(
                med(&m, |r| r.stat(|d| Some(
                    d.pager.as_ref()?.app_faults_in_concurrent_cycle as f64
                ))),
                0
            ),
            fmt(med(&b, |r| r.stat(|d| Some(d.gc.pause_total_ms))), 0),
            fmt(med(&m, |r| r.stat(|d| Some(d.gc.pause_total_ms))), 0),
        );
    }

    // The data path: where a paged run's time goes.
    let _ = writeln!(md, "\n## The data path: where the time goes (medians)\n");
    let _ = writeln!(
        md,
        "Remote faults cost the faulting thread what the probe sees (a remote read timed from the \
         faulting side: with `faults=signal` the trap, the SIGBUS handler's service and the \
         return; with `faults=thread` delivery to the handler thread, service, wake); the service \
         time alone is beside it. Reactivations are the local faults reference sampling costs; a direct reclaim \
         is a fault that found the budget full and evicted itself. Agent CPU counts the time \
         faulting threads spend serving their own faults, the fault handlers, the reclaimer, \
         prefetch and the probe (the TCP client runs on them); server \
         CPU is the embedded memory server's connection threads.\n"
    );
    let _ = writeln!(
        md,
        "| workload | collector | local | mode | x all-local | remote faults | reactivations | direct reclaims | agent CPU s | agent CPU us / remote fault | server CPU s | handler p50 / p99 us | faulting thread p50 / p99 us |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (w, c, l) in paged_cells(cfg, rs) {
        let c = &c;
        let n = med(&cell(rs, &w, c, Mode::NoAgent, 100), wall);
        for mode in [
            Mode::Baseline,
            Mode::Memliner,
            Mode::MemlinerFifo,
            Mode::MemlinerInProcess,
            Mode::MemlinerThreadFaults,
        ] {
            let m = cell(rs, &w, c, mode, l);
            if m.is_empty() {
                continue;
            }
            let us =
                |f: fn(&PagerDoc) -> Option<f64>| med(&m, |r| r.stat(|d| f(d.pager.as_ref()?)));
            let _ = writeln!(
                md,
                "| {w} | {c} | {l}% | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} / {} |",
                mode.name(),
                fmt(med(&m, wall) / n, 1),
                fmt(med(&m, |r| r.stat(|d| Some(d.faults.remote as f64))), 0),
                fmt(med(&m, |r| r.stat(|d| Some(d.faults.reactivate as f64))), 0),
                fmt(us(|p| Some(p.reclaim.direct_reclaims as f64)), 0),
                fmt(us(|p| Some(p.agent_cpu.total_s)), 2),
                fmt(us(|p| p.agent_cpu.per_remote_fault_us), 1),
                fmt(med(&m, |r| r.server_cpu_ms.map(|v| v / 1e3)), 2),
                fmt(us(|p| p.latency.remote.p50_us), 1),
                fmt(us(|p| p.latency.remote.p99_us), 0),
                fmt(us(|p| p.latency.thread_remote.p50_us), 1),
                fmt(us(|p| p.latency.thread_remote.p99_us), 0),
            );
        }
    }
}

/// The Spark jobs on executor JVMs (`--spark-cluster`): the job's wall time, and what the
/// executors' agents counted, summed over the executors of each run.
fn spark_cluster(md: &mut String, cfg: &BenchConfig, rs: &[Record]) {
    let jobs: Vec<String> = workloads_of(rs)
        .into_iter()
        .filter(|w| w.starts_with("spark-cluster-"))
        .collect();
    if jobs.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "\n## Spark on executors: local-cluster, {} executor JVMs of {} heap, one core each (medians)\n\n\
         Spark's `local-cluster` master starts separate executor JVMs, as a standalone cluster \
         does; the agent goes to every executor through `spark.executor.extraJavaOptions` (its \
         `local=` a share of each executor's heap, a stats file per executor), the driver is not \
         paged. Wall is the whole job (driver and executors start-up included); the other \
         figures are summed over the executors of a run, then the median of the runs taken.\n",
        super::spark::EXECUTORS,
        super::spark::EXECUTOR_HEAP
    );
    let _ = writeln!(
        md,
        "| job | collector | mode | local | wall ms | x all-local | executors paged | remote faults | GC share of remote | GC pauses s | remote read | remote written |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    let total = |r: &Record| memliner_cli::aggregate::Totals::sum(&r.executors);
    let size = |pages: f64| {
        if pages.is_finite() {
            swap_backend::units::format_size(pages as u64 * swap_backend::PAGE_SIZE as u64)
        } else {
            "–".into()
        }
    };
    for w in &jobs {
        for c in &cfg.collectors {
            let n = med(&cell(rs, w, c, Mode::NoAgent, 100), wall);
            let mut rows: Vec<(Mode, u32)> = rs
                .iter()
                .filter(|r| r.workload == *w && r.collector == *c)
                .map(|r| (r.mode, r.local))
                .collect();
            // All-local first, then each local share downwards.
            rows.sort_by_key(|&(m, l)| (std::cmp::Reverse(l), m != Mode::NoAgent, m.name()));
            rows.dedup();
            for (mode, local) in rows {
                let runs = cell(rs, w, c, mode, local);
                let paged = |r: &Record| {
                    Some(r.executors.iter().filter(|d| d.faults.remote > 0).count() as f64)
                };
                // The executors' figures; an all-local run has none.
                let figures = if mode == Mode::NoAgent {
                    vec![String::new(); 6]
                } else {
                    vec![
                        format!(
                            "{} of {}",
                            fmt(med(&runs, paged), 0),
                            super::spark::EXECUTORS
                        ),
                        fmt(med(&runs, |r| Some(total(r).remote as f64)), 0),
                        pct(med(&runs, |r| total(r).gc_share())),
                        fmt(
                            med(&runs, |r| {
                                Some(
                                    r.executors.iter().map(|d| d.gc.pause_total_ms).sum::<f64>()
                                        / 1e3,
                                )
                            }),
                            1,
                        ),
                        size(med(&runs, |r| Some(total(r).read_pages as f64))),
                        size(med(&runs, |r| Some(total(r).written_pages as f64))),
                    ]
                };
                let _ = writeln!(
                    md,
                    "| {w} | {c} | {} | {local}% | {} | {} | {} |",
                    mode.name(),
                    outcome_note(&runs).unwrap_or_else(|| fmt(med(&runs, wall), 0)),
                    fmt(med(&runs, wall) / n, 2),
                    figures.join(" | "),
                );
            }
        }
    }
}

/// One server against two copies on two servers (`--replicas`): what the copies cost.
fn replication(md: &mut String, cfg: &BenchConfig, rs: &[Record]) {
    if !cfg.replicas {
        return;
    }
    let wall = |r: &Record| r.ok().then_some(r.wall_ms);
    let _ = writeln!(
        md,
        "\n## Replication at 25% local: one server, and two copies of every page on two servers (medians)\n\n\
         The same runs but for the servers: the `memliner` cell's one embedded server, then two \
         embedded servers with `replicas=2` (each eviction written to both, one after the other; \
         reads from the first server).\n"
    );
    let _ = writeln!(
        md,
        "| workload | collector | servers | x all-local | two copies / one wall | pages written to servers | agent CPU s | server CPU s |\n|---|---|---|---|---|---|---|---|"
    );
    for (w, c) in pairs(cfg, rs) {
        let n = med(&cell(rs, &w, &c, Mode::NoAgent, 100), wall);
        let one = med(&cell(rs, &w, &c, Mode::Memliner, 25), wall);
        for (mode, name) in [
            (Mode::Memliner, "one"),
            (Mode::MemlinerReplicated, "two, 2 copies"),
        ] {
            let m = cell(rs, &w, &c, mode, 25);
            if m.is_empty() || cell(rs, &w, &c, Mode::MemlinerReplicated, 25).is_empty() {
                continue;
            }
            let written = med(&m, |r| {
                r.stat(|d| {
                    let p = d.pager.as_ref()?;
                    Some(match &p.replication {
                        Some(rep) => {
                            rep.servers.iter().map(|s| s.pages_written).sum::<u64>() as f64
                        }
                        None => p.remote.pages_written as f64,
                    })
                })
            });
            let _ = writeln!(
                md,
                "| {w} | {c} | {name} | {} | {} | {} | {} | {} |",
                fmt(med(&m, wall) / n, 2),
                if mode == Mode::MemlinerReplicated {
                    fmt(med(&m, wall) / one, 2)
                } else {
                    "".into()
                },
                fmt(written, 0),
                fmt(
                    med(&m, |r| r
                        .stat(|d| Some(d.pager.as_ref()?.agent_cpu.total_s))),
                    2
                ),
                fmt(med(&m, |r| r.server_cpu_ms.map(|v| v / 1e3)), 2),
            );
        }
    }
}

/// The transports side by side (`--transports`): the same JVM runs over tcp, one-sided
/// fabric, the default (memory files where the host has them) and the in-process store, then
/// each store alone.
fn transports(md: &mut String, cfg: &BenchConfig, rs: &[Record], x: &Extras) {
    if !cfg.transports && x.stores.is_empty() {
        return;
    }
    let wall = |r: &Record| r.ok().then_some(r.wall_ms);
    let _ = writeln!(
        md,
        "\n## Transports at 25% local: memliner over tcp, fabric, memory files, in-process (medians)\n\n\
         The same runs but for where the pages go: `tcp://` to the embedded server (two-sided: \
         each read wakes a server thread), `fabric://` to the same server through libfabric's \
         one-sided reads and writes (its tcp provider here: no RDMA NIC), `unix://` memory files \
         the embedded server hands the JVM (one-sided: the JVM copies pages itself, the default \
         where the host has them), and the in-process store (the pager's own cost). Server CPU \
         per read is the embedded server's CPU over the pages it served.\n"
    );
    let _ = writeln!(
        md,
        "| workload | collector | transport | x all-local | / tcp wall | / in-process wall | remote faults | faulting-thread remote fault p50 / p99 us | agent CPU s | server CPU s | server CPU per page read us |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (w, c) in pairs(cfg, rs) {
        let n = med(&cell(rs, &w, &c, Mode::NoAgent, 100), wall);
        let tcp = med(&cell(rs, &w, &c, Mode::MemlinerTcp, 25), wall);
        let inproc = med(&cell(rs, &w, &c, Mode::MemlinerInProcess, 25), wall);
        for mode in [
            Mode::MemlinerTcp,
            Mode::MemlinerFabric,
            Mode::Memliner,
            Mode::MemlinerInProcess,
        ] {
            let m = cell(rs, &w, &c, mode, 25);
            if m.is_empty() || (mode == Mode::Memliner && tcp.is_nan()) {
                continue;
            }
            let name = match mode {
                Mode::MemlinerTcp => "tcp".to_string(),
                Mode::MemlinerFabric => "fabric".to_string(),
                Mode::MemlinerInProcess => "in-process".to_string(),
                _ => m
                    .iter()
                    .find_map(|r| {
                        let store = &r.stats.as_ref()?.pager.as_ref()?.store;
                        Some(store.split("://").next()?.to_string())
                    })
                    .map_or("default".into(), |s| format!("{s} (default)")),
            };
            let p =
                |f: fn(&PagerDoc) -> Option<f64>| med(&m, |r| r.stat(|d| f(d.pager.as_ref()?)));
            let ratio = |base: f64| {
                if mode == Mode::MemlinerTcp || mode == Mode::MemlinerInProcess {
                    String::new()
                } else {
                    fmt(med(&m, wall) / base, 2)
                }
            };
            let server_s = med(&m, |r| r.server_cpu_ms.map(|v| v / 1e3));
            let read = p(|p| Some(p.remote.pages_read as f64));
            let _ = writeln!(
                md,
                "| {w} | {c} | {name} | {} | {} | {} | {} | {} / {} | {} | {} | {} |",
                fmt(med(&m, wall) / n, 2),
                ratio(tcp),
                ratio(inproc),
                fmt(med(&m, |r| r.stat(|d| Some(d.faults.remote as f64))), 0),
                fmt(p(|p| p.latency.thread_remote.p50_us), 1),
                fmt(p(|p| p.latency.thread_remote.p99_us), 0),
                fmt(p(|p| Some(p.agent_cpu.total_s)), 2),
                fmt(server_s, 2),
                fmt(server_s * 1e6 / read, 2),
            );
        }
    }
    if !x.stores.is_empty() {
        let _ = writeln!(
            md,
            "\n### Each store alone, outside the JVM ({} MiB, medians of {} repetitions)\n\n\
             One page at a time (queue depth 1), and batches of {} pages as the pager's \
             write-back and prefetch send them.\n\n\
             | transport | read p50 / p99 us | write p50 us | batch read GB/s | batch write GB/s |\n|---|---|---|---|---|",
            cfg.tcp_mib,
            cfg.reps.max(3),
            super::stores::BATCH
        );
        for s in &x.stores {
            let _ = writeln!(
                md,
                "| {} | {} / {} | {} | {:.2} | {:.2} |",
                s.transport,
                fmt(s.read_p50_us, 1),
                fmt(s.read_p99_us, 0),
                fmt(s.write_p50_us, 1),
                s.read_gbs,
                s.write_gbs
            );
        }
    }
}

/// Inserts links to the plots after the headline.
pub fn with_plots(md: String, files: &[String]) -> String {
    let mut s = String::from("\n## Plots\n\n");
    for f in files {
        let _ = writeln!(s, "![{f}]({f})\n");
    }
    md + &s
}

/// One row per run.
pub fn csv(rs: &[Record]) -> String {
    let mut out = String::from(
        "rep,workload,collector,mode,local_pct,outcome,wall_ms,workload_ms,checksum,\
         app_demand_faults,gc_remote_faults,gc_concurrent_remote_faults,prefetch_hits,\
         app_prefetch_accuracy,app_prefetch_coverage,peak_rss_bytes,kernel_limit_bytes,\
         kernel_major_faults,reactivations,direct_reclaims,agent_cpu_s,server_cpu_s,\
         thread_remote_p50_us\n",
    );
    let v = |x: Option<f64>| x.map(|x| format!("{x}")).unwrap_or_default();
    for r in rs {
        let k = |f: fn(&KernelFigures) -> Option<u64>| r.kernel.as_ref().and_then(|k| k.get(f));
        let _ = writeln!(
            out,
            "{},{},{},{},{},\"{}\",{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            r.rep,
            r.workload,
            r.collector,
            r.mode.name(),
            r.local,
            r.outcome.to_string().replace('"', "'"),
            v(Some(r.wall_ms).filter(|x| x.is_finite())),
            v(Some(r.workload_ms).filter(|x| x.is_finite())),
            r.checksum,
            v(app_demand(r)),
            v(class_remote(r, "gc")),
            v(class_remote(r, "gc-concurrent")),
            v(r.stat(|d| Some(d.faults.prefetch_hit as f64))),
            v(prefetch(r, "application", accuracy)),
            v(prefetch(r, "application", coverage)),
            v(r.stat(|d| d.process.peak_rss_bytes.map(|v| v as f64))),
            v(k(|k| k.limit_bytes)),
            v(k(|k| k.pgmajfault)),
            v(r.stat(|d| Some(d.faults.reactivate as f64))),
            v(r.stat(|d| Some(d.pager.as_ref()?.reclaim.direct_reclaims as f64))),
            v(r.stat(|d| Some(d.pager.as_ref()?.agent_cpu.total_s))),
            v(r.server_cpu_ms.map(|x| x / 1e3)),
            v(r.stat(|d| d.pager.as_ref()?.latency.thread_remote.p50_us)),
        );
    }
    out
}

/// The patched JDK's rows: stock JDK under both policies against the patched one with the
/// hooks on, measured in the same interleaving, with the figures that explain the difference.
fn gc_hooks_section(md: &mut String, cfg: &BenchConfig, rs: &[Record]) {
    // Hooked runs with their own stats (a cluster run's hooked executors are in its section).
    if !rs
        .iter()
        .any(|r| r.mode == Mode::MemlinerGcHooks && r.stats.is_some())
    {
        return;
    }
    let _ = writeln!(md, "\n## MemLiner's GC hooks: the patched JDK (medians)\n");
    let _ = writeln!(
        md,
        "`memliner-gc-hooks`: policy memliner on target/jdk-memliner with `-XX:+MemLinerLineUp` \
         (the store barriers log the stored references while marking runs, so marking traces \
         from where the application is; marking defers objects on non-resident pages, hints \
         their pages, traces them in address order; the collector releases the regions it frees, \
         so their reuse zero-fills locally). Baseline and memliner ran on the stock \
         JDK, interleaved with it. Store log: the SATB entries marking processed (overwritten \
         and stored references) / the objects it marked from them.\n"
    );
    let _ = writeln!(
        md,
        "| workload | collector | local | x all-local: baseline / memliner / hooks | hooks vs baseline | hooks vs memliner | GC share of remote: memliner / hooks | app demand faults: memliner / hooks | store log: entries / marked from them | hooks: concurrent-GC faults while marking | objects deferred | found resident when traced | hinted pages fetched / dropped | freed pages released / of them only remote |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    let hooks = |r: &Record, f: fn(&GcHooksDoc) -> f64| r.stat(|d| Some(f(&d.gc_hooks)));
    for (w, c, l) in paged_cells(cfg, rs) {
        let h = cell(rs, &w, &c, Mode::MemlinerGcHooks, l);
        if h.is_empty() {
            continue;
        }
        let n = med(&cell(rs, &w, &c, Mode::NoAgent, 100), wall);
        let b = cell(rs, &w, &c, Mode::Baseline, l);
        let m = cell(rs, &w, &c, Mode::Memliner, l);
        let (bw, mw, hw) = (med(&b, wall), med(&m, wall), med(&h, wall));
        let app = |cl: &[&Record]| {
            fmt(
                med(cl, |r| {
                    r.stat(|d| Some(d.faults.by_class.application.remote as f64))
                }),
                0,
            )
        };
        let share = |cl: &[&Record]| pct(med(cl, |r| r.stat(|d| d.faults.gc_share_of_remote)));
        let _ = writeln!(
            md,
            "| {w} | {c} | {l}% | {} / {} / {} | {}x | {}x | {} / {} | {} / {} | {} / {} | {} | {} | {} | {} / {} | {} / {} |",
            fmt(bw / n, 2),
            fmt(mw / n, 2),
            fmt(hw / n, 2),
            fmt(bw / hw, 2),
            fmt(mw / hw, 2),
            share(&m),
            share(&h),
            app(&m),
            app(&h),
            fmt(med(&h, |r| hooks(r, |g| g.recorded as f64)), 0),
            fmt(med(&h, |r| hooks(r, |g| g.lined_up as f64)), 0),
            fmt(
                med(&h, |r| hooks(r, |g| g.concurrent_remote_while_marking as f64)),
                0
            ),
            fmt(med(&h, |r| hooks(r, |g| g.deferred as f64)), 0),
            pct(med(&h, |r| r.stat(|d| d.gc_hooks.deferred_resident_share))),
            fmt(med(&h, |r| hooks(r, |g| g.hint_pages_fetched as f64)), 0),
            fmt(med(&h, |r| hooks(r, |g| g.hint_pages_dropped as f64)), 0),
            fmt(
                med(&h, |r| r.stat(|d| Some(d.pager.as_ref()?.released.pages as f64))),
                0
            ),
            fmt(
                med(&h, |r| r.stat(|d| Some(d.pager.as_ref()?.released.remote as f64))),
                0
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(mode: Mode, local: u32, wall_ms: f64, stats: Option<StatsDoc>) -> Record {
        Record {
            rep: 0,
            workload: "graph".into(),
            collector: "G1".into(),
            mode,
            local,
            wall_ms,
            workload_ms: wall_ms,
            checksum: "c".into(),
            outcome: crate::Outcome::Ok,
            stats,
            executors: Vec::new(),
            kernel: None,
            server_cpu_ms: Some(250.0),
            scrapes: None,
            service: Vec::new(),
        }
    }

    #[test]
    fn the_report_sets_a_services_throughput_and_tail_latency_side_by_side() {
        let phase = |ops: f64, p99: u64| crate::service::Phase {
            phase: "a".into(),
            throughput: ops,
            by_op: [(
                "read".to_string(),
                crate::service::OpLatency {
                    count: 10,
                    p50_us: 1000,
                    p99_us: p99,
                    p999_us: 2 * p99,
                    max_us: 3 * p99,
                },
            )]
            .into(),
            ..Default::default()
        };
        let mut all_local = record(Mode::NoAgent, 100, 1000.0, None);
        let mut paged = record(Mode::Memliner, 25, 1500.0, paged(500, 10));
        let mut kernel = record(Mode::Kernel, 25, 2000.0, None);
        for (r, ops, p99) in [
            (&mut all_local, 7000.0, 5000),
            (&mut paged, 5300.0, 7300),
            (&mut kernel, 3400.0, 13000),
        ] {
            r.workload = "cassandra".into();
            r.service = vec![phase(ops, p99)];
        }
        let cfg = BenchConfig::quick("/tmp/x".into());
        let mut md = String::new();
        crate::service::section(&mut md, &cfg, &[all_local, paged, kernel]);
        assert!(
            md.contains("## Cassandra under a verifying YCSB-style load"),
            "{md}"
        );
        assert!(
            md.contains("| 25% | memliner | 5300 | 1.0 / 7.3 / 14.6 |"),
            "{md}"
        );
        assert!(
            md.contains("| 25% | kernel-zram | 3400 | 1.0 / 13.0 / 26.0 |"),
            "{md}"
        );
        assert!(md.contains("| 100% | no-agent | 7000 |"), "{md}");
        let mut none = String::new();
        crate::service::section(&mut none, &cfg, &[record(Mode::NoAgent, 100, 1.0, None)]);
        assert!(none.is_empty(), "no service, no section: {none}");
    }

    fn paged(remote: u64, reactivate: u64) -> Option<StatsDoc> {
        let mut d = StatsDoc::sample();
        d.faults.remote = remote;
        d.faults.reactivate = reactivate;
        let p = d.pager.as_mut().unwrap();
        p.reclaim.direct_reclaims = 3;
        p.reclaim.workingset_activations = 9;
        p.agent_cpu.total_s = 1.5;
        p.agent_cpu.per_remote_fault_us = Some(15.0);
        p.latency.remote.p50_us = Some(4.0);
        p.latency.remote.p99_us = Some(80.0);
        p.latency.thread_remote.p50_us = Some(30.0);
        p.latency.thread_remote.p99_us = Some(120.0);
        Some(d)
    }

    #[test]
    fn the_report_attributes_gc_faults_to_what_the_collector_was_doing() {
        let cfg = BenchConfig::quick("/tmp/x".into());
        let rs = vec![
            record(Mode::NoAgent, 100, 1000.0, None),
            record(Mode::Memliner, 25, 6000.0, paged(1600, 0)),
            record(Mode::Baseline, 25, 6500.0, paged(1700, 0)),
        ];
        let md = markdown(&cfg, &rs, &extras(Vec::new()));
        assert!(
            md.contains("## GC threads' remote faults by activity (medians)"),
            "{md}"
        );
        // The sample's activities: only those some run saw get a column.
        assert!(
            md.contains(
                "| young_evacuation | card_scan | GC wait s | pause s | collection-set pages read back, kept |"
            ),
            "{md}"
        );
        assert!(!md.contains("| concurrent_mark |"), "{md}");
        assert!(
            md.contains(
                "| graph | G1 | 25% | memliner | 20 (0.20) | 10 (0.10) | 0.30 | 0.01 | 4 |"
            ),
            "{md}"
        );
        // No run kept a page: no column.
        let mut none = rs.clone();
        for r in &mut none {
            if let Some(p) = r.stats.as_mut().and_then(|d| d.pager.as_mut()) {
                p.reclaim.cold_rereads_kept = 0;
            }
        }
        let md = markdown(&cfg, &none, &extras(Vec::new()));
        assert!(
            md.contains("| young_evacuation | card_scan | GC wait s | pause s |\n"),
            "{md}"
        );
    }

    #[test]
    fn the_report_shows_where_the_data_path_time_goes_and_what_the_replacement_saves() {
        let cfg = BenchConfig::quick("/tmp/x".into());
        let rs = vec![
            record(Mode::NoAgent, 100, 1000.0, None),
            record(Mode::Memliner, 100, 1020.0, paged(0, 0)),
            record(Mode::MemlinerFifo, 25, 5000.0, paged(1000, 400)),
            record(Mode::Memliner, 25, 6000.0, paged(1600, 0)),
            record(Mode::MemlinerInProcess, 25, 2500.0, paged(1000, 400)),
        ];
        let x = extras(Vec::new());
        let md = markdown(&cfg, &rs, &x);
        assert!(
            md.contains("| graph | G1 | 25% | memliner-reclaim-fifo | 5.0 | 1000 | 400 | 3 | 1.50 | 15.0 | 0.25 | 4.0 / 80 | 30.0 / 120 |"),
            "{md}"
        );
        assert!(md.contains("| graph | 6.0x (<= 6x) | 2.5x (<= 3x) | 30.0 / 120 us (<= 15 / 100) | 2.0% (<= 3%) |"), "{md}");
        assert!(
            md.contains("| graph | G1 | 6000 / 5000 | 1600 / 1000 | -600 | 9 | 0 |"),
            "{md}"
        );
    }

    #[test]
    fn the_report_sets_the_transports_side_by_side() {
        let mut cfg = BenchConfig::quick("/tmp/x".into());
        cfg.transports = true;
        let rs = vec![
            record(Mode::NoAgent, 100, 1000.0, None),
            record(Mode::MemlinerTcp, 25, 6000.0, paged(1600, 0)),
            record(Mode::MemlinerFabric, 25, 7500.0, paged(1500, 0)),
            record(Mode::Memliner, 25, 2750.0, paged(1000, 0)),
            record(Mode::MemlinerInProcess, 25, 2500.0, paged(1000, 400)),
        ];
        let x = extras(vec![crate::stores::StoreFigures {
            transport: "fabric (tcp provider)".into(),
            read_p50_us: 31.0,
            read_p99_us: 90.0,
            write_p50_us: 40.0,
            read_gbs: 0.8,
            write_gbs: 0.6,
        }]);
        let md = markdown(&cfg, &rs, &x);
        assert!(md.contains("## Transports at 25% local"), "{md}");
        assert!(
            md.contains(
                "| graph | G1 | fabric | 7.50 | 1.25 | 3.00 | 1500 | 30.0 / 120 | 1.50 | 0.25 |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| graph | G1 | tcp | 6.00 |  |  | 1600 |"),
            "{md}"
        );
        assert!(
            md.contains("| graph | G1 | tcp (default) | 2.75 | 0.46 | 1.10 | 1000 |"),
            "{md}"
        );
        assert!(md.contains("| graph | G1 | in-process | 2.50 |"), "{md}");
        assert!(
            md.contains("| fabric (tcp provider) | 31.0 / 90 | 40.0 | 0.80 | 0.60 |"),
            "{md}"
        );
    }

    fn extras(stores: Vec<crate::stores::StoreFigures>) -> Extras {
        Extras {
            tcp_write_gbs: 1.0,
            tcp_read_gbs: 1.0,
            stores,
            kernel_skipped: None,
            elapsed_s: 60.0,
        }
    }

    #[test]
    fn the_report_sets_one_server_beside_two_copies() {
        let mut cfg = BenchConfig::quick("/tmp/x".into());
        cfg.replicas = true;
        let rs = vec![
            record(Mode::NoAgent, 100, 1000.0, None),
            record(Mode::Memliner, 25, 6000.0, paged(1600, 0)),
            record(Mode::MemlinerReplicated, 25, 7200.0, paged(1600, 0)),
        ];
        let x = extras(Vec::new());
        let md = markdown(&cfg, &rs, &x);
        assert!(md.contains("## Replication at 25% local"), "{md}");
        assert!(md.contains("| graph | G1 | one | 6.00 |  |"), "{md}");
        assert!(
            md.contains("| graph | G1 | two, 2 copies | 7.20 | 1.20 |"),
            "{md}"
        );
    }

    #[test]
    fn the_report_sets_checksums_off_beside_on_pair_by_pair() {
        let mut cfg = BenchConfig::quick("/tmp/x".into());
        let rs = vec![
            record(Mode::NoAgent, 100, 1000.0, None),
            record(Mode::Memliner, 25, 6000.0, paged(1600, 0)),
            record(Mode::MemlinerNoChecksums, 25, 5000.0, paged(1600, 0)),
            record(Mode::Memliner, 25, 5100.0, paged(1600, 0)),
            record(Mode::MemlinerNoChecksums, 25, 5000.0, paged(1600, 0)),
        ];
        let x = extras(Vec::new());
        assert!(!markdown(&cfg, &rs, &x).contains("checksums at 25%"));
        cfg.checksums = true;
        let md = markdown(&cfg, &rs, &x);
        assert!(
            md.contains("## End-to-end page checksums at 25% local"),
            "{md}"
        );
        // Pairs 1.20 and 1.02: their median 1.11, the least 1.02.
        assert!(
            md.contains("| graph | G1 | 5550 | 5000 | 1.110 | 1.020 |"),
            "{md}"
        );
    }

    #[test]
    fn the_report_sets_scraped_runs_beside_unscraped_ones() {
        let cfg = BenchConfig::quick("/tmp/x".into());
        let scraped = |wall| Record {
            scrapes: Some(6),
            ..record(Mode::MemlinerScraped, 25, wall, paged(1600, 0))
        };
        let mut rs = vec![
            record(Mode::NoAgent, 100, 1000.0, None),
            record(Mode::Memliner, 25, 6000.0, paged(1600, 0)),
            record(Mode::Memliner, 25, 6300.0, paged(1600, 0)),
        ];
        let md = markdown(&cfg, &rs, &extras(Vec::new()));
        assert!(
            !md.contains("## Watching a JVM"),
            "no scraped runs, no section"
        );
        rs.extend([scraped(6100.0), scraped(6200.0)]);
        let md = markdown(&cfg, &rs, &extras(Vec::new()));
        assert!(
            md.contains("| graph | G1 | 6150 | 6150 | 1.000 | 0.049 | 6 |"),
            "{md}"
        );
    }

    #[test]
    fn the_report_sums_a_cluster_run_over_its_executors() {
        let cfg = BenchConfig::quick("/tmp/x".into());
        let executor = |remote: u64, gc_share: f64, read: u64| {
            let mut d = paged(remote, 0).unwrap();
            d.faults.gc_share_of_remote = Some(gc_share);
            d.pager.as_mut().unwrap().remote.pages_read = read;
            d
        };
        let cluster = |mode, local, wall_ms, executors: Vec<StatsDoc>| Record {
            workload: "spark-cluster-groupby".into(),
            executors,
            ..record(mode, local, wall_ms, None)
        };
        let rs = vec![
            cluster(Mode::NoAgent, 100, 20_000.0, Vec::new()),
            cluster(
                Mode::Memliner,
                25,
                25_000.0,
                vec![executor(1000, 0.5, 256), executor(3000, 0.1, 768)],
            ),
            // One executor never paged: the table says so.
            cluster(
                Mode::Baseline,
                25,
                30_000.0,
                vec![executor(4000, 0.5, 256), executor(0, 0.0, 0)],
            ),
        ];
        let mut rs = rs;
        rs.push(cluster(
            Mode::MemlinerGcHooks,
            25,
            22_000.0,
            vec![executor(500, 0.5, 256), executor(500, 0.5, 256)],
        ));
        let md = markdown(&cfg, &rs, &extras(Vec::new()));
        assert!(
            md.contains("| spark-cluster-groupby | G1 | memliner-gc-hooks | 25% | 22000 | 1.10 | 2 of 2 | 1000 |"),
            "{md}"
        );
        assert!(!md.contains("## MemLiner's GC hooks"), "{md}");
        assert!(
            md.contains("## Spark on executors: local-cluster, 2 executor JVMs of 512m heap"),
            "{md}"
        );
        let no_agent = md
            .find(
                "| spark-cluster-groupby | G1 | no-agent | 100% | 20000 | 1.00 |  |  |  |  |  |  |",
            )
            .expect(&md);
        // 1000 + 3000 remote faults, (500 + 300) of them by the GC, 1024 pages read, two
        // executors' 12 ms of pauses.
        let memliner = md
            .find("| spark-cluster-groupby | G1 | memliner | 25% | 25000 | 1.25 | 2 of 2 | 4000 | 20.0% | 0.0 | 4.0 MiB |")
            .expect(&md);
        assert!(no_agent < memliner, "all-local first: {md}");
        assert!(
            md.contains("| spark-cluster-groupby | G1 | baseline | 25% | 30000 | 1.50 | 1 of 2 | 4000 | 50.0% |"),
            "{md}"
        );
        // The sections read from a run's own stats document have nothing to show.
        assert!(!md.contains("## Remote faults by thread class"), "{md}");
        assert!(
            !md.contains("## The data path: where the time goes"),
            "{md}"
        );
    }
}
