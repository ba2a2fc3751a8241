//! How long the sampling window (the inactive list of unmapped pages) is: balanced, epoch by
//! epoch, between what sampling costs and what it saves, in measured costs.
//!
//! Sampling a page that turns out to be in use costs `c_sample`: its deactivation (write-
//! protect, copy, discard, TLB shootdown; measured per page by the reclaimer) and the local
//! fault that maps it back (as the faulting thread sees it: measured by the probe on its own
//! page, else estimated from the handlers' service times). A remote fault costs `c_remote`
//! (the probe's). With `S` the step (a quarter of the target, at least a batch and 1/128 of the
//! budget), over an epoch
//! of evictions the sizer counts:
//! - *near refaults*: remote faults on pages evicted at most `S` clock ticks ago (see
//!   `lists`). A window `S` longer would have kept them: each a reactivation instead.
//! - *young reactivations*: pages touched within the newest `S` of the window. With a window
//!   `S` shorter they would not have been unmapped yet: their touch would have been free.
//! - *old reactivations*: pages touched in the oldest `S`. A window `S` shorter would have
//!   evicted them: each would have been a remote fault.
//!
//! Growing by `S` gains `near * (c_remote - c_sample)` and pays about `young * c_sample`;
//! shrinking gains `young * c_sample` and pays `old * (c_remote - c_sample)`. The target moves
//! a step toward the cheaper side, or stays. It starts at its minimum (often no window at all:
//! working-set detection alone), so sampling is paid for only once it has been seen to pay.
//! Measured here (1 GiB heaps): with the in-process store a sampled page that comes back costs
//! about what the remote fault it saves does, and the window stays closed; over TCP loopback
//! (a remote fault ~150 us as its thread sees it, a sample ~20 us) it opens to 1-4% of the
//! budget: the index workload at 31% local read 12% fewer pages, kv at 25% 7% fewer. Windows
//! of 10-20% of the budget saved no more and paid 4-5 reactivations per eviction.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Moving averages (ns) of the costs.
#[derive(Debug, Default)]
pub struct Costs {
    remote_service: AtomicU64,
    local_service: AtomicU64,
    thread_remote: AtomicU64,
    thread_local: AtomicU64,
    deactivate: AtomicU64,
}

fn ewma(a: &AtomicU64, v: u64) {
    // Racy read-modify-write: a lost update only delays the average by one sample.
    let old = a.load(Ordering::Relaxed);
    let new = if old == 0 { v } else { old - old / 16 + v / 16 };
    a.store(new.max(1), Ordering::Relaxed);
}

impl Costs {
    pub fn remote_service(&self, ns: u64) {
        ewma(&self.remote_service, ns)
    }

    pub fn local_service(&self, ns: u64) {
        ewma(&self.local_service, ns)
    }

    /// The probe's remote fault, as the faulting thread sees it.
    pub fn thread_remote(&self, ns: u64) {
        ewma(&self.thread_remote, ns)
    }

    /// The probe's local fault, as the faulting thread sees it.
    pub fn thread_local(&self, ns: u64) {
        ewma(&self.thread_local, ns)
    }

    /// Deactivating one page (the reclaimer's time for a batch, per page).
    pub fn deactivate(&self, ns: u64) {
        ewma(&self.deactivate, ns)
    }

    /// (sample, remote) costs in ns: what a sampled page that comes back costs, and a remote
    /// fault. Before the probe has samples, a remote fault is taken to cost twice a sample.
    pub fn estimate(&self) -> (u64, u64) {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (sr, sl, tr, tl, d) = (
            ld(&self.remote_service),
            ld(&self.local_service),
            ld(&self.thread_remote),
            ld(&self.thread_local),
            ld(&self.deactivate),
        );
        if tr == 0 {
            return (1, 2);
        }
        // Delivery and wake as the thread sees them, if the probe could not time a local
        // fault itself (handler threads).
        let local = if tl > 0 {
            tl
        } else {
            tr.saturating_sub(sr) + sl.max(1)
        };
        let sample = local + d;
        (sample.max(1), tr.max(1))
    }
}

/// One epoch's observations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Epoch {
    pub near_refaults: u64,
    pub young_reactivations: u64,
    pub old_reactivations: u64,
    /// All refaults and evictions of the epoch.
    pub refaults: u64,
    pub evictions: u64,
}

