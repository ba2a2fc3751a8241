//! The stats document: one JSON object, written at VM death and on SIGQUIT (DataDumpRequest).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{json, Value};

use crate::model::{FaultKind, ThreadClass};
use crate::pager::Pager;

/// Stop-the-world pause times from JVMTI GarbageCollectionStart/Finish.
#[derive(Debug, Default)]
pub struct GcTimes {
    pauses: AtomicU64,
    total_ns: AtomicU64,
    max_ns: AtomicU64,
    started: Mutex<Option<Instant>>,
}

impl GcTimes {
    pub fn pause_started(&self) {
        *self.started.lock().unwrap() = Some(Instant::now());
    }

    pub fn pause_finished(&self) {
        if let Some(t) = self.started.lock().unwrap().take() {
            let ns = t.elapsed().as_nanos() as u64;
            self.pauses.fetch_add(1, Ordering::Relaxed);
            self.total_ns.fetch_add(ns, Ordering::Relaxed);
            self.max_ns.fetch_max(ns, Ordering::Relaxed);
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "pauses": self.pauses.load(Ordering::Relaxed),
            "pause_total_ms": self.total_ns.load(Ordering::Relaxed) as f64 / 1e6,
            "pause_max_ms": self.max_ns.load(Ordering::Relaxed) as f64 / 1e6,
        })
    }
}

/// What the heap looked like when paging started.
#[derive(Clone, Debug)]
pub struct HeapInfo {
    pub base: usize,
    pub bytes: usize,
    pub collector: String,
    pub discovery: &'static str,
    pub spans: usize,
}

fn percentiles(h: &hdrhistogram::Histogram<u64>) -> Value {
    if h.is_empty() {
        return json!({"count": 0});
    }
    json!({
        "count": h.len(),
        "p50_us": h.value_at_quantile(0.5) as f64 / 1e3,
        "p99_us": h.value_at_quantile(0.99) as f64 / 1e3,
        "max_us": h.max() as f64 / 1e3,
    })
}

/// Everything the agent knows, as one document.
pub fn document(
    options: &crate::options::Options,
    heap: Option<&HeapInfo>,
    pager: Option<&Pager>,
    gc: &GcTimes,
    wall: std::time::Duration,
) -> Value {
    let mut faults = serde_json::Map::new();
    let mut totals = [0u64; FaultKind::COUNT];
    let mut gc_remote = 0u64;
    let mut gc_total = 0u64;
    if let Some(p) = pager {
        for class in ThreadClass::ALL {
            let mut m = serde_json::Map::new();
            let mut sum = 0;
            for kind in FaultKind::ALL {
                let v = p.counters().faults[class as usize][kind as usize].load(Ordering::Relaxed);
                m.insert(kind.name().into(), v.into());
                totals[kind as usize] += v;
                if kind != FaultKind::Stale {
                    sum += v;
                }
                if class.is_gc() && kind == FaultKind::Remote {
                    gc_remote += v;
                }
                if class.is_gc() && kind != FaultKind::Stale {
                    gc_total += v;
                }
            }
            m.insert("total".into(), sum.into());
            faults.insert(class.name().into(), Value::Object(m));
        }
    }
    let remote = totals[FaultKind::Remote as usize];
    let all = totals[FaultKind::Zero as usize]
        + remote
        + totals[FaultKind::Write as usize]
        + totals[FaultKind::Hit as usize]
        + totals[FaultKind::Reactivate as usize];
    let share = |num: u64, den: u64| {
        if den == 0 {
            Value::Null
        } else {
            json!(num as f64 / den as f64)
        }
    };
    let pager_json = pager.map(|p| {
        let c = p.counters();
        let l = p.latencies();
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        json!({
            "budget_pages": p.budget_pages(),
            "resident_pages": p.resident_pages(),
            "peak_resident_pages": p.peak_resident_pages(),
            "resident_pages_mincore": p.mincore_resident_pages(),
            "heap_pages": p.npages(),
            "store": p.store_description(),
            "delivery": p.delivery().name(),
            "signal_faults": ld(&c.signal_faults),
            "discard": if p.uses_process_madvise() { "process_madvise" } else { "madvise" },
            "remote": {
                "pages_read": ld(&c.pages_read),
                "pages_prefetched": ld(&c.pages_prefetched),
                "pages_written": ld(&c.pages_written),
                "pages_freed": ld(&c.pages_freed_remote),
            },
            "evictions": {
                "clean": ld(&c.evicted_clean),
                "dirty": ld(&c.evicted_dirty),
                "zero": ld(&c.evicted_zero),
            },
            "zero_filled_ahead": ld(&c.zero_filled_ahead),
            "unmap_events": ld(&c.unmap_events),
            "reclaim_found_all_in_flight": ld(&c.reclaim_found_all_in_flight),
            "cold": {
                "evicted": ld(&c.evicted_cold),
                "promoted": ld(&c.promoted),
                "demoted_after_pause": ld(&c.demoted_after_pause),
            },
            "concurrent_cycles": ld(&c.concurrent_cycles),
            "app_faults_in_concurrent_cycle": ld(&c.app_faults_in_concurrent_cycle),
            "latency": {
                "all": percentiles(&l.all),
                "remote": percentiles(&l.remote),
                "thread_remote": percentiles(&l.thread_remote),
            },
            "reclaim": reclaim_json(p),
            "agent_cpu": cpu_json(p, remote),
        })
    });
    json!({
        "version": 1,
        "policy": options.policy.name(),
        "wall_ms": wall.as_secs_f64() * 1e3,
        "heap": heap.map(|h| json!({
            "base": format!("{:#x}", h.base),
            "bytes": h.bytes,
            "collector": h.collector,
            "discovery": h.discovery,
            "spans": h.spans,
        })),
        "pager": pager_json,
        "faults": {
            "by_class": Value::Object(faults),
            "total": all,
            "zero": totals[FaultKind::Zero as usize],
            "remote": remote,
            "write": totals[FaultKind::Write as usize],
            "stale": totals[FaultKind::Stale as usize],
            "prefetch_hit": totals[FaultKind::Hit as usize],
            "reactivate": totals[FaultKind::Reactivate as usize],
            "gc_share_of_remote": share(gc_remote, remote),
            "gc_share_of_all": share(gc_total, all),
        },
        "prefetch": pager.and_then(prefetch_json),
        "gc": gc.to_json(),
        "process": process_memory(),
    })
}

