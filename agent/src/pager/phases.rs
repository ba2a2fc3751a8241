//! What the pager knows of the collector's phases: stop-the-world pauses (JVMTI), concurrent
//! marking (a patched JVM's phase events), concurrent cycles as seen in the concurrent GC
//! threads' own faults, and the pages a pause brought in (made cold when it ends).
//!
//! # Concurrent cycles (stats)
//! A cycle starts at a fault of a concurrent GC thread doing cycle work (marking, the
//! remembered-set rebuild, a concurrent evacuation; not G1's refinement, which runs between
//! cycles as well). Where the JVM says when a cycle ends (G1's cleanup pause or a full
//! collection, in its performance counters) it ends there; elsewhere at [`CYCLE_GAP`] without
//! such a fault. The gap alone miscounts G1: its marking threads stop for every young pause
//! (240 ms ones on graph at 25% of 1 GiB), and its refinement threads fault between cycles, so
//! one 16 s marking cycle was counted as 18.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use super::counters::{PagerCounters, CYCLE_GAP};
use crate::gc_activity::GcActivity;
use crate::model::ThreadClass;

#[derive(Debug)]
pub(super) struct Phases {
    /// Pages admitted `ColdAfterPause` during the current stop-the-world pause.
    pause_pages: Mutex<Vec<u32>>,
    /// Most pages held for one pause (a pause that never ends must not keep them hot).
    max_pause_pages: usize,
    /// Pauses the JVM reported finished, and those whose pages were made cold.
    pauses_ended: AtomicU64,
    pauses_demoted: AtomicU64,
    /// Nanoseconds since `epoch` of the last concurrent GC thread fault doing cycle work
    /// (followed while the JVM does not say when cycles end).
    last_concurrent_fault: AtomicU64,
    /// The JVM says when its concurrent cycles end ([`Phases::cycle_ended`]).
    ends_known: AtomicBool,
    /// A concurrent cycle is under way (where its ends are known).
    cycle_open: AtomicBool,
    /// A patched JVM reported concurrent marking under way (gc-hooks phase events).
    marking: AtomicBool,
    epoch: Instant,
}

impl Phases {
    pub fn new(max_pause_pages: usize) -> Phases {
        Phases {
            pause_pages: Mutex::new(Vec::new()),
            max_pause_pages,
            pauses_ended: AtomicU64::new(0),
            pauses_demoted: AtomicU64::new(0),
            last_concurrent_fault: AtomicU64::new(0),
            ends_known: AtomicBool::new(false),
            cycle_open: AtomicBool::new(false),
            marking: AtomicBool::new(false),
            epoch: Instant::now(),
        }
    }

    /// A stop-the-world pause ended (only an atomic increment: called from the GC's own
    /// callback).
    pub fn pause_finished(&self) {
        self.pauses_ended.fetch_add(1, Ordering::SeqCst);
    }

    pub fn set_marking(&self, on: bool) {
        self.marking.store(on, Ordering::Relaxed);
    }

    pub fn marking(&self) -> bool {
        self.marking.load(Ordering::Relaxed)
    }

    /// From now on the JVM says when each concurrent cycle ends.
    pub fn cycle_ends_known(&self) {
        self.ends_known.store(true, Ordering::Relaxed);
    }

    /// The concurrent cycle under way, if any, has ended (G1's cleanup, a full collection).
    pub fn cycle_ended(&self) {
        self.cycle_open.store(false, Ordering::Relaxed);
    }

    /// Follows concurrent GC cycles through the concurrent GC threads' own faults.
    pub fn note_fault(
        &self,
        class: ThreadClass,
        activity: Option<GcActivity>,
        counters: &PagerCounters,
    ) {
        self.note_fault_at(
            || self.epoch.elapsed().as_nanos() as u64,
            class,
            activity,
            counters,
        );
    }