/// The next target: a `step` toward the cheaper side, within `[min, max]`.
pub fn rebalanced(
    target: usize,
    step: usize,
    (min, max): (usize, usize),
    e: Epoch,
    (c_sample, c_remote): (u64, u64),
) -> usize {
    // A page kept by sampling sends another page out instead, which comes back as often as
    // evicted pages do (`refaults / evictions`): only the rest of a remote fault is saved.
    // When nearly every eviction comes back (thrashing), keeping one page only trades it for
    // another.
    let kept = (e.evictions.saturating_sub(e.refaults)) as u128;
    let evictions = e.evictions.max(1) as u128;
    let saved = c_remote as u128 * kept / evictions;
    let gain = saved.saturating_sub(c_sample as u128);
    let local = c_sample as u128;
    let young = e.young_reactivations as u128 * local;
    if e.near_refaults as u128 * gain > young {
        (target + step).min(max)
    } else if (e.old_reactivations as u128 * gain) < young {
        target.saturating_sub(step).max(min)
    } else {
        target
    }
    .clamp(min, max)
}

/// The target and the counters of the epoch under way.
#[derive(Debug)]
pub struct Sizer {
    target: AtomicUsize,
    min: usize,
    max: usize,
    step_floor: usize,
    epoch_len: u64,
    evictions: AtomicU64,
    near: AtomicU64,
    young: AtomicU64,
    old: AtomicU64,
    refaults: AtomicU64,
    pub costs: Costs,
    rebalancing: Mutex<()>,
    pub grown: AtomicU64,
    pub shrunk: AtomicU64,
}

impl Sizer {
    /// `budget` pages, batches of `batch`, the target within `[min, max]`; `max == 0` turns
    /// the inactive list off.
    pub fn new(budget: usize, batch: usize, min: usize, max: usize) -> Sizer {
        let min = min.min(max);
        Sizer {
            target: AtomicUsize::new(min),
            min,
            max,
            // Steps of a batch were too small to see near refaults above the noise of the
            // reactivations a reclaim batch causes anyway: 1/128 of the budget.
            step_floor: batch.max(budget / 128).max(1),
            epoch_len: (budget / 32).max(4 * batch).max(1) as u64,
            evictions: AtomicU64::new(0),
            near: AtomicU64::new(0),
            young: AtomicU64::new(0),
            old: AtomicU64::new(0),
            refaults: AtomicU64::new(0),
            costs: Costs::default(),
            rebalancing: Mutex::new(()),
            grown: AtomicU64::new(0),
            shrunk: AtomicU64::new(0),
        }
    }

    /// The largest target (0: no sampling at all).
    pub fn max(&self) -> usize {
        self.max
    }

    pub fn target(&self) -> usize {
        self.target.load(Ordering::Relaxed)
    }

    /// How far the target moves at once: a quarter of it, at least the floor.
    fn step(&self) -> u64 {
        (self.target() as u64 / 4).max(self.step_floor as u64)
    }

