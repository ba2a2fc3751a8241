//! The kernel baseline: the same JVM without the agent, held by a cgroup v1 memory limit and
//! swapping to zram (`scripts/kernel-baseline.sh` creates and removes both): what `memliner
//! demo` and the bench compare memliner with.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

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

/// What the script measured of one run (bytes, or counts), as `kernel-baseline: KEY=N ...`
/// on its last line and as a bench record's `kernel` object: one type both ways. A figure the
/// script did not print (or an older report did not have) is `None`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KernelFigures {
    /// The cgroup's memory limit (absent: unlimited).
    pub limit_bytes: Option<u64>,
    /// The cgroup's peak charge.
    pub max_usage: Option<u64>,
    /// Peak anonymous memory of the cgroup.
    pub max_anon: Option<u64>,
    /// Peak resident bytes of the Java heap.
    pub max_heap: Option<u64>,
    /// What the JVM held beside its heap, read at the instant of the heap's peak.
    pub beside_heap: Option<u64>,
    pub pgmajfault: Option<u64>,
    /// Pages swapped in and out (/proc/vmstat, the run alone on the machine's swap).
    pub pswpin: Option<u64>,
    pub pswpout: Option<u64>,
}

impl KernelFigures {
    /// `f` of these figures as a float, for medians.
    pub fn get(&self, f: impl Fn(&KernelFigures) -> Option<u64>) -> Option<f64> {
        f(self).map(|v| v as f64)
    }
}

/// The script's figures, from its last `kernel-baseline: max_usage=B max_anon=B max_heap=B
/// beside_heap=B pgmajfault=N pswpin=N pswpout=N` line (none: all `None`). A key this side does
/// not know is an error: the script ships with the binary, and a renamed figure must not read
/// as missing.
fn figures(stderr: &str) -> Result<KernelFigures, String> {
    // Its other lines (a cgroup it could not remove, after the figures) are words; a progress
    // bar the command drew with carriage returns (Spark's) may share the figures' line.
    let Some(line) = stderr
        .lines()
        .flat_map(|l| l.split('\r'))
        .rev()
        .find_map(|l| {
            l.strip_prefix("kernel-baseline: ")
                .filter(|rest| rest.split_whitespace().all(|kv| kv.contains('=')))
        })
    else {
        return Ok(KernelFigures::default());
    };
    let mut m = serde_json::Map::new();
    for (k, v) in line.split_whitespace().filter_map(|kv| kv.split_once('=')) {
        let n: u64 = v
            .parse()
            .map_err(|_| format!("kernel-baseline printed {k}={v}, not a count"))?;
        m.insert(k.into(), n.into());
    }
    serde_json::from_value(serde_json::Value::Object(m))
        .map_err(|e| format!("kernel-baseline's figures: {e}"))
}

/// The cgroup limit that leaves a JVM `budget` bytes of heap memory, from an unlimited run's
/// figures: what it needs beside the heap plus the budget (or all the heap it touches, if that
/// is less). `None` where the script did not see the heap.
pub fn same_heap_memory(unlimited: &KernelFigures, budget: f64) -> Option<f64> {
    let get = |v: Option<u64>| v.filter(|v| *v > 0).map(|v| v as f64);
    Some(get(unlimited.beside_heap)? + budget.min(get(unlimited.max_heap)?))
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
    /// The script's figures and the limit.
    pub figures: KernelFigures,
    pub wall_ms: f64,
    /// What it printed (a service's phases are read from it).
    pub stdout: String,
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
    let mut figures = figures(&out.stderr).map_err(|e| format!("{what}: {e}"))?;
    figures.limit_bytes = limit;
    use std::os::unix::process::ExitStatusExt;
    let ended = match (out.status.code(), out.status.signal()) {
        (Some(SKIP_STATUS), _) => Ended::Skipped(skip_reason(&out.stderr)),
        // The cgroup's OOM killer sends SIGKILL; bash reports it as 137.
        (Some(137), _) | (None, Some(9)) => Ended::OomKilled,
        _ => {
            let (checksum, workload_ms) = out.checked(what)?;
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
        stdout: out.stdout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_and_skip_reasons_are_read_from_the_script_output() {
        let f = figures(
            "noise\nkernel-baseline: max_usage=100 max_anon=90 pgmajfault=7 pswpin=5 pswpout=9\n",
        )
        .unwrap();
        assert_eq!(
            f,
            KernelFigures {
                max_usage: Some(100),
                max_anon: Some(90),
                pgmajfault: Some(7),
                pswpin: Some(5),
                pswpout: Some(9),
                ..KernelFigures::default()
            }
        );
        assert_eq!(figures("no figures\n").unwrap(), KernelFigures::default());
        // The cleanup's complaints come after the figures.
        let late = "kernel-baseline: pswpin=4\nkernel-baseline: could not remove /dev/zram1\n";
        assert_eq!(figures(late).unwrap().pswpin, Some(4));
        let after_a_bar = "[Stage 5:===>   (5 + 2) / 8]\rkernel-baseline: pswpin=6\n";
        assert_eq!(figures(after_a_bar).unwrap().pswpin, Some(6));
        // A figure renamed in the script is an error, not a missing value.
        let e = figures("kernel-baseline: swapins=5\n").unwrap_err();
        assert!(e.contains("unknown field `swapins`"), "{e}");
        assert!(figures("kernel-baseline: pswpin=x\n").is_err());
        // The record's object reads back as written (and older reports without some keys).
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(serde_json::from_str::<KernelFigures>(&json).unwrap(), f);
        assert_eq!(
            serde_json::from_str::<KernelFigures>(r#"{"pswpin": 3}"#).unwrap(),
            KernelFigures {
                pswpin: Some(3),
                ..KernelFigures::default()
            }
        );
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
        ))
        .unwrap();
        let limit = |budget: u64| same_heap_memory(&f, mib(budget) as f64).unwrap();
        assert_eq!(limit(256), mib(36 + 256) as f64);
        // A budget above what the heap touches limits nothing more than the heap.
        assert_eq!(limit(600), mib(36 + 314) as f64);
        // Without the heap's RSS there is no limit to compute.
        let none = figures("kernel-baseline: max_usage=100 max_heap=0 beside_heap=0\n").unwrap();
        assert_eq!(same_heap_memory(&none, 1.0), None);
    }
}
