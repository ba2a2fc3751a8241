//! Services in the bench: Apache Cassandra (`scripts/cassandra.sh`) under the verifying
//! YCSB-style load (`scripts/ycsb.sh`), one run per cell through `scripts/cassandra-ycsb.sh`,
//! which prints the load's `ycsb-result` lines and a RESULT line as the Java workloads do.
//! What a service is judged on comes from those lines: throughput and p50/p99/p99.9 latency per
//! phase and operation type.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{median, BenchConfig, Mode, Record};

/// Local memory ratios a service runs at, in percent of the heap.
pub const LOCALS: [u32; 3] = [100, 50, 25];
/// The variable its launcher reads the agent string from.
pub const AGENT_ENV: &str = "MEMLINER_AGENT_OPTS";
/// The smallest heap the node gets (Cassandra 5 wants room beside its memtables).
pub const MIN_HEAP_MB: u64 = 1024;
/// The workload phases after the load, YCSB's A (50% reads, 50% updates) and B (95/5).
pub const PHASES: &str = "a,b";

/// One operation type's latency in a phase (microseconds, as the load measured them).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OpLatency {
    pub count: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

/// One phase of the load (`load`, `a`, `b`, ...), from its `ycsb-result` line.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    pub phase: String,
    pub ops: u64,
    pub seconds: f64,
    pub throughput: f64,
    /// Rows read back and found as written.
    pub verified: u64,
    pub wrong: u64,
    pub errors: u64,
    pub by_op: BTreeMap<String, OpLatency>,
}

/// The `ycsb-result` lines of a run's stdout (none for other workloads).
pub fn parse(stdout: &str) -> Vec<Phase> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ycsb-result "))
        .filter_map(|j| serde_json::from_str(j).ok())
        .collect()
}

/// The command of one run: the node with `heap_mb` of heap and `collector`, and a load sized to
/// it (about 200 records of 1 KiB per MiB of heap, so that the memtables hold a fifth of the heap;
/// each phase does half as many operations), on free loopback ports.
pub fn command(root: &Path, heap_mb: u64, collector: &str) -> Result<Vec<String>, String> {
    let heap_mb = heap_mb.max(MIN_HEAP_MB);
    let records = heap_mb * 200;
    let port = || -> Result<u16, String> {
        Ok(std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free loopback port: {e}"))?
            .port())
    };
    let (cql, storage) = (port()?, port()?);
    Ok([
        root.join("scripts/cassandra-ycsb.sh").display().to_string(),
        "--heap".into(),
        format!("{heap_mb}m"),
        "--gc".into(),
        collector.into(),
        "--port".into(),
        cql.to_string(),
        "--storage-port".into(),
        storage.to_string(),
        "--records".into(),
        records.to_string(),
        "--ops".into(),
        (records / 2).to_string(),
        "--workloads".into(),
        PHASES.into(),
    ]
    .to_vec())
}

/// Checks that the Cassandra jars are there (fetching them if mvn can).
pub fn prepare(root: &Path) -> Result<(), String> {
    fetch(root, "scripts/cassandra.sh", &["--fetch"], "Cassandra").map(|_| ())
}

