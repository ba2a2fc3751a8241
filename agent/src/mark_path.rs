//! Which path a concurrent marking thread is on, as a GC-hook patched JVM reports it: one
//! byte per thread, here, that the JVM writes as the thread's marking work changes (`memliner.h`'s
//! `mark_path`) and the pager reads when that thread serves its own fault (`faults=signal`),
//! to count the fault under the path (`gc_faults`).

use std::cell::Cell;

use gc_hooks::mark_path;

use crate::gc_activity::GcActivity;

thread_local! {
    /// The calling thread's path (`gc_hooks::mark_path`). Constant-initialised with no
    /// destructor: reading it from a signal handler allocates nothing.
    static PATH: Cell<u8> = const { Cell::new(mark_path::NONE) };
}

/// The calling thread's byte, for the JVM to write; valid for the thread's life.
pub fn slot() -> *mut u8 {
    PATH.with(Cell::as_ptr)
}

/// The path the calling thread last reported, as the activity its faults count under;
/// `None` when it reported none.
pub fn current() -> Option<GcActivity> {
    activity(PATH.with(Cell::get))
}

/// The activity of a reported path (`None` for `NONE` and values this agent does not know).
pub fn activity(path: u8) -> Option<GcActivity> {
    Some(match path {
        mark_path::ROOT_REGIONS => GcActivity::MarkRootRegions,
        mark_path::STORE_LOG => GcActivity::MarkStoreLog,
        mark_path::STACK => GcActivity::MarkStack,
        mark_path::ARRAY_SLICE => GcActivity::MarkArraySlices,
        mark_path::BITMAP_WALK => GcActivity::MarkBitmapWalk,
        mark_path::DEFERRED => GcActivity::MarkDeferred,
        mark_path::REBUILD => GcActivity::RemsetRebuild,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reported_path_has_its_own_concurrent_activity() {
        let mut seen = Vec::new();
        for (value, name) in mark_path::ALL {
            match activity(value) {
                None => assert_eq!(value, mark_path::NONE, "{name}"),
                Some(a) => {
                    assert!(!a.in_pause(), "{name}");
                    assert!(!seen.contains(&a), "{name} shares {a:?}");
                    seen.push(a);
                }
            }
        }
        assert_eq!(seen.len(), mark_path::ALL.len() - 1);
        assert_eq!(
            activity(200),
            None,
            "a path from a newer JVM is just marking"
        );
    }

    #[test]
    fn a_thread_s_byte_is_its_own_and_read_back() {
        assert_eq!(current(), None);
        // What the JVM's byte store through `slot()` does.
        assert_eq!(slot(), PATH.with(Cell::as_ptr));
        PATH.with(|c| c.set(mark_path::BITMAP_WALK));
        assert_eq!(current(), Some(GcActivity::MarkBitmapWalk));
        let other = std::thread::spawn(current).join().unwrap();
        assert_eq!(other, None, "another thread's byte is its own");
        PATH.with(|c| c.set(mark_path::NONE));
        assert_eq!(current(), None);
    }
}
