//! Finding a cell's runs in a bench's records, and the medians every section reports.

use super::{median, BenchConfig, Mode, Record};

/// The records of one cell.
pub fn cell<'a>(
    rs: &'a [Record],
    workload: &str,
    collector: &str,
    mode: Mode,
    local: u32,
) -> Vec<&'a Record> {
    rs.iter()
        .filter(|r| {
            r.workload == workload && r.collector == collector && r.mode == mode && r.local == local
        })
        .collect()
}

/// Median of `f` over the runs of a cell that finished.
pub fn med(cell: &[&Record], f: impl Fn(&Record) -> Option<f64>) -> f64 {
    median(
        cell.iter()
            .filter(|r| r.ok())
            .filter_map(|r| f(r))
            .collect(),
    )
}

/// The workloads that were run, in run order.
pub fn workloads_of(rs: &[Record]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for r in rs {
        if !v.contains(&r.workload) {
            v.push(r.workload.clone());
        }
    }
    v
}

/// The workloads whose runs carry the agent's stats document, in run order (a cluster run's
/// documents are its executors', summed in a section of their own).
pub fn paged_workloads(rs: &[Record]) -> Vec<String> {
    workloads_of(rs)
        .into_iter()
        .filter(|w| rs.iter().any(|r| r.workload == *w && r.stats.is_some()))
        .collect()
}

/// The (workload, collector) pairs that were run, in run order.
pub fn pairs(cfg: &BenchConfig, rs: &[Record]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for w in workloads_of(rs) {
        for c in &cfg.collectors {
            if rs.iter().any(|r| r.workload == w && r.collector == *c) {
                out.push((w.clone(), c.clone()));
            }
        }
    }
    out
}

/// The (workload, collector, local) cells that were run with the agent below 100% local, of
/// the workloads whose runs carry the agent's stats.
pub fn paged_cells(cfg: &BenchConfig, rs: &[Record]) -> Vec<(String, String, u32)> {
    let mut out = Vec::new();
    let paged = paged_workloads(rs);
    for (w, c) in pairs(cfg, rs)
        .into_iter()
        .filter(|(w, _)| paged.contains(w))
    {
        for &l in cfg.locals.iter().filter(|l| **l < 100) {
            if rs
                .iter()
                .any(|r| r.workload == w && r.collector == c && r.local == l)
            {
                out.push((w.clone(), c.clone(), l));
            }
        }
    }
    out
}
