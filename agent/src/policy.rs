//! Paging policies: which prefetch stream a fault trains, and where a page enters the
//! eviction order. The pager asks; the policy never touches pages.
//!
//! * [`Baseline`] is what kernel swap does for a process it knows nothing about: one global
//!   prefetch stream fed by every thread, every page admitted alike.
//! * [`MemLiner`] knows which threads are the GC: pages GC threads bring in are admitted
//!   *cold* (evicted before any application page unless the application touches them), GC
//!   faults train only GC streams, application threads get a stream each.

use crate::gc_activity::RegionKind;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::model::ThreadClass;
use crate::prefetch::StreamKey;

/// Where a newly resident page enters the eviction order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// The recency queue (CLOCK): evicted after a full pass without a reference.
    Hot,
    /// Evicted first, in arrival order, unless promoted by an application touch.
    Cold,
    /// Hot until the stop-the-world GC pause in progress ends, then cold: the pause itself
    /// needs the page (it reads an object, then writes its forwarding pointer or updates its
    /// fields), the application, once resumed, rarely does.
    ColdAfterPause,
    /// Kept out of the pause's way until it ends (active, not on probation), then cold: a page
    /// of the collection set's young regions, which the pause reads object by object and
    /// again for every reference to a copied object (its forwarding pointer); evicted during
    /// the pause, it comes back before the pause frees it.
    HeldForPause,
    /// Cold, unless it comes back within the working set's distance of its eviction: then
    /// on probation like any page. A page of a concurrently evacuating collector's
    /// collection set: evacuation reads each live object once and writes its forwarding
    /// pointer, which every later reference to the object reads (reference updates, the
    /// application's barriers) until the cycle has updated them all.
    ColdUnlessReread,
}

/// How a page came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// First touch, zero-filled (no remote copy existed).
    ZeroFill,
    /// Demand fault on a remote page.
    Demand,
    /// Prefetched for a stream of this class.
    Prefetch,
}

/// How streams are keyed under the GC-aware policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamScope {
    /// One stream per thread.
    Thread,
    /// One stream per thread class.
    Class,
}

/// A paging policy.
pub trait PagingPolicy: Send + Sync + std::fmt::Debug {
    fn name(&self) -> &'static str;
    /// The stream a remote fault by thread `tid` of `class` trains; `None` trains nothing.
    fn stream(&self, tid: u32, class: ThreadClass) -> Option<StreamKey>;
    /// Where a page brought in for `class` goes.
    /// `region`: what the page's region was when the pause under way started (`None`
    /// outside pauses, or not known).
    fn admission(
        &self,
        class: ThreadClass,
        source: Source,
        region: Option<RegionKind>,
    ) -> Admission;
    /// Whether a touch by `class` makes a cold page hot.
    fn promotes(&self, class: ThreadClass) -> bool;
    /// Whether a touch by `class` counts as a reference for the replacement (a page it
    /// touches while sampled, or writes while mapped, becomes active).
    fn references(&self, _class: ThreadClass) -> bool {
        true
    }
    /// Whether a page read in for `class` is mapped write-protected to learn if it gets
    /// written (when dirty tracking is on at all).
    fn track_dirty(&self, _class: ThreadClass) -> bool {
        true
    }
    /// A page read in for `class` was mapped write-protected.
    fn note_tracked(&self, _class: ThreadClass) {}
    /// A page read in for `class` and mapped write-protected was written.
    fn note_written(&self, _class: ThreadClass) {}
    /// Whether the young regions a pause frees are left mapped write-protected for eden to
    /// reuse, rather than discarded as other dead space (`pager::release`): that G1 hands
    /// them out again next is the collector's knowledge, which a plain pager does not use.
    fn keeps_freed_young(&self) -> bool {
        false
    }
}

/// Learns, per thread class, whether write-protecting the pages a class reads in pays: a
/// write-protect fault costs a whole fault round trip, while the write-back it saves for a
/// page that stays clean is one page in a pipelined batch. Tracking stays on for a class
/// while fewer than 1 in [`WriteRatio::MAX_WRITTEN_SHARE`] of its tracked pages get written
/// (GC marking: almost none; the application and evacuating GC workers: most). When off, 1 in
/// 16 of the class's pages is still tracked so that the estimate follows phase changes.
#[derive(Debug)]
pub struct WriteRatio {
    tracking: [AtomicBool; ThreadClass::COUNT],
    tracked: [AtomicU32; ThreadClass::COUNT],
    written: [AtomicU32; ThreadClass::COUNT],
    installs: [AtomicU32; ThreadClass::COUNT],
}

impl Default for WriteRatio {
    fn default() -> Self {
        WriteRatio {
            tracking: std::array::from_fn(|_| AtomicBool::new(true)),
            tracked: Default::default(),
            written: Default::default(),
            installs: Default::default(),
        }
    }
}

