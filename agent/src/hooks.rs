//! The table a GC-hook patched JVM takes from the agent (gc-hooks, `memliner.h`): the heap
//! view, the prefetch hint, GC phase events, the counters the JVM adds to and each marking
//! thread's path byte (`mark_path`).
//!
//! The JVM calls these from its GC worker threads while the application runs: nothing here
//! blocks or panics across the boundary.

// Unsafe here: the C ABI the patched JVM calls, with raw pointers from HotSpot; each block says why it is sound.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use gc_hooks::{HeapView, HookCounters, Hooks, ABI_VERSION, PHASE_MARK_END, PHASE_MARK_START};

use crate::pager::Pager;
use crate::prefetch::HintCounters;
use memliner_contracts::stats::GcHooksDoc;

/// The pager the hooks feed, and the view of its heap the JVM reads; set once paging starts.
static PAGER: OnceLock<&'static Pager> = OnceLock::new();
static VIEW: OnceLock<HeapView> = OnceLock::new();

/// Whether the pages a refinement pass names are kept and read before it starts (`card_hold`).
static REFINE_AHEAD: AtomicBool = AtomicBool::new(false);

/// Connects the hooks to the pager once the heap is paged; `refine_ahead`: the pages of the
/// cards a refinement pass names are kept and read before it starts.
pub fn attach(pager: &'static Pager, refine_ahead: bool) {
    REFINE_AHEAD.store(refine_ahead, Ordering::Relaxed);
    let _ = VIEW.set(HeapView {
        abi_version: ABI_VERSION,
        page_shift: swap_backend::PAGE_SIZE.trailing_zeros(),
        base: pager.base(),
        pages: pager.npages(),
        residency: pager.residency_map(),
    });
    let _ = PAGER.set(pager);
}

fn pager() -> Option<&'static Pager> {
    PAGER.get().copied()
}

/// The heap view for GC-hook patched JVMs (see gc-hooks); null until the heap is paged.
#[no_mangle]
pub extern "C" fn memliner_heap_view() -> *const HeapView {
    VIEW.get().map_or(std::ptr::null(), |v| v as *const _)
}

static COUNTERS: HookCounters = HookCounters {
    recorded: AtomicU64::new(0),
    lined_up: AtomicU64::new(0),
    deferred: AtomicU64::new(0),
    deferred_resident: AtomicU64::new(0),
    hints: AtomicU64::new(0),
    mark_cycles: AtomicU64::new(0),
};

static TABLE: Hooks = Hooks {
    version: ABI_VERSION,
    size: std::mem::size_of::<Hooks>() as u32,
    heap_view: memliner_heap_view,
    prefetch,
    gc_phase,
    counters: &COUNTERS,
    release,
    refine,
    mark_path,
};

struct Marking {
    started: Option<Instant>,
    total_ns: u64,
}

static MARKING: Mutex<Marking> = Mutex::new(Marking {
    started: None,
    total_ns: 0,
});

/// The table for patched JVMs; never null.
#[no_mangle]
pub extern "C" fn memliner_hooks() -> *const Hooks {
    &TABLE
}

/// Hands the JVM's `n` addresses at `addrs` to `f` with the pager, if paging has started. A
/// hint is never worth a crash: a panic drops it.
fn with_addrs(addrs: *const usize, n: usize, f: fn(&Pager, &[usize])) {
    if addrs.is_null() || n == 0 {
        return;
    }
    // SAFETY: the JVM passes `n` addresses it owns for the duration of the call.
    let addrs = unsafe { std::slice::from_raw_parts(addrs, n) };
    let _ = std::panic::catch_unwind(|| {
        if let Some(p) = pager() {
            f(p, addrs);
        }
    });
}

extern "C" fn prefetch(addrs: *const usize, n: usize) {
    with_addrs(addrs, n, Pager::hint);
}

extern "C" fn refine(pages: *const usize, n: usize) {
    if REFINE_AHEAD.load(Ordering::Relaxed) {
        with_addrs(pages, n, Pager::will_refine);
    }
}

