//! `memliner stats PID --every 1s`: one line per interval, as `jstat -gc PID 1s` prints, with
//! what moved in it: remote faults per second, the GC's share of them, MiB/s read and written,
//! resident against the budget, and the remote fault latency's median and 99th percentile.
//!
//! It reads the JVM's `/metrics` (`metrics=`), which costs the JVM nothing it would notice.
//! A JVM without it is asked by SIGQUIT each interval (its thread dump then goes to its
//! stdout, and the latency shown is since the start): said once, on stderr.

use memliner_contracts::metrics::jvm;
use std::io::Write;
use std::time::{Duration, Instant};

use memliner_contracts::stats::StatsDoc;

use crate::live::{self, LiveError};
use crate::scrape::{self, Page};

const MIB: f64 = (1 << 20) as f64;

/// The counters one line is computed from, at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub remote_faults: f64,
    pub gc_remote_faults: f64,
    pub read_bytes: f64,
    pub written_bytes: f64,
    pub resident_bytes: f64,
    pub budget_bytes: f64,
    /// Remote fault latency (s): cumulative buckets, from `/metrics`...
    pub buckets: Vec<(f64, f64)>,
    /// ... or (p50, p99) since the start, from a stats document.
    pub since_start: Option<(f64, f64)>,
}

impl Snapshot {
    pub fn from_page(p: &Page) -> Snapshot {
        let remote = [("kind", "remote")];
        let gc = |class| p.sum(jvm::FAULTS_TOTAL, &[("kind", "remote"), ("class", class)]);
        Snapshot {
            remote_faults: p.sum(jvm::FAULTS_TOTAL, &remote),
            gc_remote_faults: gc("gc") + gc("gc-concurrent"),
            read_bytes: p.sum(jvm::REMOTE_READ_BYTES_TOTAL, &[]),
            written_bytes: p.sum(jvm::REMOTE_WRITTEN_BYTES_TOTAL, &[]),
            resident_bytes: p.sum(jvm::RESIDENT_BYTES, &[]),
            budget_bytes: p.sum(jvm::BUDGET_BYTES, &[]),
            buckets: p.buckets(jvm::FAULT_LATENCY_SECONDS, &[("source", "remote")]),
            since_start: None,
        }
    }

    pub fn from_doc(d: &StatsDoc) -> Snapshot {
        let page = swap_backend::PAGE_SIZE as f64;
        let gc = d.faults.by_class.gc.remote + d.faults.by_class.gc_concurrent.remote;
        let (resident, budget, read, written, latency) =
            d.pager.as_ref().map_or((0.0, 0.0, 0.0, 0.0, None), |p| {
                let l = &p.latency.remote;
                (
                    p.resident_pages as f64 * page,
                    p.budget_pages as f64 * page,
                    p.remote.pages_read as f64 * page,
                    p.remote.pages_written as f64 * page,
                    l.p50_us.zip(l.p99_us).map(|(a, b)| (a / 1e6, b / 1e6)),
                )
            });
        Snapshot {
            remote_faults: d.faults.remote as f64,
            gc_remote_faults: gc as f64,
            read_bytes: read,
            written_bytes: written,
            resident_bytes: resident,
            budget_bytes: budget,
            buckets: Vec::new(),
            since_start: latency,
        }
    }
}

/// The header line.
pub const HEADER: &str =
    "    time  rfaults/s   gc%  in MiB/s out MiB/s  resident MiB  budget MiB   p50 us   p99 us";

/// The line for the interval from `before` to `now`, `secs` long, ending at `clock`.
pub fn line(before: &Snapshot, now: &Snapshot, secs: f64, clock: &str) -> String {
    let rate = |a: f64, b: f64| (b - a).max(0.0) / secs.max(1e-9);
    let faults = now.remote_faults - before.remote_faults;
    let gc = if faults > 0.0 {
        format!(
            "{:5.1}",
            100.0 * (now.gc_remote_faults - before.gc_remote_faults) / faults
        )
    } else {
        "    -".into()
    };
    let (p50, p99) = match now.since_start {
        Some(q) => (Some(q.0), Some(q.1)),
        None => {
            let d = scrape::bucket_delta(&now.buckets, &before.buckets);
            (scrape::quantile(0.5, &d), scrape::quantile(0.99, &d))
        }
    };
    let us = |q: Option<f64>| q.map_or("       -".into(), |s| format!("{:8.1}", s * 1e6));
    format!(
        "{clock:>8} {:10.0} {gc} {:9.2} {:9.2} {:13.1} {:11.1} {} {}",
        rate(before.remote_faults, now.remote_faults),
        rate(before.read_bytes, now.read_bytes) / MIB,
        rate(before.written_bytes, now.written_bytes) / MIB,
        now.resident_bytes / MIB,
        now.budget_bytes / MIB,
        us(p50),
        us(p99),
    )
}

