//! GC threads' remote faults by what the collector was doing (`gc_activity`): a concurrent
//! thread's are counted at once under its activity; a pause's are logged with their pages and
//! classified when the pause ends, when its kind and what it freed are known.
//!
//! Every remote fault of the `gc` and `gc-concurrent` classes is counted here exactly once,
//! so the activities sum to those classes' remote faults; a pause still under way counts its
//! logged faults as `pause_other` in a snapshot until it ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use crate::gc_activity::{GcActivity, PauseFacts, PauseKind, RegionKind, RegionMap, RegionSpan};
use crate::model::ThreadClass;

/// Remote faults and the time the faulting GC threads spent on them, of one activity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ActivityCount {
    pub remote: u64,
    pub wait_ns: u64,
}

#[derive(Debug)]
pub(super) struct Attribution {
    remote: [AtomicU64; GcActivity::COUNT],
    wait_ns: [AtomicU64; GcActivity::COUNT],
    /// The pause under way's remote faults: (page, service ns, saturated at 4.3 s). Eight
    /// bytes an entry: a pause that reads a heap's worth logs a heap's worth of pages.
    pause_log: Mutex<Vec<(u32, u32)>>,
    /// Most faults logged for one pause; beyond, they count as `pause_other` at once (a pause
    /// that never ends must not grow the log without bound).
    max_log: usize,
    /// The heap's first byte: page `p` is at `base + p * PAGE_SIZE`.
    base: usize,
    /// The heap's regions when the pause under way started (empty between pauses).
    pause_regions: RwLock<RegionMap>,
    /// The heap's regions when the last pause ended: a concurrently evacuating collector's
    /// collection set, which tells its concurrent threads' work apart.
    after_pause: RwLock<RegionMap>,
}

impl Attribution {
    pub fn new(max_log: usize, base: usize) -> Attribution {
        Attribution {
            base,
            remote: Default::default(),
            wait_ns: Default::default(),
            pause_log: Mutex::new(Vec::new()),
            max_log,
            pause_regions: RwLock::default(),
            after_pause: RwLock::default(),
        }
    }

    /// A pause started with the heap's regions as `regions` says.
    pub fn pause_started(&self, regions: RegionMap) {
        *self.pause_regions.write().unwrap() = regions;
    }

    /// The collector named `addrs` as pages the pause under way evacuates: their regions
    /// are its collection set from now on (`RegionMap::collecting`). False when no pause is
    /// under way (its map is empty between pauses): nothing changes.
    pub fn collecting(&self, addrs: &[usize]) -> bool {
        // A read first: between pauses marking's hints come here, while GC faults read the map.
        if self.pause_regions.read().unwrap().is_empty() {
            return false;
        }
        let mut m = self.pause_regions.write().unwrap();
        m.collecting(addrs);
        !m.is_empty()
    }

    /// The spans of the pause under way's regions (empty between pauses).
    pub fn pause_spans(&self) -> Vec<RegionSpan> {
        self.pause_regions.read().unwrap().spans().to_vec()
    }

    /// The kind of the region holding `addr` when the pause under way started (`None` between
    /// pauses, or where the map says nothing).
    pub fn region_at(&self, addr: usize) -> Option<RegionKind> {
        self.pause_regions.read().unwrap().kind_at(addr)
    }

    /// The kind of the region holding `addr` as the last pause left it, where that tells
    /// concurrent work apart (a concurrently evacuating collector's collection set).
    pub fn concurrent_region(&self, addr: usize) -> Option<RegionKind> {
        self.after_pause.read().unwrap().kind_at(addr)
    }

    fn addr(&self, page: usize) -> usize {
        self.base + page * swap_backend::PAGE_SIZE
    }

    fn add(&self, a: GcActivity, n: u64, ns: u64) {
        self.remote[a as usize].fetch_add(n, Ordering::Relaxed);
        self.wait_ns[a as usize].fetch_add(ns, Ordering::Relaxed);
    }

    /// A remote fault of a thread of `class` on `page`, served in `ns`; `concurrent` is what a
    /// concurrent GC thread does (from its name). Other classes are not the collector's.
    pub fn remote(&self, class: ThreadClass, concurrent: Option<GcActivity>, page: usize, ns: u64) {
        match class {
            ThreadClass::Gc => {
                let mut log = self.pause_log.lock().unwrap();
                if log.len() < self.max_log {
                    log.push((page as u32, u32::try_from(ns).unwrap_or(u32::MAX)));
                } else {
                    drop(log);
                    self.add(GcActivity::PauseOther, 1, ns);
                }
            }
            ThreadClass::GcConcurrent => {
                let a = match concurrent {
                    Some(a) if a != GcActivity::ConcurrentOther => a,
                    // A thread whose name says nothing: the last pause's collection set may.
                    _ => self
                        .after_pause
                        .read()
                        .unwrap()
                        .concurrent_activity(self.addr(page))
                        .unwrap_or(GcActivity::ConcurrentOther),
                };
                self.add(a, 1, ns)
            }
            _ => {}
        }
    }

