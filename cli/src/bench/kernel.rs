//! The kernel baseline: the same JVM without the agent, held by a cgroup v1 memory limit and
//! swapping to zram (`scripts/kernel-baseline.sh` creates and removes both).

use std::path::{Path, PathBuf};

use serde_json::json;

use super::{checked, Planned, Record};
use crate::run::{launch, RunConfig};

/// Exit status of the script when the setup is impossible here.
const SKIP_STATUS: i32 = 3;

fn script(root: &Path) -> PathBuf {
    root.join("scripts/kernel-baseline.sh")
}

fn no_agent() -> RunConfig {
    RunConfig {
        agent: false,
        ..RunConfig::default()
    }
}

/// Whether the kernel baseline can run here; `Err` holds the reason it cannot.
pub fn available(root: &Path) -> Result<(), String> {
    let s = script(root);
    if !s.is_file() {
        return Err(format!("{} is missing", s.display()));
    }
    let cmd = vec![
        s.display().to_string(),
        "none".into(),
        "--".into(),
        "true".into(),
    ];
    let out = launch(&no_agent(), &cmd, true)?;
    match out.status.code() {
        Some(0) => Ok(()),
        Some(SKIP_STATUS) => Err(skip_reason(&out.stderr)),
        _ => Err(format!(
            "the setup check failed ({}): {}",
            out.status,
            out.stderr.trim()
        )),
    }
}

fn skip_reason(stderr: &str) -> String {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("SKIP: "))
        .unwrap_or("the setup is impossible here")
        .to_string()
}

/// The script's figures: `kernel-baseline: max_usage=B max_anon=B max_heap=B beside_heap=B
/// pgmajfault=N pswpin=N pswpout=N`.
fn figures(stderr: &str) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    if let Some(line) = stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("kernel-baseline: "))
    {
        for kv in line.split_whitespace() {
            if let Some((k, v)) = kv.split_once('=') {
                if let Ok(n) = v.parse::<u64>() {
                    m.insert(k.into(), n.into());
                }
            }
        }
    }
    m
}

/// The cgroup limit that leaves a JVM `budget` bytes of heap memory, from an unlimited run's
/// figures: what it needs beside the heap plus the budget (or all the heap it touches, if that
/// is less). `None` where the script did not see the heap.
pub fn same_heap_memory(
    unlimited: &serde_json::Map<String, serde_json::Value>,
    budget: f64,
) -> Option<f64> {
    let get = |k: &str| unlimited.get(k)?.as_f64().filter(|v| *v > 0.0);
    Some(get("beside_heap")? + budget.min(get("max_heap")?))
}

/// How a run under the kernel baseline ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Ended {
    /// It finished: its checksum and the workload's own time (ms).
    Ran { checksum: String, workload_ms: f64 },
    /// The cgroup's OOM killer stopped it.
    OomKilled,
    /// The setup is impossible here.
    Skipped(String),
}

/// One run of a command under the kernel baseline.
#[derive(Clone, Debug)]
pub struct KernelRun {
    pub ended: Ended,
    /// The script's figures (`max_usage`, `max_anon`, `pgmajfault`, `pswpin`, `pswpout`) and
    /// the limit.
    pub figures: serde_json::Map<String, serde_json::Value>,
    pub wall_ms: f64,
}

impl KernelRun {
    pub fn figure(&self, key: &str) -> Option<f64> {
        self.figures.get(key)?.as_f64()
    }
}

/// Runs `cmd` (a workload printing a RESULT line) under a memory limit of `limit` bytes
/// (`None`: no limit, to measure what it holds). `what` names it in errors.
pub fn run_command(
    root: &Path,
    limit: Option<u64>,
    cmd: &[String],
    what: &str,
) -> Result<KernelRun, String> {
    let mut full = vec![
        script(root).display().to_string(),
        limit.map_or("none".to_string(), |l| l.to_string()),
        "--".into(),
    ];
    full.extend(cmd.iter().cloned());
    let out = launch(&no_agent(), &full, true)?;
    let mut figures = figures(&out.stderr);
    if let Some(l) = limit {
        figures.insert("limit_bytes".into(), json!(l));
    }
    use std::os::unix::process::ExitStatusExt;
    let ended = match (out.status.code(), out.status.signal()) {
        (Some(SKIP_STATUS), _) => Ended::Skipped(skip_reason(&out.stderr)),
        // The cgroup's OOM killer sends SIGKILL; bash reports it as 137.
        (Some(137), _) | (None, Some(9)) => Ended::OomKilled,
        _ => {
            let (checksum, workload_ms) = checked(&out, what)?;
            Ended::Ran {
                checksum,
                workload_ms,
            }
        }
    };
    Ok(KernelRun {
        ended,
        figures,
        wall_ms: out.wall.as_secs_f64() * 1e3,
    })
}

/// A bench run of `cmd` under a memory limit of `limit` bytes (`None`: no limit, to measure).
pub(super) fn run(
    root: &Path,
    limit: Option<u64>,
    cmd: &[String],
    p: &Planned,
    what: &str,
) -> Result<Record, String> {
    let k = run_command(root, limit, cmd, what)?;
    let mut rec = Record {
        kernel: Some(serde_json::Value::Object(k.figures.clone())),
        ..super::blank(p, "ok".into())
    };
    match k.ended {
        Ended::Skipped(why) => rec.outcome = format!("skipped: {why}"),
        Ended::OomKilled => rec.outcome = "oom-killed".into(),
        Ended::Ran {
            checksum,
            workload_ms,
        } => {
            rec.checksum = checksum;
            rec.workload_ms = workload_ms;
            rec.wall_ms = k.wall_ms;
        }
    }
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_and_skip_reasons_are_read_from_the_script_output() {
        let f = figures(
            "noise\nkernel-baseline: max_usage=100 max_anon=90 pgmajfault=7 pswpin=5 pswpout=9\n",
        );
        assert_eq!(f["max_usage"], 100);
        assert_eq!(f["max_anon"], 90);
        assert_eq!(f["pgmajfault"], 7);
        assert_eq!(f["pswpin"], 5);
        assert_eq!(f["pswpout"], 9);
        assert_eq!(
            skip_reason("SKIP: needs root to create a cgroup and a swap device\n"),
            "needs root to create a cgroup and a swap device"
        );
    }

    #[test]
    fn the_limit_is_what_the_jvm_needs_beside_its_heap_plus_the_budget() {
        let mib = |n: u64| n << 20;
        // A cold page cache charged 50 MiB of files to the run and the heap grew 40 MiB after
        // its last sample: neither is given to the kernel as heap room.
        let f = figures(&format!(
            "kernel-baseline: max_usage={} max_anon={} max_heap={} beside_heap={} pswpin=0\n",
            mib(440),
            mib(390),
            mib(314),
            mib(36)
        ));
        let limit = |budget: u64| same_heap_memory(&f, mib(budget) as f64).unwrap();
        assert_eq!(limit(256), mib(36 + 256) as f64);
        // A budget above what the heap touches limits nothing more than the heap.
        assert_eq!(limit(600), mib(36 + 314) as f64);
        // Without the heap's RSS there is no limit to compute.
        let none = figures("kernel-baseline: max_usage=100 max_heap=0 beside_heap=0\n");
        assert_eq!(same_heap_memory(&none, 1.0), None);
    }
}