/// The reclaimer and the reference sampler: what sampling cost (local reactivation faults)
/// and what it found (pages kept, refaults a longer list would have saved).
fn reclaim_json(p: &Pager) -> Value {
    let r = p.reclaim_counters();
    let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let (inactive, target) = p.inactive_pages();
    let (low, high) = p.watermarks();
    let (grown, shrunk, (c_local, c_remote)) = p.inactive_sizing();
    json!({
        "mode": if p.sampling() { "clock" } else { "fifo" },
        "watermarks_pages": { "low": low, "high": high },
        "inactive_pages": inactive,
        "inactive_target_pages": target,
        "target_grown": grown,
        "target_shrunk": shrunk,
        "cost_local_fault_us": c_local as f64 / 1e3,
        "cost_remote_fault_us": c_remote as f64 / 1e3,
        "deactivated": ld(&r.deactivated),
        "reactivated": ld(&r.reactivated),
        "workingset_refaults": ld(&r.workingset_refaults),
        "direct_reclaims": ld(&r.direct_reclaims),
        "background_passes": ld(&r.background_passes),
        "background_evicted": ld(&r.background_evicted),
    })
}

/// CPU time of the agent's own threads (the TCP client runs on them), in all and per remote
/// fault.
fn cpu_json(p: &Pager, remote_faults: u64) -> Value {
    let mut m = serde_json::Map::new();
    let mut total = 0.0;
    for (role, t) in p.cpu_times() {
        total += t.as_secs_f64();
        m.insert(format!("{}_s", role.name()), json!(t.as_secs_f64()));
    }
    // Faults served by their own threads (faults=signal) run on the JVM's threads: their
    // service time (wall, an upper bound of its CPU) is the agent's too.
    let signal = p.counters().signal_service_ns.load(Ordering::Relaxed) as f64 / 1e9;
    m.insert("signal_service_s".into(), json!(signal));
    total += signal;
    m.insert("total_s".into(), json!(total));
    m.insert(
        "per_remote_fault_us".into(),
        if remote_faults == 0 {
            Value::Null
        } else {
            json!(total * 1e6 / remote_faults as f64)
        },
    );
    Value::Object(m)
}

/// Prefetch counters by stream class, with accuracy and coverage; also for all classes.
fn prefetch_json(p: &Pager) -> Option<Value> {
    let pc = p.prefetch_counters()?;
    let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mut by_class = serde_json::Map::new();
    let sum = crate::prefetch::ClassCounters::default();
    let mut demand_all = 0;
    for class in ThreadClass::ALL {
        let c = &pc.by_class[class as usize];
        let demand = ld(&p.counters().faults[class as usize][FaultKind::Remote as usize]);
        demand_all += demand;
        for (to, from) in [
            (&sum.windows, &c.windows),
            (&sum.pages, &c.pages),
            (&sum.marker_hits, &c.marker_hits),
            (&sum.marker_misses, &c.marker_misses),
            (&sum.hit_pages, &c.hit_pages),
            (&sum.dropped, &c.dropped),
            (&sum.dropped_low_reserve, &c.dropped_low_reserve),
        ] {
            to.fetch_add(ld(from), Ordering::Relaxed);
        }
        by_class.insert(class.name().into(), class_json(c, demand));
    }
    Some(json!({
        "policy": p.policy_name(),
        "all": class_json(&sum, demand_all),
        "by_class": Value::Object(by_class),
    }))
}

fn class_json(c: &crate::prefetch::ClassCounters, demand: u64) -> Value {
    let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let e = c.effect(demand);
    json!({
        "windows": ld(&c.windows),
        "pages": e.prefetched,
        "marker_hits": ld(&c.marker_hits),
        "marker_misses": ld(&c.marker_misses),
        "hit_pages": e.hits,
        "dropped_windows": ld(&c.dropped),
        "dropped_low_reserve": ld(&c.dropped_low_reserve),
        "demand_faults": demand,
        "accuracy": e.accuracy,
        "coverage": e.coverage,
    })
}

/// The JVM process's resident memory from /proc/self/status (bytes): what a cgroup limit
/// giving the kernel the same memory would be set from.
fn process_memory() -> Value {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|k| k * 1024)
    };
    json!({ "peak_rss_bytes": kb("VmHWM:"), "rss_bytes": kb("VmRSS:") })
}