    /// A remote fault on a page evicted `distance` clock ticks ago.
    pub fn refault(&self, distance: u64) {
        self.refaults.fetch_add(1, Ordering::Relaxed);
        if distance <= self.step() {
            self.near.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A reactivation of a page deactivated `age` deactivations ago.
    pub fn reactivation(&self, age: u64) {
        let (t, step) = (self.target() as u64, self.step());
        if age < step {
            self.young.fetch_add(1, Ordering::Relaxed);
        } else if age >= t.saturating_sub(step) {
            self.old.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `n` pages were evicted; ends the epoch when it is long enough.
    pub fn evicted(&self, n: usize) {
        if self.max == 0 {
            return;
        }
        let done = self.evictions.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        if done < self.epoch_len.max(self.target() as u64) {
            return;
        }
        let Ok(_one) = self.rebalancing.try_lock() else {
            return;
        };
        let e = Epoch {
            near_refaults: self.near.swap(0, Ordering::Relaxed),
            young_reactivations: self.young.swap(0, Ordering::Relaxed),
            old_reactivations: self.old.swap(0, Ordering::Relaxed),
            refaults: self.refaults.swap(0, Ordering::Relaxed),
            evictions: self.evictions.swap(0, Ordering::Relaxed),
        };
        let t = self.target();
        let next = rebalanced(
            t,
            self.step() as usize,
            (self.min, self.max),
            e,
            self.costs.estimate(),
        );
        if next > t {
            self.grown.fetch_add(1, Ordering::Relaxed);
        } else if next < t {
            self.shrunk.fetch_add(1, Ordering::Relaxed);
        }
        self.target.store(next, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: (usize, usize) = (16, 512);

    /// An epoch of 1000 evictions of which 100 came back.
    fn epoch(near: u64, young: u64, old: u64) -> Epoch {
        Epoch {
            near_refaults: near,
            young_reactivations: young,
            old_reactivations: old,
            refaults: 100,
            evictions: 1000,
        }
    }

    #[test]
    fn the_list_grows_when_pages_come_back_soon_after_eviction() {
        // 50 near refaults at a gain of 63 - 30 us beat 20 young reactivations at 30 us.
        assert_eq!(
            rebalanced(128, 16, BOUNDS, epoch(50, 20, 0), (30_000, 70_000)),
            144
        );
        assert_eq!(
            rebalanced(510, 16, BOUNDS, epoch(50, 20, 0), (30_000, 70_000)),
            512
        );
    }

    #[test]
    fn thrashing_opens_no_window() {
        // Nearly every eviction comes back: a page kept sends out another that will.
        let thrash = Epoch {
            refaults: 950,
            ..epoch(300, 0, 0)
        };
        assert_eq!(
            rebalanced(16, 16, BOUNDS, thrash, (30_000, 200_000)),
            16,
            "stays at the floor"
        );
    }

    #[test]
    fn the_list_shrinks_when_sampling_only_unmaps_pages_in_use() {
        // Random access: many young reactivations, few pages saved at the list's end.
        assert_eq!(
            rebalanced(128, 16, BOUNDS, epoch(2, 500, 10), (30_000, 70_000)),
            112
        );
        // Without a network a remote fault costs what a local one does: nothing to save.
        assert_eq!(
            rebalanced(128, 16, BOUNDS, epoch(50, 5, 50), (30_000, 30_000)),
            112
        );
        assert_eq!(
            rebalanced(20, 16, BOUNDS, epoch(0, 5, 0), (1, 2)),
            16,
            "never below the floor"
        );
    }

    #[test]
    fn the_list_stays_when_its_oldest_pages_pay_for_it() {
        // A hot set touched while old: shrinking would turn those into remote faults.
        assert_eq!(
            rebalanced(128, 16, BOUNDS, epoch(0, 10, 40), (30_000, 70_000)),
            128
        );
    }

    #[test]
    fn costs_come_from_the_probe_the_handlers_and_the_reclaimer() {
        let c = Costs::default();
        assert_eq!(c.estimate(), (1, 2), "a guess before any sample");
        c.thread_remote(60_000);
        c.remote_service(30_000);
        c.local_service(3_000);
        // Delivery and wake 30 us, plus 3 us of local service; a remote fault 60 us.
        assert_eq!(c.estimate(), (33_000, 60_000));
        // The probe's own local fault replaces the estimate; deactivation adds to it.
        c.thread_local(8_000);
        c.deactivate(4_000);
        assert_eq!(c.estimate(), (12_000, 60_000));
    }

    #[test]
    fn an_epoch_moves_the_target_once_enough_pages_were_evicted() {
        let s = Sizer::new(1024, 8, 0, 512);
        assert_eq!(s.target(), 0, "no window until sampling is seen to pay");
        s.costs.thread_remote(100_000);
        s.costs.thread_local(10_000);
        for _ in 0..3 {
            s.refault(3); // near: a window of a step would have kept them
        }
        s.evicted(16);
        assert_eq!(s.target(), 0, "epoch not over");
        s.evicted(16);
        assert_eq!(s.target(), 8);
        assert_eq!(s.grown.load(Ordering::Relaxed), 1);
        for _ in 0..100 {
            s.reactivation(0); // young
        }
        s.evicted(32);
        assert_eq!(s.target(), 0);
        assert_eq!(s.shrunk.load(Ordering::Relaxed), 1);
    }
}