    /// The pause ended: its logged faults are classified by `facts` (`None`: nothing known of
    /// it, all `pause_other`); `after` is the heap's regions now, for the concurrent work
    /// until the next pause. `each` sees the classified pages in page order (nothing is
    /// collected: a pause's log can be a heap's worth of pages).
    pub fn pause_ended(
        &self,
        facts: Option<(PauseKind, &[(usize, usize)])>,
        after: RegionMap,
        each: &mut dyn FnMut(u32, GcActivity),
    ) {
        *self.after_pause.write().unwrap() = after;
        let start = std::mem::take(&mut *self.pause_regions.write().unwrap());
        let facts = facts.map(|(kind, free_at_end)| PauseFacts {
            kind,
            start: &start,
            free_at_end,
        });
        let facts = facts.as_ref();
        let mut log = std::mem::take(&mut *self.pause_log.lock().unwrap());
        log.sort_unstable_by_key(|&(p, _)| p);
        for (p, ns) in log {
            let a = facts.map_or(GcActivity::PauseOther, |f| {
                f.classify(self.addr(p as usize))
            });
            self.add(a, 1, u64::from(ns));
            each(p, a);
        }
    }

    /// Counts by activity of the faults attributed so far (a pause under way's come when it
    /// ends): atomics only, no lock a fault takes (for `/metrics`).
    pub fn attributed(&self) -> [ActivityCount; GcActivity::COUNT] {
        std::array::from_fn(|i| ActivityCount {
            remote: self.remote[i].load(Ordering::Relaxed),
            wait_ns: self.wait_ns[i].load(Ordering::Relaxed),
        })
    }

    /// Counts by activity (`GcActivity::ALL` order); a pause under way's faults as
    /// `pause_other`.
    pub fn snapshot(&self) -> [ActivityCount; GcActivity::COUNT] {
        let (pending, pending_ns) = {
            let log = self.pause_log.lock().unwrap();
            (
                log.len() as u64,
                log.iter().map(|&(_, ns)| u64::from(ns)).sum::<u64>(),
            )
        };
        let mut counts = self.attributed();
        let other = &mut counts[GcActivity::PauseOther as usize];
        other.remote += pending;
        other.wait_ns += pending_ns;
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gc_activity::{PauseKind, RegionKind, RegionMap, RegionSpan};

    const PAGE: usize = 4096;

    fn total(a: &Attribution) -> u64 {
        a.snapshot().iter().map(|c| c.remote).sum()
    }

    /// Scripted faults of every class over two pauses and concurrent work: each GC fault is
    /// counted once, under the activity its region and pause say, with its wait.
    #[test]
    fn scripted_faults_are_attributed_once_each() {
        let a = Attribution::new(3, 0);
        // Pages 0-15 young, 16-31 old at the pause's start.
        let map = RegionMap::new(vec![
            RegionSpan {
                start: 0,
                end: 16 * PAGE,
                kind: RegionKind::Young,
            },
            RegionSpan {
                start: 16 * PAGE,
                end: 32 * PAGE,
                kind: RegionKind::Old,
            },
        ]);
        a.pause_started(map.clone());
        assert_eq!(a.region_at(20 * PAGE), Some(RegionKind::Old));
        a.remote(ThreadClass::Application, None, 1, 100);
        a.remote(ThreadClass::Gc, None, 20, 1_000);
        a.remote(ThreadClass::Gc, None, 3, 2_000);
        a.remote(
            ThreadClass::GcConcurrent,
            Some(GcActivity::ConcurrentRefinement),
            17,
            500,
        );
        // Under way: the pause's two faults are `pause_other` for now.
        let s = a.snapshot();
        assert_eq!(s[GcActivity::PauseOther as usize].remote, 2);
        assert_eq!(
            total(&a),
            3,
            "the application's fault is not the collector's"
        );
        let free: &[(usize, usize)] = &[(0, 16 * PAGE)];
        let mut pages = Vec::new();
        a.pause_ended(
            Some((PauseKind::Incremental, free)),
            RegionMap::default(),
            &mut |p, x| pages.push((p, x)),
        );
        assert_eq!(a.region_at(20 * PAGE), None, "no pause under way");
        assert_eq!(
            pages,
            vec![(3, GcActivity::YoungEvacuation), (20, GcActivity::CardScan)]
        );
        let s = a.snapshot();
        let at = |x: GcActivity| s[x as usize];
        assert_eq!(
            at(GcActivity::YoungEvacuation),
            ActivityCount {
                remote: 1,
                wait_ns: 2_000
            }
        );
        assert_eq!(at(GcActivity::CardScan).wait_ns, 1_000);
        assert_eq!(at(GcActivity::ConcurrentRefinement).remote, 1);
        assert_eq!(at(GcActivity::PauseOther).remote, 0);
        // A concurrent GC thread whose name says nothing is `concurrent_other`.
        a.remote(ThreadClass::GcConcurrent, None, 40, 1);
        assert_eq!(a.snapshot()[GcActivity::ConcurrentOther as usize].remote, 1);
        // A pause over the log's bound: the excess counts at once, nothing is lost.
        a.pause_started(map);
        for p in 0..5 {
            a.remote(ThreadClass::Gc, None, p, 10);
        }
        let mut n = 0;
        a.pause_ended(
            Some((PauseKind::Full, free)),
            RegionMap::default(),
            &mut |_, _| n += 1,
        );
        assert_eq!(n, 3);
        let s = a.snapshot();
        assert_eq!(s[GcActivity::FullGc as usize].remote, 3);
        assert_eq!(s[GcActivity::PauseOther as usize].remote, 2);
        assert_eq!(total(&a), 9);
        // Nothing known of a pause: its faults are `pause_other`.
        a.remote(ThreadClass::Gc, None, 2, 10);
        a.pause_ended(None, RegionMap::default(), &mut |_, _| {});
        assert_eq!(a.snapshot()[GcActivity::PauseOther as usize].remote, 3);
    }
}
