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

/// The script's figures: `kernel-baseline: max_usage=B pgmajfault=N pswpin=N`.
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

/// Runs `cmd` under a memory limit of `limit` bytes (`None`: no limit, to measure).
pub fn run(
    root: &Path,
    limit: Option<u64>,
    cmd: &[String],
    p: &Planned,
    what: &str,
) -> Result<Record, String> {
    let mut full = vec![
        script(root).display().to_string(),
        limit.map_or("none".to_string(), |l| l.to_string()),
        "--".into(),
    ];
    full.extend(cmd.iter().cloned());
    let out = launch(&no_agent(), &full, true)?;
    let mut fig = figures(&out.stderr);
    if let Some(l) = limit {
        fig.insert("limit_bytes".into(), json!(l));
    }
    let mut rec = Record {
        kernel: Some(serde_json::Value::Object(fig)),
        ..super::blank(p, "ok".into())
    };
    use std::os::unix::process::ExitStatusExt;
    match (out.status.code(), out.status.signal()) {
        (Some(SKIP_STATUS), _) => {
            rec.outcome = format!("skipped: {}", skip_reason(&out.stderr));
        }
        // The cgroup's OOM killer sends SIGKILL; bash reports it as 137.
        (Some(137), _) | (None, Some(9)) => rec.outcome = "oom-killed".into(),
        _ => {
            let (sum, ms) = checked(&out, what)?;
            rec.checksum = sum;
            rec.workload_ms = ms;
            rec.wall_ms = out.wall.as_secs_f64() * 1e3;
        }
    }
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_and_skip_reasons_are_read_from_the_script_output() {
        let f = figures("noise\nkernel-baseline: max_usage=100 pgmajfault=7 pswpin=5\n");
        assert_eq!(f["max_usage"], 100);
        assert_eq!(f["pgmajfault"], 7);
        assert_eq!(f["pswpin"], 5);
        assert_eq!(
            skip_reason("SKIP: needs root to create a cgroup and a swap device\n"),
            "needs root to create a cgroup and a swap device"
        );
    }
}
