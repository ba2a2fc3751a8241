//! The pager's counters and latency histograms, read at any time for stats, and the roles of
//! its threads (for their CPU time).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::gc_layout::Reason;
use crate::model::{FaultKind, ThreadClass};

/// Counters kept by the pager; read at any time for stats.
#[derive(Debug, Default)]
pub struct PagerCounters {
    /// faults[class][kind]
    pub faults: [[AtomicU64; FaultKind::COUNT]; ThreadClass::COUNT],
    pub pages_read: AtomicU64,
    /// Of `pages_read`, pages read by prefetch workers.
    pub pages_prefetched: AtomicU64,
    pub pages_written: AtomicU64,
    /// Faults served by the faulting thread itself (`faults=signal`), and the time it spent
    /// in them (the agent's CPU on application threads).
    pub signal_faults: AtomicU64,
    pub signal_service_ns: AtomicU64,
    pub pages_freed_remote: AtomicU64,
    pub evicted_clean: AtomicU64,
    pub evicted_dirty: AtomicU64,
    pub evicted_zero: AtomicU64,
    pub zero_filled_ahead: AtomicU64,
    /// Pages of zeros or dead bytes unprotected with a write fault before them.
    pub unprotected_ahead: AtomicU64,
    pub unmap_events: AtomicU64,
    /// Reclaim passes that found every charged page in flight (nothing to evict yet).
    pub reclaim_found_all_in_flight: AtomicU64,
    /// Cold pages made hot by an application touch.
    pub promoted: AtomicU64,
    /// Cold pages evicted (GC-read pages, and a finished pause's).
    pub evicted_cold: AtomicU64,
    /// Pages a stop-the-world pause brought in, made cold when it ended.
    pub demoted_after_pause: AtomicU64,
    /// Concurrent GC cycles seen in the concurrent GC threads' fault stream (see
    /// `phases`: to the cycle's end where the JVM says it, else to a quiet gap of
    /// [`crate::pager::CYCLE_GAP`]).
    pub concurrent_cycles: AtomicU64,
    /// Faults by application threads while a concurrent cycle was active.
    pub app_faults_in_concurrent_cycle: AtomicU64,
    /// Remote faults of the concurrent GC threads while a patched JVM reported concurrent
    /// marking (its other concurrent work: refinement, remembered-set rebuild, evacuation,
    /// reference updating, is the rest of the class).
    pub gc_concurrent_remote_while_marking: AtomicU64,
    /// Pages a patched collector released (freed regions): dropped, so their reuse
    /// zero-fills locally.
    pub pages_released: AtomicU64,
    /// Of those, pages only the store held: fetches of garbage saved.
    pub released_remote: AtomicU64,
    /// Released pages left mapped, not dropped: the budget had room (see `release`).
    pub released_left_mapped: AtomicU64,
    /// Of those, written pages of freed young regions write-protected (`Mapped::Protect`).
    pub released_protected: AtomicU64,
    /// Pages dropped as dead at the end of a collection (a stock JDK's heap layout), by
    /// `gc_layout::Reason`.
    pub dead_pages: [AtomicU64; Reason::COUNT],
    /// Of those, pages only the store held (fetches of dead bytes saved) ...
    pub dead_remote: [AtomicU64; Reason::COUNT],
    /// ... and pages that were mapped (budget given back at once).
    pub dead_mapped: [AtomicU64; Reason::COUNT],
    /// Dead pages left mapped, not dropped: the budget had room (see `release`).
    pub dead_left_mapped: [AtomicU64; Reason::COUNT],
    /// Of those, written pages of freed young regions write-protected (`Mapped::Protect`).
    pub dead_protected: [AtomicU64; Reason::COUNT],
    /// Service times of faults by where the page came from, `[local, remote]`: what a
    /// scrape of `/metrics` reads without taking the histograms' locks.
    pub fault_latency: [LatencyBuckets; 2],
    /// Collections whose dead space was dropped, and the time it took inside their pauses.
    pub dead_collections: AtomicU64,
    pub dead_ns: AtomicU64,
}