impl WriteRatio {
    /// Tracking stays on while written * MAX_WRITTEN_SHARE < tracked.
    pub const MAX_WRITTEN_SHARE: u32 = 4;
    /// Tracked pages per decision; the counts then halve (older evidence fades).
    const DECIDE_EVERY: u32 = 512;
    const SAMPLE: u32 = 16;

    pub fn track(&self, class: ThreadClass) -> bool {
        let c = class as usize;
        self.tracking[c].load(Ordering::Relaxed)
            || self.installs[c]
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(Self::SAMPLE)
    }

    pub fn tracked(&self, class: ThreadClass) {
        let c = class as usize;
        let t = self.tracked[c].fetch_add(1, Ordering::Relaxed) + 1;
        if t >= Self::DECIDE_EVERY {
            let w = self.written[c].load(Ordering::Relaxed);
            self.tracking[c].store(w * Self::MAX_WRITTEN_SHARE < t, Ordering::Relaxed);
            self.tracked[c].store(t / 2, Ordering::Relaxed);
            self.written[c].store(w / 2, Ordering::Relaxed);
        }
    }

    pub fn written(&self, class: ThreadClass) {
        self.written[class as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn is_tracking(&self, class: ThreadClass) -> bool {
        self.tracking[class as usize].load(Ordering::Relaxed)
    }
}

/// Kernel-swap-like: one stream, one queue.
#[derive(Clone, Copy, Debug, Default)]
pub struct Baseline {
    pub prefetch: bool,
}

impl PagingPolicy for Baseline {
    fn name(&self) -> &'static str {
        "baseline"
    }

    fn stream(&self, _tid: u32, _class: ThreadClass) -> Option<StreamKey> {
        self.prefetch.then_some(0)
    }

    fn admission(&self, _: ThreadClass, _: Source, _: Option<RegionKind>) -> Admission {
        Admission::Hot
    }

    fn promotes(&self, _class: ThreadClass) -> bool {
        false
    }
}

/// GC-aware paging on a stock JVM.
#[derive(Debug)]
pub struct MemLiner {
    pub prefetch: bool,
    pub scope: StreamScope,
    /// `Some`: decide per class whether tracking dirtiness pays; `None`: always track.
    pub adaptive_dirty: Option<WriteRatio>,
}

impl PagingPolicy for MemLiner {
    fn name(&self) -> &'static str {
        "memliner"
    }

    fn stream(&self, tid: u32, class: ThreadClass) -> Option<StreamKey> {
        if !self.prefetch {
            return None;
        }
        // Keys: class in the top byte so that thread and class keys never collide.
        let class_key = (class as u64 + 1) << 56;
        Some(match self.scope {
            StreamScope::Thread => class_key | tid as u64,
            StreamScope::Class => class_key,
        })
    }

    fn admission(
        &self,
        class: ThreadClass,
        source: Source,
        region: Option<RegionKind>,
    ) -> Admission {
        // Pages the GC *reads* back (tracing, scanning) are rarely what the application needs
        // next. Pages the GC zero-fills are copy destinations: survivors the application will
        // use, so they are admitted like the application's own. Concurrent tracing touches
        // each object once while the application runs: cold at once. A pause's pages serve
        // the pause: its young regions' and its collection set's (a patched G1 names a mixed
        // collection's old regions) are held until it ends (it reads them again for every
        // reference to an object it copied, then frees them); an old region's it faults on
        // through a card, writes the updated reference back at once and is done with: cold at
        // once (read ahead of the scan: held until the pause ends); others cold when it ends.
        match (class, source, region) {
            (_, Source::ZeroFill, _) => Admission::Hot,
            (ThreadClass::GcConcurrent, Source::Demand, Some(RegionKind::CollectionSet)) => {
                Admission::ColdUnlessReread
            }
            (ThreadClass::GcConcurrent, _, _) => Admission::Cold,
            (ThreadClass::Gc, _, Some(RegionKind::Young | RegionKind::CollectionSet)) => {
                Admission::HeldForPause
            }
            (ThreadClass::Gc, Source::Demand, Some(RegionKind::Old | RegionKind::Humongous)) => {
                Admission::Cold
            }
            (ThreadClass::Gc, _, _) => Admission::ColdAfterPause,
            _ => Admission::Hot,
        }
    }

    fn promotes(&self, class: ThreadClass) -> bool {
        !class.is_gc()
    }

    /// The GC's touches are not the application's working set: tracing reads each object
    /// once, and a pause's reads and writes serve the pause.
    fn references(&self, class: ThreadClass) -> bool {
        !class.is_gc()
    }

    fn track_dirty(&self, class: ThreadClass) -> bool {
        self.adaptive_dirty.as_ref().is_none_or(|w| w.track(class))
    }

    fn note_tracked(&self, class: ThreadClass) {
        if let Some(w) = &self.adaptive_dirty {
            w.tracked(class);
        }
    }

    fn note_written(&self, class: ThreadClass) {
        if let Some(w) = &self.adaptive_dirty {
            w.written(class);
        }
    }

