//! The report's account of why pages moved: where refaults came from (their distances, and
//! how many working-set detection caught), what sampling paid, what prefetching wasted and
//! what the collector's dead space saved, for memliner at every paged budget.

use std::fmt::Write;

use memliner_contracts::stats::StatsDoc;

use super::cells::{cell, med, paged_cells};
use super::{BenchConfig, Mode, Record};

fn fmt(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.0}")
    } else {
        "–".into()
    }
}

fn share(part: f64, whole: f64) -> String {
    if part.is_finite() && whole.is_finite() && whole > 0.0 {
        format!("{:.0}%", part / whole * 100.0)
    } else {
        "–".into()
    }
}

/// Median of a figure of the stats documents of a cell.
fn stat(c: &[&Record], f: impl Fn(&StatsDoc) -> Option<f64>) -> f64 {
    med(c, |r| r.stat(&f))
}

pub fn section(md: &mut String, cfg: &BenchConfig, rs: &[Record]) {
    let cells = paged_cells(cfg, rs);
    let with_stats: Vec<_> = cells
        .iter()
        .filter(|(w, c, l)| {
            cell(rs, w, c, Mode::Memliner, *l)
                .iter()
                .any(|r| r.stats.is_some())
        })
        .collect();
    if with_stats.is_empty() {
        return;
    }
    let _ = writeln!(md, "\n## Why pages moved (memliner, medians)\n");
    let _ = writeln!(
        md,
        "A refault's distance is the number of pages that left the inactive list (evicted or \
         activated) between its eviction and its return, here in budgets. Within half a \
         budget, or the active list's length, it counts as the working set and is activated \
         at once. *Sampled* pages were unmapped with their bytes kept to see whether they are \
         used (the window the sizer opens when that pays); *reactivated*, touched meanwhile.\n"
    );
    let _ = writeln!(
        md,
        "| workload | collector | local | remote faults | working-set activations | distant | < 1/16 | < 1/4 | < 1 | < 4 | ≥ 4 budgets | sampled / reactivated | window |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (w, c, l) in &with_stats {
        let m = cell(rs, w, c, Mode::Memliner, *l);
        let rc = |f: fn(&StatsDoc) -> Option<f64>| stat(&m, f);
        let remote = rc(|d| Some(d.faults.remote as f64));
        let ws = rc(|d| Some(d.pager.as_ref()?.reclaim.workingset_activations as f64));
        let distant = rc(|d| Some(d.pager.as_ref()?.reclaim.distant_refaults as f64));
        // Cumulative shares of refaults below a distance (in budgets).
        let below = |budgets: f64| {
            stat(&m, |d| {
                let h = &d.pager.as_ref()?.reclaim.refault_distance;
                let all: u64 = h.iter().map(|b| b.refaults).sum();
                let under: u64 = h
                    .iter()
                    .filter(|b| b.below_budgets.is_some_and(|x| x <= budgets))
                    .map(|b| b.refaults)
                    .sum();
                (all > 0).then(|| under as f64 / all as f64)
            })
        };
        let pct = |v: f64| {
            if v.is_finite() {
                format!("{:.0}%", v * 100.0)
            } else {
                "–".into()
            }
        };
        let _ = writeln!(
            md,
            "| {w} | {c} | {l}% | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} |",
            fmt(remote),
            fmt(ws),
            fmt(distant),
            pct(below(0.0625)),
            pct(below(0.25)),
            pct(below(1.0)),
            pct(below(4.0)),
            pct(1.0 - below(4.0)),
            fmt(rc(|d| Some(d.pager.as_ref()?.reclaim.deactivated as f64))),
            fmt(rc(|d| Some(d.pager.as_ref()?.reclaim.reactivated as f64))),
            fmt(rc(|d| Some(
                d.pager.as_ref()?.reclaim.inactive_target_pages as f64
            ))),
        );
    }
    let _ = writeln!(
        md,
        "\nDead space: pages a stock JDK's heap layout showed to hold nothing live after a \
         collection (free regions; space above a region's or space's top), dropped without a \
         write-back; *fetches saved* were remote (their reuse zero-filled locally instead of \
         reading dead bytes), *freed* were local (budget back at once), *left* were local and \
         left to the JVM to reuse in place (the budget having room, or young regions \
         write-protected for eden). Prefetched pages evicted \
         with no use seen count against prefetching.\n"
    );
    let _ = writeln!(
        md,
        "| workload | collector | local | dead pages (free regions / above top) | fetches saved | freed | left | ms in pauses | prefetched | evicted unused | evictions clean / dirty / zero |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (w, c, l) in &with_stats {
        let m = cell(rs, w, c, Mode::Memliner, *l);
        let p = |f: fn(&memliner_contracts::stats::PagerDoc) -> f64| {
            stat(&m, |d| d.pager.as_ref().map(f))
        };
        let dead = p(|d| d.dead.pages() as f64);
        let _ = writeln!(
            md,
            "| {w} | {c} | {l}% | {} ({} / {}) | {} | {} | {} | {} | {} | {} ({}) | {} / {} / {} |",
            fmt(dead),
            fmt(p(|d| d.dead.free_region.pages as f64)),
            fmt(p(|d| d.dead.above_top.pages as f64)),
            fmt(p(|d| d.dead.remote() as f64)),
            fmt(p(|d| d.dead.mapped() as f64)),
            fmt(p(|d| d.dead.left_mapped() as f64)),
            fmt(p(|d| d.dead.pause_ms)),
            fmt(p(|d| d.remote.pages_prefetched as f64)),
            fmt(p(|d| d.reclaim.prefetched_evicted_unused as f64)),
            share(
                p(|d| d.reclaim.prefetched_evicted_unused as f64),
                p(|d| d.remote.pages_prefetched as f64)
            ),
            fmt(p(|d| d.evictions.clean as f64)),
            fmt(p(|d| d.evictions.dirty as f64)),
            fmt(p(|d| d.evictions.zero as f64)),
        );
    }
}
