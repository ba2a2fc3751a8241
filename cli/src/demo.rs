//! `memliner demo`: one workload sized like a service, all-local, then paged by memliner on the
//! embedded server, then — where the machine allows (root, cgroup v1, zram) — the same JVM
//! under kernel swap with the same memory for the heap, and memliner again with the heap
//! memory the kernel actually left the heap (the kernel also swaps the JVM's memory beside the
//! heap, so its heap gets more than the budget), so that the last line compares like with like.

use std::path::Path;

use crate::kernel;
use crate::run::{launch, RunConfig, Transport};
use crate::workloads::{self, Workload};
use crate::{locate, summary};
use memliner_contracts::options::Budget;

/// What the demo runs.
#[derive(Clone, Debug)]
pub struct Demo {
    pub workload: Workload,
    /// Local share of the heap, in percent.
    pub local: u32,
    pub collector: String,
    pub heap_mb: u64,
}

/// One finished run.
struct Row {
    label: String,
    wall_s: f64,
    checksum: String,
    /// Pages read in: from the memory server, or swapped in by the kernel.
    page_ins: Option<u64>,
    /// The heap memory it had (bytes): the budget, or the kernel's peak heap RSS.
    heap: Option<u64>,
}

fn checked(out: &crate::run::RunOutcome, label: &str) -> Result<String, String> {
    let result = workloads::parse_result(&out.stdout).ok_or_else(|| {
        format!(
            "{label}: the workload printed no RESULT line; stderr:\n{}",
            out.stderr
        )
    })?;
    if !out.status.success() || workloads::field(&result, "verified") != Some("true") {
        return Err(format!(
            "{label}: the workload failed ({}):\n{}",
            out.status, out.stderr
        ));
    }
    Ok(workloads::field(&result, "checksum")
        .unwrap_or("?")
        .to_string())
}

/// Runs `cmd` with the agent under `cfg`; the row and the run's stats.
fn paged(
    cfg: &RunConfig,
    cmd: &[String],
    label: String,
) -> Result<(Row, Option<memliner_contracts::stats::StatsDoc>), String> {
    eprintln!("memliner: running {label}");
    let out = launch(cfg, cmd, true)?;
    let checksum = checked(&out, &label)?;
    let page_ins = out
        .stats
        .as_ref()
        .and_then(|s| s.pager.as_ref())
        .map(|p| p.remote.pages_read);
    let heap = out
        .stats
        .as_ref()
        .and_then(|s| s.pager.as_ref())
        .map(|p| p.budget_pages * swap_backend::PAGE_SIZE as u64);
    Ok((
        Row {
            label,
            wall_s: out.wall.as_secs_f64(),
            checksum,
            page_ins,
            heap,
        },
        out.stats,
    ))
}

/// Why the kernel twin cannot run here, if it cannot.
fn kernel_unavailable(root: &Path) -> Option<String> {
    kernel::available(root).err()
}