    fn keeps_freed_young(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baseline_has_one_stream_and_one_queue() {
        let p = Baseline { prefetch: true };
        assert_eq!(p.stream(1, ThreadClass::Application), Some(0));
        assert_eq!(p.stream(2, ThreadClass::Gc), Some(0));
        for &c in ThreadClass::ALL {
            for s in [Source::ZeroFill, Source::Demand, Source::Prefetch] {
                assert_eq!(p.admission(c, s, None), Admission::Hot);
                assert_eq!(p.admission(c, s, Some(RegionKind::Young)), Admission::Hot);
            }
            assert!(!p.promotes(c));
        }
        assert_eq!(
            Baseline { prefetch: false }.stream(1, ThreadClass::Application),
            None
        );
    }

    #[test]
    fn memliner_keeps_gc_streams_apart_and_admits_gc_reads_cold() {
        let p = MemLiner {
            prefetch: true,
            scope: StreamScope::Thread,
            adaptive_dirty: None,
        };
        assert!(p.track_dirty(ThreadClass::Application));
        let app1 = p.stream(10, ThreadClass::Application).unwrap();
        let app2 = p.stream(11, ThreadClass::Application).unwrap();
        let gc = p.stream(10, ThreadClass::Gc).unwrap();
        assert_ne!(app1, app2);
        assert_ne!(app1, gc, "same tid, other class: other stream");
        use RegionKind::{Humongous, Old, Young};
        // A pause's pages by their region at its start: the collection set's young regions
        // (and the old ones a patched G1 names) held until it ends, an old region's faulted
        // through a card cold at once (read ahead of the scan: held), a region not known cold
        // when the pause ends.
        let gc = |s, r| p.admission(ThreadClass::Gc, s, r);
        assert_eq!(gc(Source::Demand, None), Admission::ColdAfterPause);
        assert_eq!(gc(Source::Demand, Some(Young)), Admission::HeldForPause);
        assert_eq!(gc(Source::Prefetch, Some(Young)), Admission::HeldForPause);
        for s in [Source::Demand, Source::Prefetch] {
            assert_eq!(
                gc(s, Some(RegionKind::CollectionSet)),
                Admission::HeldForPause
            );
        }
        assert_eq!(gc(Source::Demand, Some(Old)), Admission::Cold);
        assert_eq!(gc(Source::Demand, Some(Humongous)), Admission::Cold);
        assert_eq!(gc(Source::Prefetch, Some(Old)), Admission::ColdAfterPause);
        assert_eq!(
            p.admission(ThreadClass::GcConcurrent, Source::Prefetch, Some(Old)),
            Admission::Cold
        );
        // A concurrently evacuating collector's collection set: its threads' reads stay
        // unless read back soon (forwarding pointers); its prefetches and other pages cold.
        let conc = |s, r| p.admission(ThreadClass::GcConcurrent, s, r);
        use RegionKind::CollectionSet;
        assert_eq!(
            conc(Source::Demand, Some(CollectionSet)),
            Admission::ColdUnlessReread
        );
        assert_eq!(conc(Source::Prefetch, Some(CollectionSet)), Admission::Cold);
        assert_eq!(conc(Source::Demand, None), Admission::Cold);
        assert_eq!(conc(Source::ZeroFill, Some(CollectionSet)), Admission::Hot);
        assert_eq!(gc(Source::ZeroFill, Some(Young)), Admission::Hot);
        assert_eq!(
            p.admission(ThreadClass::Application, Source::Demand, Some(Old)),
            Admission::Hot
        );
        assert!(p.promotes(ThreadClass::Application));
        assert!(!p.promotes(ThreadClass::Gc));
        let by_class = MemLiner {
            prefetch: true,
            scope: StreamScope::Class,
            adaptive_dirty: None,
        };
        assert_eq!(
            by_class.stream(10, ThreadClass::Application),
            by_class.stream(11, ThreadClass::Application)
        );
    }

    #[test]
    fn tracking_stops_for_a_class_that_writes_what_it_reads_and_resumes() {
        let w = WriteRatio::default();
        let (app, gc) = (ThreadClass::Application, ThreadClass::GcConcurrent);
        for i in 0..2000 {
            assert!(w.track(gc));
            w.tracked(gc);
            if w.track(app) {
                w.tracked(app);
                if i % 2 == 0 {
                    w.written(app);
                }
            }
        }
        assert!(w.is_tracking(gc), "marking reads only: keep tracking");
        assert!(!w.is_tracking(app), "half written: stop");
        let sampled = (0..160).filter(|_| w.track(app)).count();
        assert_eq!(sampled, 10, "1 in 16 still tracked");
        // The application stops writing: the samples bring tracking back.
        for _ in 0..20_000 {
            if w.track(app) {
                w.tracked(app);
            }
        }
        assert!(w.is_tracking(app));
    }
}
