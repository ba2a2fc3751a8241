//! How long the inactive list is: balanced, epoch by epoch, between what sampling costs and
//! what it saves, in measured fault costs.
//!
//! A reactivation is a local fault (`c_local`: delivery to the handler, a copy, the wake); a
//! remote fault costs `c_remote`. Over an epoch of evictions the sizer counts, with `T` the
//! target:
//! - *near refaults*: remote faults on pages evicted fewer than `T/4` evictions ago. A list
//!   `T/4` longer would have kept them: each would have cost a reactivation instead.
//! - *young reactivations*: pages touched within the newest quarter of the list (deactivated
//!   fewer than `T/4` deactivations ago). With a list `T/4` shorter, and so an active list
//!   `T/4` longer, they would not have been unmapped yet: their touch would have been free.
//! - *old reactivations*: pages touched in the oldest quarter. A list `T/4` shorter would have
//!   evicted them: each would have been a remote fault.
//!
//! Growing by a quarter gains `near * (c_remote - c_local)` and pays about `young * c_local`;
//! shrinking gains `young * c_local` and pays `old * (c_remote - c_local)`. The target moves a
//! step toward the cheaper side, or stays. The costs come from the fault latencies measured on
//! the way: the probe's remote fault as the faulting thread sees it, and the handlers' service
//! times for remote and reactivation faults (delivery and wake = probe - remote service).
//! Until the probe has a sample a remote fault is taken to cost twice a local one.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Moving averages (ns) of the fault costs.
#[derive(Debug, Default)]
pub struct Costs {
    remote_service: AtomicU64,
    local_service: AtomicU64,
    thread_remote: AtomicU64,
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

    pub fn thread_remote(&self, ns: u64) {
        ewma(&self.thread_remote, ns)
    }

    /// (local, remote) fault costs in ns.
    pub fn estimate(&self) -> (u64, u64) {
        let (sr, sl, lr) = (
            self.remote_service.load(Ordering::Relaxed),
            self.local_service.load(Ordering::Relaxed),
            self.thread_remote.load(Ordering::Relaxed),
        );
        if sr == 0 || sl == 0 || lr == 0 {
            return (1, 2);
        }
        let local = lr.saturating_sub(sr) + sl;
        (local.max(1), lr.max(local))
    }
}

/// One epoch's observations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Epoch {
    pub near_refaults: u64,
    pub young_reactivations: u64,
    pub old_reactivations: u64,
}

/// The next target: a `step` toward the cheaper side, within `[min, max]`.
pub fn rebalanced(
    target: usize,
    step: usize,
    (min, max): (usize, usize),
    e: Epoch,
    (c_local, c_remote): (u64, u64),
) -> usize {
    let gain = c_remote.saturating_sub(c_local) as u128;
    let local = c_local as u128;
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
            target: AtomicUsize::new((budget / 4).clamp(min, max)),
            min,
            max,
            step_floor: batch.max(1),
            epoch_len: (budget / 8).max(4 * batch).max(1) as u64,
            evictions: AtomicU64::new(0),
            near: AtomicU64::new(0),
            young: AtomicU64::new(0),
            old: AtomicU64::new(0),
            costs: Costs::default(),
            rebalancing: Mutex::new(()),
            grown: AtomicU64::new(0),
            shrunk: AtomicU64::new(0),
        }
    }

    pub fn target(&self) -> usize {
        self.target.load(Ordering::Relaxed)
    }

    fn quarter(&self) -> u64 {
        (self.target() as u64 / 4).max(self.step_floor as u64)
    }

    /// A remote fault on a page evicted `distance` evictions ago.
    pub fn refault(&self, distance: u64) {
        if distance <= self.quarter() {
            self.near.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A reactivation of a page deactivated `age` deactivations ago.
    pub fn reactivation(&self, age: u64) {
        let t = self.target() as u64;
        if age < self.quarter() {
            self.young.fetch_add(1, Ordering::Relaxed);
        } else if age >= t - t / 4 {
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
        self.evictions.store(0, Ordering::Relaxed);
        let e = Epoch {
            near_refaults: self.near.swap(0, Ordering::Relaxed),
            young_reactivations: self.young.swap(0, Ordering::Relaxed),
            old_reactivations: self.old.swap(0, Ordering::Relaxed),
        };
        let t = self.target();
        let step = (t / 8).max(self.step_floor);
        let next = rebalanced(t, step, (self.min, self.max), e, self.costs.estimate());
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

    fn epoch(near: u64, young: u64, old: u64) -> Epoch {
        Epoch {
            near_refaults: near,
            young_reactivations: young,
            old_reactivations: old,
        }
    }

    #[test]
    fn the_list_grows_when_pages_come_back_soon_after_eviction() {
        // 50 near refaults at a gain of 40 us beat 20 young reactivations at 30 us.
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
    fn costs_come_from_the_probe_and_the_handlers() {
        let c = Costs::default();
        assert_eq!(c.estimate(), (1, 2), "a guess before any sample");
        c.thread_remote(60_000);
        c.remote_service(30_000);
        c.local_service(3_000);
        // Delivery and wake 30 us, plus 3 us of local service; a remote fault 60 us.
        assert_eq!(c.estimate(), (33_000, 60_000));
    }

    #[test]
    fn an_epoch_moves_the_target_once_enough_pages_were_evicted() {
        let s = Sizer::new(1024, 8, 16, 512);
        assert_eq!(s.target(), 256);
        for _ in 0..100 {
            s.reactivation(0); // young
        }
        s.evicted(100);
        assert_eq!(s.target(), 256, "epoch not over");
        s.evicted(200);
        assert_eq!(s.target(), 224);
        assert_eq!(s.shrunk.load(Ordering::Relaxed), 1);
    }
}
