//! The stats document: one JSON object, written at VM death and on SIGQUIT (DataDumpRequest).
//! Its types are in `doc` (shared with the `memliner` command); this module fills them in.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::gc_activity::{GcActivity, PauseKind};
use crate::model::{FaultKind, ThreadClass};
use crate::pager::{Pager, Role};

// The document itself is a contract the command reads: defined in the contracts crate.
pub use memliner_contracts::stats as doc;
pub mod metrics;

use doc::*;

/// Stop-the-world pause times from JVMTI GarbageCollectionStart/Finish.
#[derive(Debug, Default)]
pub struct GcTimes {
    pauses: AtomicU64,
    /// Pauses by `PauseKind`: incremental, full, remark and cleanup.
    by_kind: [AtomicU64; 3],
    total_ns: AtomicU64,
    max_ns: AtomicU64,
    started: Mutex<Option<Instant>>,
}

impl GcTimes {
    pub fn pause_started(&self) {
        *self.started.lock().unwrap() = Some(Instant::now());
    }

    pub fn pause_finished(&self, kind: PauseKind) {
        if let Some(t) = self.started.lock().unwrap().take() {
            self.by_kind[kind as usize].fetch_add(1, Ordering::Relaxed);
            let ns = t.elapsed().as_nanos() as u64;
            self.pauses.fetch_add(1, Ordering::Relaxed);
            self.total_ns.fetch_add(ns, Ordering::Relaxed);
            self.max_ns.fetch_max(ns, Ordering::Relaxed);
        }
    }

    fn doc(&self, prefetch: Option<&crate::prefetch::PrefetchCounters>) -> GcDoc {
        let read = |f: fn(&crate::prefetch::PrefetchCounters) -> &AtomicU64| {
            prefetch.map_or(0, |c| ld(f(c)))
        };
        GcDoc {
            pause_read_pages: read(|c| &c.pause_reads.fetched) + read(|c| &c.scan_ahead.fetched),
            pause_read_dropped: read(|c| &c.pause_reads.dropped) + read(|c| &c.scan_ahead.dropped),
            scan_ahead_pages: read(|c| &c.scan_ahead.fetched),
            scan_ahead_dropped: read(|c| &c.scan_ahead.dropped),
            card_read_pages: read(|c| &c.card_reads.fetched),
            card_read_dropped: read(|c| &c.card_reads.dropped),
            refine_read_pages: read(|c| &c.refine_reads.fetched),
            refine_read_dropped: read(|c| &c.refine_reads.dropped),
            pauses: self.pauses.load(Ordering::Relaxed),
            pause_total_ms: self.total_ns.load(Ordering::Relaxed) as f64 / 1e6,
            pause_max_ms: self.max_ns.load(Ordering::Relaxed) as f64 / 1e6,
            incremental_pauses: ld(&self.by_kind[PauseKind::Incremental as usize]),
            full_pauses: ld(&self.by_kind[PauseKind::Full as usize]),
            remark_cleanup_pauses: ld(&self.by_kind[PauseKind::RemarkCleanup as usize]),
        }
    }
}

/// What the heap looked like when paging started.
#[derive(Clone, Debug)]
pub struct HeapInfo {
    pub base: usize,
    pub bytes: usize,
    pub collector: String,
    pub discovery: crate::model::Discovery,
    pub spans: usize,
    /// Why dead space is not dropped after collections (`None`: it is).
    pub dead_why_not: Option<String>,
    /// G1's young generation as the agent left it (`young=`).
    pub young: Option<memliner_contracts::stats::YoungDoc>,
}

fn percentiles(h: &hdrhistogram::Histogram<u64>) -> Percentiles {
    if h.is_empty() {
        return Percentiles::default();
    }
    Percentiles {
        count: h.len(),
        p50_us: Some(h.value_at_quantile(0.5) as f64 / 1e3),
        p99_us: Some(h.value_at_quantile(0.99) as f64 / 1e3),
        max_us: Some(h.max() as f64 / 1e3),
    }
}

fn gc_faults_doc(p: &Pager) -> GcFaultsDoc {
    GcActivity::ALL
        .iter()
        .zip(p.gc_faults())
        .map(|(&a, c)| {
            let doc = ActivityDoc {
                remote: c.remote,
                wait_ms: c.wait_ns as f64 / 1e6,
            };
            (a, doc)
        })
        .collect()
}