/// Where the figures come from.
enum Feed {
    Metrics(String),
    Sigquit,
}

impl Feed {
    fn snapshot(&self, pid: u32) -> Result<Snapshot, String> {
        match self {
            Feed::Metrics(addr) => scrape::get(addr, Duration::from_secs(5))
                .map(|p| Snapshot::from_page(&p))
                .map_err(|e| e.to_string()),
            Feed::Sigquit => live::request(pid, live::TIMEOUT)
                .map(|(_, d)| Snapshot::from_doc(&d))
                .map_err(|e| e.to_string()),
        }
    }
}

/// Lines of the terminal, for repeating the header every screenful (24 when not a terminal).
fn screen_lines() -> usize {
    use std::io::IsTerminal;
    if std::io::stdout().is_terminal() {
        if let Ok((_, rows)) = ratatui::crossterm::terminal::size() {
            return usize::from(rows).max(4);
        }
    }
    24
}

/// Seconds since midnight UTC as `HH:MM:SS`.
fn clock() -> String {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{:02}:{:02}:{:02}", s / 3600 % 24, s / 60 % 60, s % 60)
}

/// Streams JVM `pid`'s lines to `out` every `every` until it exits.
pub fn run(pid: u32, every: Duration, out: &mut impl Write) -> Result<(), LiveError> {
    let feed = match live::metrics_target(pid) {
        Ok(addr) => Feed::Metrics(addr),
        Err(LiveError::NoMetrics { .. }) => {
            eprintln!(
                "memliner: JVM {pid} serves no /metrics (start it with metrics=0): asking it by \
                 SIGQUIT every {} s, which prints a thread dump on its stdout; latency since its start",
                every.as_secs_f64()
            );
            Feed::Sigquit
        }
        Err(e) => return Err(e),
    };
    let mut before = feed.snapshot(pid).map_err(LiveError::Unreadable)?;
    let mut at = Instant::now();
    let screen = screen_lines();
    let mut printed = 0usize;
    let mut failures = 0;
    loop {
        std::thread::sleep(every.saturating_sub(at.elapsed()));
        let now = match feed.snapshot(pid) {
            Ok(s) => s,
            Err(_) if !live::alive(pid) => {
                eprintln!("memliner: JVM {pid} exited");
                return Ok(());
            }
            Err(e) => {
                failures += 1;
                if failures >= 3 {
                    return Err(LiveError::Unreadable(e));
                }
                at = Instant::now();
                continue;
            }
        };
        failures = 0;
        let secs = at.elapsed().as_secs_f64();
        at = Instant::now();
        if printed.is_multiple_of(screen - 1) {
            let _ = writeln!(out, "{HEADER}");
        }
        let _ = writeln!(out, "{}", line(&before, &now, secs, &clock()));
        let _ = out.flush();
        printed += 1;
        before = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_shows_the_intervals_rates_and_latency() {
        let page = |faults: f64, gc: f64, read: f64, le1: f64, all: f64| {
            scrape::parse(&format!(
                "memliner_jvm_faults_total{{class=\"application\",kind=\"remote\"}} {}\n\
                 memliner_jvm_faults_total{{class=\"gc\",kind=\"remote\"}} {gc}\n\
                 memliner_jvm_faults_total{{class=\"gc\",kind=\"zero\"}} 99\n\
                 memliner_jvm_remote_read_bytes_total {read}\n\
                 memliner_jvm_resident_bytes 1048576\nmemliner_jvm_budget_bytes 4194304\n\
                 memliner_jvm_fault_latency_seconds_bucket{{source=\"remote\",le=\"0.00001\"}} {le1}\n\
                 memliner_jvm_fault_latency_seconds_bucket{{source=\"remote\",le=\"0.0001\"}} {all}\n\
                 memliner_jvm_fault_latency_seconds_bucket{{source=\"remote\",le=\"+Inf\"}} {all}\n",
                faults - gc
            ))
            .unwrap()
        };
        let a = Snapshot::from_page(&page(100.0, 10.0, 0.0, 50.0, 100.0));
        let b = Snapshot::from_page(&page(300.0, 60.0, 2.0 * MIB, 250.0, 300.0));
        let l = line(&a, &b, 2.0, "12:00:00");
        let cols: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(
            cols[..7],
            ["12:00:00", "100", "25.0", "1.00", "0.00", "1.0", "4.0"],
            "{l}"
        );
        // 200 faults in the interval, all at or below 10 µs: p50 at 5 µs.
        assert_eq!(cols[7], "5.0", "{l}");
        // Nothing moved: no GC share, no latency.
        let idle = line(&b, &b, 1.0, "12:00:01");
        assert!(
            idle.contains(" - ") && idle.trim_end().ends_with('-'),
            "{idle}"
        );
    }
}
