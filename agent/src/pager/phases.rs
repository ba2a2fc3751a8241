//! What the pager knows of the collector's phases: stop-the-world pauses (JVMTI), concurrent
//! marking (a patched JVM's phase events), concurrent cycles as seen in the concurrent GC
//! threads' own faults, and the pages a pause brought in (made cold when it ends).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use super::counters::{PagerCounters, CYCLE_GAP};
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
    /// Nanoseconds since `epoch` of the last concurrent GC thread fault.
    last_concurrent_fault: AtomicU64,
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

    /// Follows concurrent GC cycles through the concurrent GC threads' own faults.
    pub fn note_fault(&self, class: ThreadClass, counters: &PagerCounters) {
        let now = self.epoch.elapsed().as_nanos() as u64;
        let gap = CYCLE_GAP.as_nanos() as u64;
        match class {
            ThreadClass::GcConcurrent => {
                let last = self.last_concurrent_fault.swap(now, Ordering::Relaxed);
                if last == 0 || now.saturating_sub(last) > gap {
                    counters.concurrent_cycles.fetch_add(1, Ordering::Relaxed);
                }
            }
            ThreadClass::Application => {
                let last = self.last_concurrent_fault.load(Ordering::Relaxed);
                if last != 0 && now.saturating_sub(last) <= gap {
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
