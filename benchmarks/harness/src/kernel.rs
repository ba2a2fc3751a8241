//! The kernel baseline's bench records: a run under `memliner_cli::kernel` as a row.

use std::path::Path;

pub use memliner_cli::kernel::{available, same_heap_memory, KernelFigures};
use memliner_cli::kernel::{run_command, Ended};

use super::{blank, service, Outcome, Planned, Record};

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
        kernel: Some(k.figures.clone()),
        service: service::parse(&k.stdout),
        ..blank(p, Outcome::Ok)
    };
    match k.ended {
        Ended::Skipped(why) => rec.outcome = Outcome::Skipped(why),
        Ended::OomKilled => rec.outcome = Outcome::OomKilled,
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