    /// `now`: nanoseconds since `epoch`, asked for only where a quiet gap ends cycles (this
    /// runs on every fault).
    fn note_fault_at(
        &self,
        now: impl Fn() -> u64,
        class: ThreadClass,
        activity: Option<GcActivity>,
        counters: &PagerCounters,
    ) {
        let gap = CYCLE_GAP.as_nanos() as u64;
        let known = self.ends_known.load(Ordering::Relaxed);
        match class {
            ThreadClass::GcConcurrent if activity != Some(GcActivity::ConcurrentRefinement) => {
                let starts = if known {
                    !self.cycle_open.swap(true, Ordering::Relaxed)
                } else {
                    let now = now();
                    let last = self.last_concurrent_fault.swap(now, Ordering::Relaxed);
                    last == 0 || now.saturating_sub(last) > gap
                };
                if starts {
                    counters.concurrent_cycles.fetch_add(1, Ordering::Relaxed);
                }
            }
            ThreadClass::Application => {
                let open = if known {
                    self.cycle_open.load(Ordering::Relaxed)
                } else {
                    let last = self.last_concurrent_fault.load(Ordering::Relaxed);
                    last != 0 && now().saturating_sub(last) <= gap
                };
                if open {
                    counters
                        .app_faults_in_concurrent_cycle
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
            _ => {}
        }
    }

    /// Page `p` was brought in by the pause under way; `true` when the pause holds more
    /// pages than it may (its pages should be made cold now).
    pub fn pause_page(&self, p: usize) -> bool {
        let mut pp = self.pause_pages.lock().unwrap();
        pp.push(p as u32);
        pp.len() > self.max_pause_pages
    }

    /// The pages of pauses that ended since the last call (all held pages with `force`).
    pub fn take_ended(&self, force: bool) -> Option<Vec<u32>> {
        let ended = self.pauses_ended.load(Ordering::SeqCst);
        if !force && self.pauses_demoted.swap(ended, Ordering::SeqCst) == ended {
            return None;
        }
        Some(std::mem::take(&mut *self.pause_pages.lock().unwrap()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn counts(c: &PagerCounters) -> (u64, u64) {
        (
            c.concurrent_cycles.load(Ordering::Relaxed),
            c.app_faults_in_concurrent_cycle.load(Ordering::Relaxed),
        )
    }

    #[test]
    fn a_cycle_the_jvm_ends_spans_its_pauses_and_refinement_opens_none() {
        let (p, c) = (Phases::new(16), PagerCounters::default());
        p.cycle_ends_known();
        let (mark, refine) = (
            Some(GcActivity::ConcurrentMark),
            Some(GcActivity::ConcurrentRefinement),
        );
        p.note_fault_at(|| MS, ThreadClass::GcConcurrent, refine, &c);
        p.note_fault_at(|| 2 * MS, ThreadClass::Application, None, &c);
        assert_eq!(counts(&c), (0, 0), "refinement runs between cycles");
        // Marking, stopped 500 ms by young pauses twice, then the rebuild: one cycle.
        p.note_fault_at(|| 10 * MS, ThreadClass::GcConcurrent, mark, &c);
        p.note_fault_at(|| 510 * MS, ThreadClass::GcConcurrent, mark, &c);
        p.note_fault_at(|| 600 * MS, ThreadClass::Application, None, &c);
        let rebuild = Some(GcActivity::RemsetRebuild);
        p.note_fault_at(|| 1_100 * MS, ThreadClass::GcConcurrent, rebuild, &c);
        assert_eq!(counts(&c), (1, 1));
        p.cycle_ended();
        p.note_fault_at(|| 1_101 * MS, ThreadClass::Application, None, &c);
        p.note_fault_at(|| 1_102 * MS, ThreadClass::GcConcurrent, refine, &c);
        assert_eq!(
            counts(&c),
            (1, 1),
            "after the cleanup, no cycle until marking faults"
        );
        p.note_fault_at(|| 1_103 * MS, ThreadClass::GcConcurrent, mark, &c);
        assert_eq!(counts(&c), (2, 1));
    }

    #[test]
    fn without_the_jvm_saying_a_quiet_gap_ends_a_cycle() {
        let (p, c) = (Phases::new(16), PagerCounters::default());
        let other = Some(GcActivity::ConcurrentOther);
        p.note_fault_at(|| MS, ThreadClass::GcConcurrent, other, &c);
        p.note_fault_at(|| 50 * MS, ThreadClass::Application, None, &c);
        p.note_fault_at(|| 60 * MS, ThreadClass::GcConcurrent, other, &c);
        assert_eq!(counts(&c), (1, 1));
        p.note_fault_at(|| 300 * MS, ThreadClass::Application, None, &c);
        p.note_fault_at(|| 301 * MS, ThreadClass::GcConcurrent, other, &c);
        assert_eq!(counts(&c), (2, 1));
        let refine = Some(GcActivity::ConcurrentRefinement);
        p.note_fault_at(|| 900 * MS, ThreadClass::GcConcurrent, refine, &c);
        p.note_fault_at(|| 901 * MS, ThreadClass::Application, None, &c);
        assert_eq!(
            counts(&c),
            (2, 1),
            "refinement neither opens nor keeps a cycle"
        );
    }
}