extern "C" fn mark_path() -> *mut u8 {
    crate::mark_path::slot()
}

extern "C" fn release(start: usize, len: usize) {
    // A failed release only leaves garbage paged: never worth a crash.
    let _ = std::panic::catch_unwind(|| {
        if let Some(p) = pager() {
            p.release(start, len);
        }
    });
}

extern "C" fn gc_phase(phase: u32) {
    if let (Some(p), PHASE_MARK_START | PHASE_MARK_END) = (pager(), phase) {
        p.set_marking(phase == PHASE_MARK_START);
    }
    let Ok(mut m) = MARKING.lock() else { return };
    match phase {
        PHASE_MARK_START => m.started = Some(Instant::now()),
        PHASE_MARK_END => {
            if let Some(t) = m.started.take() {
                m.total_ns += t.elapsed().as_nanos() as u64;
            }
        }
        _ => {}
    }
}

/// What the hooks did, for the stats, with the agent's side of the hints (`None` without
/// prefetching). The JVM counts a marking cycle only once it has taken the table: a cycle
/// counted means the hooks were on.
pub fn doc(hints: Option<&HintCounters>, remote_while_marking: u64) -> GcHooksDoc {
    let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let hint = |f: fn(&HintCounters) -> &AtomicU64| hints.map_or(0, |h| ld(f(h)));
    let c = &COUNTERS;
    let deferred = ld(&c.deferred);
    let deferred_resident = ld(&c.deferred_resident);
    GcHooksDoc {
        on: ld(&c.mark_cycles) > 0,
        mark_cycles: ld(&c.mark_cycles),
        marking_ms: MARKING.lock().map_or(0.0, |m| m.total_ns as f64 / 1e6),
        recorded: ld(&c.recorded),
        lined_up: ld(&c.lined_up),
        concurrent_remote_while_marking: remote_while_marking,
        deferred,
        deferred_resident,
        deferred_resident_share: (deferred > 0).then(|| deferred_resident as f64 / deferred as f64),
        hinted_pages: ld(&c.hints),
        hint_pages_fetched: hint(|h| &h.fetched),
        hint_pages_dropped: hint(|h| &h.dropped),
    }
}

/// The JDK this agent runs in: the patched build's marker (written by scripts/build-jdk.sh)
/// or the `release` file's runtime version; empty when neither is found.
pub fn jdk() -> String {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return String::new();
    };
    let Some(home) = exe.parent().and_then(|bin| bin.parent()) else {
        return String::new();
    };
    if let Ok(m) = std::fs::read_to_string(home.join("memliner-jdk")) {
        return format!("{} (memliner gc-hooks)", m.trim());
    }
    std::fs::read_to_string(home.join("release"))
        .ok()
        .and_then(|r| {
            r.lines()
                .find_map(|l| l.strip_prefix("JAVA_RUNTIME_VERSION="))
                .map(|v| v.trim_matches('"').to_string())
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_speaks_this_version_and_counts_into_the_agent() {
        // SAFETY: memliner_hooks never returns null and the table is static.
        let t = unsafe { &*memliner_hooks() };
        assert_eq!(t.version, ABI_VERSION);
        assert_eq!(t.size as usize, std::mem::size_of::<Hooks>());
        // SAFETY: counters points to the static counters.
        let c = unsafe { &*t.counters };
        c.deferred.fetch_add(3, Ordering::Relaxed);
        assert!(doc(None, 0).deferred >= 3);
        assert!(
            std::ptr::eq(memliner_hooks(), t),
            "one table for every caller"
        );
        // Without a pager a hint is dropped, never a crash.
        (t.prefetch)([0x1000usize, 0x2000].as_ptr(), 2);
        (t.prefetch)(std::ptr::null(), 5);
        (t.gc_phase)(PHASE_MARK_START);
        (t.gc_phase)(PHASE_MARK_END);
        (t.gc_phase)(99);
        (t.release)(0x1000, 0x2000);
        assert_eq!(
            (t.mark_path)(),
            crate::mark_path::slot(),
            "the calling thread's byte"
        );
    }
}