impl PagerCounters {
    /// Pages evicted so far: clean, dirty and all-zero.
    pub fn evicted(&self) -> u64 {
        self.evicted_clean.load(Ordering::Relaxed)
            + self.evicted_dirty.load(Ordering::Relaxed)
            + self.evicted_zero.load(Ordering::Relaxed)
    }
}

/// Upper bounds (ns) of [`LatencyBuckets`]: 1 µs to 50 ms, as Prometheus buckets.
pub const LATENCY_BOUNDS_NS: [u64; 14] = [
    1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000, 2_000_000,
    5_000_000, 10_000_000, 50_000_000,
];

/// A fault-latency histogram of fixed buckets, one atomic add per fault: readable at any time
/// without a lock (the hdr histograms below are finer, and locked).
#[derive(Debug, Default)]
pub struct LatencyBuckets {
    /// Observations per bucket of [`LATENCY_BOUNDS_NS`], not cumulative; the last: above.
    pub counts: [AtomicU64; LATENCY_BOUNDS_NS.len() + 1],
    pub sum_ns: AtomicU64,
}

impl LatencyBuckets {
    pub fn record(&self, ns: u64) {
        let i = LATENCY_BOUNDS_NS.partition_point(|&b| b < ns);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// (upper bound in seconds, observations at or below it), cumulative; and the count.
    pub fn cumulative(&self) -> (Vec<(f64, u64)>, u64) {
        let mut n = 0;
        let buckets = LATENCY_BOUNDS_NS
            .iter()
            .zip(&self.counts)
            .map(|(&b, c)| {
                n += c.load(Ordering::Relaxed);
                (b as f64 / 1e9, n)
            })
            .collect();
        let count = n + self.counts[LATENCY_BOUNDS_NS.len()].load(Ordering::Relaxed);
        (buckets, count)
    }
}

/// Latency histograms (nanoseconds).
#[derive(Debug)]
pub struct Latencies {
    /// Handler-side, every fault: from reading the fault to mapping the page.
    pub all: Histogram<u64>,
    /// Handler-side, remote faults.
    pub remote: Histogram<u64>,
    /// As a faulting thread sees a remote fault (delivery, service and wake): the probe's.
    pub thread_remote: Histogram<u64>,
    /// As a faulting thread sees a local fault (`faults=signal`): the probe's.
    pub thread_local: Histogram<u64>,
}

impl Latencies {
    pub(super) fn new() -> Self {
        let h = || Histogram::new_with_bounds(1, 60_000_000_000, 2).unwrap();
        Latencies {
            all: h(),
            remote: h(),
            thread_remote: h(),
            thread_local: h(),
        }
    }
}

/// The agent's own threads, for their CPU time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::VariantArray, strum::IntoStaticStr)]
pub enum Role {
    #[strum(serialize = "fault_handlers")]
    FaultHandler,
    #[strum(serialize = "reclaimer")]
    Reclaimer,
    #[strum(serialize = "prefetch")]
    Prefetcher,
    #[strum(serialize = "probe")]
    Probe,
}

impl Role {
    pub const ALL: &'static [Role] = <Role as strum::VariantArray>::VARIANTS;
}

/// Quiet time in the concurrent GC threads' faults that ends a concurrent cycle.
pub const CYCLE_GAP: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_buckets_hold_each_fault_at_its_bound_and_sum_up() {
        let b = LatencyBuckets::default();
        for ns in [500, 1_000, 1_001, 60_000, 100_000_000] {
            b.record(ns);
        }
        let (buckets, count) = b.cumulative();
        assert_eq!(count, 5);
        assert_eq!(buckets[0], (1e-6, 2), "500 ns and 1 µs");
        assert_eq!(buckets[1], (2e-6, 3));
        assert_eq!(buckets[6].1, 4, "60 µs at or below 100 µs");
        assert_eq!(buckets.last().unwrap().1, 4, "100 ms is above every bound");
        assert_eq!(b.sum_ns.load(Ordering::Relaxed), 100_062_501);
    }
}