pub fn run(d: &Demo) -> Result<(), String> {
    let root = locate::project_root()?;
    eprintln!("memliner: building the Java workloads");
    let classes = workloads::ensure_built(&root)?;
    let cmd = crate::workloads::java_command(&classes, d.workload, &d.collector, d.heap_mb);
    let local = format!("{}%", d.local);
    let kernel_skip = kernel_unavailable(&root);
    let mut rows = Vec::new();

    // All-local, no agent: the reference. Inside the kernel baseline's cgroup without a limit
    // where it can run, which also measures what the JVM holds, and its heap.
    let label = "all local (no agent)".to_string();
    eprintln!("memliner: running {label}");
    let unlimited = match &kernel_skip {
        None => {
            let k = kernel::run_command(&root, None, &cmd, &label)?;
            let kernel::Ended::Ran { checksum, .. } = k.ended.clone() else {
                return Err(format!("{label} did not finish: {:?}", k.ended));
            };
            rows.push(Row {
                label,
                wall_s: k.wall_ms / 1e3,
                checksum,
                page_ins: None,
                heap: k.figures.max_heap,
            });
            Some(k.figures)
        }
        Some(_) => {
            let out = launch(
                &RunConfig {
                    agent: false,
                    ..RunConfig::default()
                },
                &cmd,
                true,
            )?;
            rows.push(Row {
                checksum: checked(&out, &label)?,
                label,
                wall_s: out.wall.as_secs_f64(),
                page_ins: None,
                heap: None,
            });
            None
        }
    };

    let server = match Transport::Auto.resolve().0 {
        Transport::Unix => "embedded server, memory files",
        _ => "embedded TCP server",
    };
    let (row, stats) = paged(
        &RunConfig::default().local(d.local),
        &cmd,
        format!("{local} local, memliner ({server})"),
    )?;
    if let Some(s) = &stats {
        for l in summary::lines(s) {
            eprintln!("  {l}");
        }
    }
    rows.push(row);

    // The kernel twin: what the JVM needed beside its heap in the all-local run, plus the budget.
    let budget = (d.heap_mb << 20) as f64 * d.local as f64 / 100.0;
    let limit = unlimited.and_then(|u| kernel::same_heap_memory(&u, budget));
    let kernel_row = match (&kernel_skip, limit) {
        (Some(why), _) => {
            eprintln!("memliner: kernel swap at the same heap memory skipped: {why}");
            None
        }
        (None, None) => {
            eprintln!(
                "memliner: kernel swap at the same heap memory skipped: the all-local run's heap was not measured"
            );
            None
        }
        (None, Some(limit)) => {
            let limit = limit as u64;
            let label = format!(
                "kernel swap to zram, {} MiB cgroup limit (same heap memory)",
                limit >> 20
            );
            eprintln!("memliner: running {label}");
            let k = kernel::run_command(&root, Some(limit), &cmd, &label)?;
            match k.ended.clone() {
                kernel::Ended::Ran { checksum, .. } => {
                    let row = Row {
                        label,
                        wall_s: k.wall_ms / 1e3,
                        checksum,
                        page_ins: k.figures.pswpin,
                        heap: k.figures.max_heap,
                    };
                    rows.push(row);
                    Some(rows.len() - 1)
                }
                kernel::Ended::OomKilled => {
                    eprintln!("memliner: {label}: the kernel's OOM killer stopped the JVM");
                    None
                }
                kernel::Ended::Skipped(why) => {
                    eprintln!("memliner: {label} skipped: {why}");
                    None
                }
            }
        }
    };

    // memliner again with the heap memory the kernel's heap had: like with like.
    let at_kernel_heap = match kernel_row.and_then(|i| rows[i].heap) {
        Some(heap) => {
            let cfg = RunConfig::default().with(|o| o.budget = Budget::Bytes(heap / 4096 * 4096));
            let label = format!("memliner at the kernel's heap memory ({} MiB)", heap >> 20);
            rows.push(paged(&cfg, &cmd, label)?.0);
            Some(rows.len() - 1)
        }
        None => None,
    };

    println!(
        "\n{:<62} {:>8} {:>10} {:>9} {:>18}",
        "configuration", "wall s", "page-ins", "heap MiB", "checksum"
    );
    for r in &rows {
        println!(
            "{:<62} {:>8.2} {:>10} {:>9} {:>18}",
            r.label,
            r.wall_s,
            r.page_ins.map_or("".into(), |n| n.to_string()),
            r.heap.map_or("".into(), |h| (h >> 20).to_string()),
            r.checksum
        );
    }
    let same = rows.iter().all(|r| r.checksum == rows[0].checksum);
    let (all_local, m) = (&rows[0], &rows[1]);
    let vs_kernel = match (kernel_row.map(|i| &rows[i]), at_kernel_heap.map(|i| &rows[i])) {
        (Some(k), Some(mk)) => format!(
            "; kernel swap {:.2}x all-local with {} MiB of heap memory; at that heap memory memliner {:.2}x the kernel's time {}",
            k.wall_s / all_local.wall_s,
            k.heap.unwrap_or(0) >> 20,
            mk.wall_s / k.wall_s,
            page_ins_vs_kernel(mk.page_ins.unwrap_or(0), k.page_ins.unwrap_or(0))
        ),
        (Some(k), None) => format!(
            "; kernel swap at the same cgroup budget {:.2}x all-local (its heap memory not measured)",
            k.wall_s / all_local.wall_s,
        ),
        (None, _) => match &kernel_skip {
            Some(why) => format!("; no kernel twin ({why})"),
            None => "; the kernel twin did not finish".into(),
        },
    };
    println!(
        "\n{} {} MiB heap, {local} local: memliner {:.2}x all-local{vs_kernel}; checksums {}",
        d.workload.name(),
        d.heap_mb,
        m.wall_s / all_local.wall_s,
        if same { "match" } else { "DIFFER" }
    );
    if !same {
        return Err("a run computed a different checksum".into());
    }
    Ok(())
}

/// memliner's page-ins beside the kernel's swap-ins, as a ratio only where it has one.
fn page_ins_vs_kernel(memliner: u64, kernel: u64) -> String {
    match kernel {
        0 => format!("with {memliner} page-ins where the kernel swapped none in"),
        k => format!("with {:.2}x its page-ins", memliner as f64 / k as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_ins_are_a_ratio_only_against_a_kernel_that_swapped() {
        assert_eq!(page_ins_vs_kernel(300, 200), "with 1.50x its page-ins");
        assert_eq!(
            page_ins_vs_kernel(72958, 0),
            "with 72958 page-ins where the kernel swapped none in"
        );
    }
}