fn ld(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// Everything the agent knows, as one document.
pub fn document(
    options: &crate::options::Options,
    heap: Option<&HeapInfo>,
    pager: Option<&Pager>,
    gc: &GcTimes,
    wall: std::time::Duration,
) -> StatsDoc {
    // Read before the fault counters, which it is a part of (counted after them): read in
    // this order, it never exceeds them while the JVM still faults.
    let while_marking = pager.map_or(0, |p| ld(&p.counters().gc_concurrent_remote_while_marking));
    let gc_faults = pager.map(gc_faults_doc).unwrap_or_default();
    let faults = faults_doc(pager);
    StatsDoc {
        version: VERSION,
        policy: options.policy,
        wall_ms: wall.as_secs_f64() * 1e3,
        heap: heap.map(|h| HeapDoc {
            base: format!("{:#x}", h.base),
            bytes: h.bytes as u64,
            collector: h.collector.clone(),
            discovery: h.discovery,
            spans: h.spans as u64,
            young: h.young,
        }),
        pager: pager.map(|p| {
            pager_doc(
                p,
                faults.remote,
                heap.and_then(|h| h.dead_why_not.as_deref()),
            )
        }),
        prefetch: pager.and_then(prefetch_doc),
        faults,
        gc: gc.doc(pager.and_then(|p| p.prefetch_counters())),
        gc_faults,
        gc_hooks: crate::hooks::doc(
            pager.and_then(|p| p.prefetch_counters()).map(|c| &c.hints),
            while_marking,
        ),
        jdk: crate::hooks::jdk(),
        process: process_memory(),
    }
}

fn faults_doc(pager: Option<&Pager>) -> FaultsDoc {
    let mut by_class = ByClass::<ClassFaults>::default();
    let mut totals = ClassFaults::default();
    let (mut gc_remote, mut gc_total) = (0, 0);
    if let Some(p) = pager {
        for &class in ThreadClass::ALL {
            let n = |k: FaultKind| ld(&p.counters().faults[class as usize][k as usize]);
            let c = ClassFaults {
                zero: n(FaultKind::Zero),
                remote: n(FaultKind::Remote),
                write: n(FaultKind::Write),
                stale: n(FaultKind::Stale),
                prefetch_hit: n(FaultKind::Hit),
                reactivate: n(FaultKind::Reactivate),
                total: FaultKind::ALL
                    .iter()
                    .filter(|&&k| k != FaultKind::Stale)
                    .map(|&k| n(k))
                    .sum(),
            };
            totals.zero += c.zero;
            totals.remote += c.remote;
            totals.write += c.write;
            totals.stale += c.stale;
            totals.prefetch_hit += c.prefetch_hit;
            totals.reactivate += c.reactivate;
            totals.total += c.total;
            if class.is_gc() {
                gc_remote += c.remote;
                gc_total += c.total;
            }
            *by_class.get_mut(class) = c;
        }
    }
    let share = |num: u64, den: u64| (den > 0).then(|| num as f64 / den as f64);
    FaultsDoc {
        gc_share_of_remote: share(gc_remote, totals.remote),
        gc_share_of_all: share(gc_total, totals.total),
        by_class,
        total: totals.total,
        zero: totals.zero,
        remote: totals.remote,
        write: totals.write,
        stale: totals.stale,
        prefetch_hit: totals.prefetch_hit,
        reactivate: totals.reactivate,
    }
}

fn dead_doc(p: &Pager, why_not: Option<&str>) -> DeadDoc {
    use crate::gc_layout::Reason;
    let c = p.counters();
    let reason = |r: Reason| DeadReasonDoc {
        pages: ld(&c.dead_pages[r as usize]),
        remote: ld(&c.dead_remote[r as usize]),
        mapped: ld(&c.dead_mapped[r as usize]),
        left_mapped: ld(&c.dead_left_mapped[r as usize]),
        protected: ld(&c.dead_protected[r as usize]),
    };
    DeadDoc {
        on: why_not.is_none(),
        why_not: why_not.map(str::to_string),
        collections: ld(&c.dead_collections),
        pause_ms: ld(&c.dead_ns) as f64 / 1e6,
        free_region: reason(Reason::FreeRegion),
        above_top: reason(Reason::AboveTop),
    }
}

fn pager_doc(p: &Pager, remote_faults: u64, dead_why_not: Option<&str>) -> PagerDoc {
    let c = p.counters();
    let l = p.latencies();
    PagerDoc {
        budget_pages: p.budget_pages() as u64,
        resident_pages: p.resident_pages() as u64,
        peak_resident_pages: p.peak_resident_pages() as u64,
        resident_pages_mincore: p.mincore_resident_pages() as u64,
        heap_pages: p.npages() as u64,
        store: p.store_description(),
        replication: p.replication(),
        integrity: p.integrity(),
        delivery: p.delivery(),
        signal_faults: ld(&c.signal_faults),
        discard: if p.uses_process_madvise() {
            "process_madvise"
        } else {
            "madvise"
        }
        .into(),
        remote: RemoteDoc {
            pages_read: ld(&c.pages_read),
            pages_prefetched: ld(&c.pages_prefetched),
            pages_written: ld(&c.pages_written),
            pages_freed: ld(&c.pages_freed_remote),
        },
        evictions: EvictionsDoc {
            clean: ld(&c.evicted_clean),
            dirty: ld(&c.evicted_dirty),
            zero: ld(&c.evicted_zero),
        },
        zero_filled_ahead: ld(&c.zero_filled_ahead),
        unprotected_ahead: ld(&c.unprotected_ahead),
        released: ReleasedDoc {
            pages: ld(&c.pages_released),
            remote: ld(&c.released_remote),
            left_mapped: ld(&c.released_left_mapped),
            protected: ld(&c.released_protected),
        },
        dead: dead_doc(p, dead_why_not),
        unmap_events: ld(&c.unmap_events),
        reclaim_found_all_in_flight: ld(&c.reclaim_found_all_in_flight),
        cold: ColdDoc {
            evicted: ld(&c.evicted_cold),
            promoted: ld(&c.promoted),
            demoted_after_pause: ld(&c.demoted_after_pause),
        },
        concurrent_cycles: ld(&c.concurrent_cycles),
        app_faults_in_concurrent_cycle: ld(&c.app_faults_in_concurrent_cycle),
        latency: LatencyDoc {
            all: percentiles(&l.all),
            remote: percentiles(&l.remote),
            thread_remote: percentiles(&l.thread_remote),
            thread_local: percentiles(&l.thread_local),
        },
        reclaim: reclaim_doc(p),
        agent_cpu: cpu_doc(p, remote_faults),
        start_ms: p.start_time().as_secs_f64() * 1e3,
    }
}

/// The reclaimer and the reference sampler: what sampling cost (local reactivation faults)
/// and what it found, where refaults came from, and the lists over the run.
fn reclaim_doc(p: &Pager) -> ReclaimDoc {
    let r = p.reclaim_counters();
    let d = p.decisions();
    let (inactive, target) = p.inactive_pages();
    let (low, high) = p.watermarks();
    let (grown, shrunk, (c_local, c_remote)) = p.inactive_sizing();
    let buckets = d.distance_histogram.len();
    ReclaimDoc {
        mode: p.replacement(),
        watermarks_pages: Watermarks {
            low: low as u64,
            high: high as u64,
        },
        inactive_pages: inactive as u64,
        inactive_target_pages: target as u64,
        target_grown: grown,
        target_shrunk: shrunk,
        cost_local_fault_us: c_local as f64 / 1e3,
        cost_remote_fault_us: c_remote as f64 / 1e3,
        refaults_per_eviction: p.refaults_per_eviction(),
        deactivated: ld(&r.deactivated),
        reactivated: ld(&r.reactivated),
        reactivated_in_writeback: ld(&r.reactivated_in_writeback),
        workingset_activations: d.workingset_activations,
        distant_refaults: d.distant_refaults,
        referenced_activations: d.referenced_activations,
        aged: d.aged,
        heat_rotations: d.heat_rotations,
        // Bucket i holds distances below budget * 2^(i - 4) (the last: the rest).
        refault_distance: d
            .distance_histogram
            .iter()
            .enumerate()
            .map(|(i, &n)| DistanceBucketDoc {
                below_budgets: (i + 1 < buckets).then(|| 2f64.powi(i as i32 - 4)),
                refaults: n,
            })
            .collect(),
        prefetched_evicted_unused: ld(&r.prefetched_evicted_unused),
        card_holds: d.holds,
        cold_rereads_kept: d.cold_rereads_kept,
        evicted_pending_card: ld(&r.evicted_pending_card),
        deactivated_in_pipe: ld(&r.deactivated_in_pipe),
        dropped_unsampled: ld(&r.dropped_unsampled),
        deactivation_write_protects: ld(&r.deactivation_write_protects),
        direct_reclaims: ld(&r.direct_reclaims),
        direct_dropped: ld(&r.direct_dropped),
        deferred_list_changes: ld(&r.deferred_list_changes),
        background_passes: ld(&r.background_passes),
        background_evicted: ld(&r.background_evicted),
        timeline: p
            .timeline()
            .into_iter()
            .map(|s| ListSampleDoc {
                ms: s.ms,
                cold: s.cold as u64,
                probation: s.probation as u64,
                active: s.active as u64,
                inactive: s.inactive as u64,
                writeback: s.writeback as u64,
                other: s.other as u64,
            })
            .collect(),
    }
}

/// CPU time of the agent's own threads (the TCP client runs on them), in all and per remote
/// fault.
fn cpu_doc(p: &Pager, remote_faults: u64) -> AgentCpuDoc {
    let times = p.cpu_times();
    let of = |role: Role| {
        times
            .iter()
            .filter(|(r, _)| *r == role)
            .map(|(_, t)| t.as_secs_f64())
            .sum::<f64>()
    };
    // Faults served by their own threads (faults=signal) run on the JVM's threads: their
    // service time (wall, an upper bound of its CPU) is the agent's too.
    let signal = ld(&p.counters().signal_service_ns) as f64 / 1e9;
    let total = times.iter().map(|(_, t)| t.as_secs_f64()).sum::<f64>() + signal;
    AgentCpuDoc {
        fault_handlers_s: of(Role::FaultHandler),
        reclaimer_s: of(Role::Reclaimer),
        prefetch_s: of(Role::Prefetcher),
        probe_s: of(Role::Probe),
        signal_service_s: signal,
        total_s: total,
        per_remote_fault_us: (remote_faults > 0).then(|| total * 1e6 / remote_faults as f64),
    }
}

/// Prefetch counters by stream class, with accuracy and coverage; also for all classes.
fn prefetch_doc(p: &Pager) -> Option<PrefetchDoc> {
    let pc = p.prefetch_counters()?;
    let mut by_class = ByClass::<PrefetchClassDoc>::default();
    let sum = crate::prefetch::ClassCounters::default();
    let mut demand_all = 0;
    for &class in ThreadClass::ALL {
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
            (&sum.gated, &c.gated),
            (&sum.reclaimed_for, &c.reclaimed_for),
            (&sum.sync_windows, &c.sync_windows),
        ] {
            to.fetch_add(ld(from), Ordering::Relaxed);
        }
        *by_class.get_mut(class) = class_doc(c, demand);
    }
    Some(PrefetchDoc {
        policy: p.policy_name().into(),
        all: class_doc(&sum, demand_all),
        by_class,
    })
}

fn class_doc(c: &crate::prefetch::ClassCounters, demand: u64) -> PrefetchClassDoc {
    let e = c.effect(demand);
    PrefetchClassDoc {
        windows: ld(&c.windows),
        pages: e.prefetched,
        marker_hits: ld(&c.marker_hits),
        marker_misses: ld(&c.marker_misses),
        hit_pages: e.hits,
        dropped_windows: ld(&c.dropped),
        dropped_low_reserve: ld(&c.dropped_low_reserve),
        gated_windows: ld(&c.gated),
        reclaimed_windows: ld(&c.reclaimed_for),
        sync_windows: ld(&c.sync_windows),
        demand_faults: demand,
        accuracy: e.accuracy,
        coverage: e.coverage,
    }
}

/// The JVM process's resident memory from /proc/self/status (bytes): what a cgroup limit
/// giving the kernel the same memory would be set from.
fn process_memory() -> ProcessDoc {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|k| k * 1024)
    };
    ProcessDoc {
        peak_rss_bytes: kb("VmHWM:"),
        rss_bytes: kb("VmRSS:"),
        agent_bytes: crate::memory::live_bytes(),
        agent_peak_bytes: crate::memory::peak_bytes(),
    }
}
