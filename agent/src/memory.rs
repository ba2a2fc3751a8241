//! The agent's own memory: every allocation of its Rust code counted (live bytes and their
//! peak), for the stats document. Its per-page tables (page states, the reclaim lists, slot
//! indexes), histograms, logs and buffers are all allocations; what else it maps is either the
//! budget's (the slots inactive pages live in) or the far memory's (memory files, registered
//! buffers).
//!
//! A global allocator is the one place that sees every allocation without each structure
//! reporting its own size (and forgetting to when it grows a field). Counting costs two relaxed
//! atomic operations per allocation: one add, and a read of the peak.

// Unsafe here: the GlobalAlloc implementation, which forwards to the system allocator.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, counted.
#[derive(Debug)]
pub struct Counted;

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// caller's contract is System's; the counters do not touch the memory.
unsafe impl GlobalAlloc for Counted {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as received (see the impl's note).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as received.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as received.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as received.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    // A read first: the peak rarely moves, and a write on every allocation (the fault path's
    // included) would bounce its cache line between the threads that allocate.
    if now > PEAK.load(Ordering::Relaxed) {
        PEAK.fetch_max(now, Ordering::Relaxed);
    }
}

/// Bytes the agent's code holds allocated now.
pub fn live_bytes() -> u64 {
    LIVE.load(Ordering::Relaxed) as u64
}

/// The most it held at once.
pub fn peak_bytes() -> u64 {
    PEAK.load(Ordering::Relaxed) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allocation_is_counted_until_it_is_freed() {
        // Other tests allocate concurrently: look for a change far larger than theirs.
        const BIG: usize = 64 << 20;
        let before = live_bytes();
        let v = vec![1u8; BIG];
        assert!(live_bytes() >= before + BIG as u64 / 2, "not counted");
        assert!(peak_bytes() >= BIG as u64);
        drop(v);
        assert!(live_bytes() < before + BIG as u64 / 2, "not released");
    }
}