/// Runs a script that fetches code from Maven Central (`script` under `root`, with `args`);
/// its trimmed stdout, or an error naming `what` with the script's own words.
pub fn fetch(root: &Path, script: &str, args: &[&str], what: &str) -> Result<String, String> {
    let out = std::process::Command::new(root.join(script))
        .args(args)
        .output()
        .map_err(|e| format!("{script}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what} is not available: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The report's section: per cell, each phase's throughput and its operations' tail latency,
/// and what the paging cost (remote reads, or the kernel's swap-ins and the heap it left).
pub fn section(md: &mut String, cfg: &BenchConfig, rs: &[Record]) {
    let service: Vec<&Record> = rs.iter().filter(|r| !r.service.is_empty()).collect();
    let Some(first) = service.first() else {
        return;
    };
    let workload = first.workload.clone();
    let phases: Vec<String> = first
        .service
        .iter()
        .map(|p| p.phase.clone())
        .filter(|p| p != "load")
        .collect();
    let _ = writeln!(
        md,
        "\n## Cassandra under a verifying YCSB-style load (medians)\n\n\
         One node (`scripts/cassandra.sh`: Cassandra 5.0 from Maven Central, memtables on the \
         heap, {} heap of at least {MIN_HEAP_MB} MiB, the node's memory lock off in every cell) \
         and the load (`scripts/ycsb.sh`: 8 client threads outside the node's JVM and outside \
         the kernel's cgroup, scrambled Zipfian keys, 1 KiB records, every read checked against \
         what was written) on one machine. Each run loads the records, then runs YCSB \
         {}; throughput in operations per second, latency in ms as the client saw it. Wrong \
         reads: none in any run (a wrong one fails the run). Remote: pages the agent read; for \
         the kernel its swap-ins, and the heap RSS it left the node.\n",
        first.collector,
        phases
            .iter()
            .map(|p| p.to_uppercase())
            .collect::<Vec<_>>()
            .join(" and ")
    );
    let mut head = "| local | run |".to_string();
    let mut rule = "|---|---|".to_string();
    for p in &phases {
        let _ = write!(
            head,
            " {} ops/s | {} read p50 / p99 / p99.9 | {} update p99 |",
            p.to_uppercase(),
            p.to_uppercase(),
            p.to_uppercase()
        );
        rule.push_str("---|---|---|");
    }
    head.push_str(" remote pages | fault p99 (us) |");
    rule.push_str("---|---|");
    let _ = writeln!(md, "{head}\n{rule}");
    let mut locals: Vec<u32> = service.iter().map(|r| r.local).collect();
    locals.sort_unstable_by(|a, b| b.cmp(a));
    locals.dedup();
    let modes = [
        Mode::NoAgent,
        Mode::Baseline,
        Mode::Memliner,
        Mode::MemlinerTcp,
        Mode::MemlinerInProcess,
        Mode::Kernel,
        Mode::MemlinerKernelHeap,
    ];
    for &local in &locals {
        for mode in modes {
            let cell: Vec<&Record> = service
                .iter()
                .copied()
                .filter(|r| r.workload == workload && r.local == local && r.mode == mode)
                .collect();
            if cell.is_empty() || (mode == Mode::NoAgent && local != 100) {
                continue;
            }
            let mut row = format!("| {local}% | {} |", mode.name());
            for p in &phases {
                let of = |f: &dyn Fn(&Phase) -> Option<f64>| {
                    median(
                        cell.iter()
                            .filter_map(|r| r.service.iter().find(|x| &x.phase == p))
                            .filter_map(f)
                            .collect(),
                    )
                };
                let lat = |op: &'static str, f: fn(&OpLatency) -> u64| {
                    move |x: &Phase| x.by_op.get(op).map(|l| f(l) as f64 / 1e3)
                };
                let _ = write!(
                    row,
                    " {:.0} | {:.1} / {:.1} / {:.1} | {:.1} |",
                    of(&|x| Some(x.throughput)),
                    of(&lat("read", |l| l.p50_us)),
                    of(&lat("read", |l| l.p99_us)),
                    of(&lat("read", |l| l.p999_us)),
                    of(&lat("update", |l| l.p99_us)),
                );
            }
            let remote = if mode == Mode::Kernel {
                let swapins = median(
                    cell.iter()
                        .filter_map(|r| r.kernel.as_ref()?.get(|k| k.pswpin))
                        .collect(),
                );
                let heap = median(
                    cell.iter()
                        .filter_map(|r| r.kernel.as_ref()?.get(|k| k.max_heap))
                        .collect(),
                );
                format!("{swapins:.0} swap-ins, heap {:.0} MiB", heap / 1048576.0)
            } else {
                let reads = median(
                    cell.iter()
                        .filter_map(|r| {
                            r.stat(|s| Some(s.pager.as_ref()?.remote.pages_read as f64))
                        })
                        .collect(),
                );
                if reads.is_finite() {
                    format!("{reads:.0}")
                } else {
                    "-".into()
                }
            };
            let fault_p99 = median(
                cell.iter()
                    .filter_map(|r| r.stat(|s| s.pager.as_ref()?.latency.remote.p99_us))
                    .collect(),
            );
            let fault_p99 = if fault_p99.is_finite() {
                format!("{fault_p99:.0}")
            } else {
                "-".into()
            };
            let _ = writeln!(md, "{row} {remote} | {fault_p99} |");
        }
    }
    let _ = writeln!(md);
    let _ = cfg;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_are_read_and_other_lines_left() {
        let out = "noise\nycsb-result {\"phase\":\"a\",\"ops\":10,\"seconds\":1.5,\
                   \"throughput\":6.7,\"verified\":5,\"wrong\":0,\"errors\":0,\"by_op\":\
                   {\"read\":{\"count\":5,\"p50_us\":100,\"p99_us\":900,\"p999_us\":950,\
                   \"max_us\":990}}}\nRESULT workload=cassandra checksum=x verified=true\n";
        let p = parse(out);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].phase, "a");
        assert_eq!(p[0].by_op["read"].p99_us, 900);
        assert!(parse("RESULT checksum=1\n").is_empty());
    }
}
