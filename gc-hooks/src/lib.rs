//! The C ABI between the memliner agent and GC-hook patched HotSpot builds.
//!
//! The patched JVM (gc-hooks/hotspot/jdk17) looks up [`HOOKS_SYMBOL`] in the loaded agent
//! libraries when concurrent marking first starts and checks the table's version; without the
//! agent, or with another version, its hooks stay off. This crate holds the types both sides
//! agree on; the matching C declarations are in `include/memliner.h` and must change together
//! with them (the layout test below pins the offsets the header promises).

// Unsafe here: the C ABI shared with HotSpot: raw pointers read by both sides; each block says why it is sound.
#![allow(unsafe_code)]

use std::sync::atomic::AtomicU64;

/// Bumped on any incompatible change of the structures below.
pub const ABI_VERSION: u32 = 2;

/// Name of the exported function returning the hooks table (`memliner_hooks`).
pub const HOOKS_SYMBOL: &str = "memliner_hooks";

/// Name of the exported function returning the heap view (`memliner_heap_view`).
pub const HEAP_VIEW_SYMBOL: &str = "memliner_heap_view";

/// `gc_phase` events.
pub const PHASE_MARK_START: u32 = 1;
pub const PHASE_MARK_END: u32 = 2;

/// Marking paths a concurrent GC thread writes to its `mark_path` byte (G1's names).
pub mod mark_path {
    /// None reported: other work of the thread.
    pub const NONE: u8 = 0;
    /// Scanning the root regions (survivors) marking starts at.
    pub const ROOT_REGIONS: u8 = 1;
    /// Draining the store log (SATB buffers).
    pub const STORE_LOG: u8 = 2;
    /// Tracing objects popped from the mark stack, or stolen.
    pub const STACK: u8 = 3;
    /// Tracing a slice of a large object array.
    pub const ARRAY_SLICE: u8 = 4;
    /// Walking a region's mark bitmap past the finger.
    pub const BITMAP_WALK: u8 = 5;
    /// Tracing the objects marking deferred (page remote).
    pub const DEFERRED: u8 = 6;
    /// Rebuilding remembered sets after remark.
    pub const REBUILD: u8 = 7;
    /// Each with its name in `memliner.h` (`MEMLINER_MARK_<name>`).
    pub const ALL: [(u8, &str); 8] = [
        (NONE, "NONE"),
        (ROOT_REGIONS, "ROOT_REGIONS"),
        (STORE_LOG, "STORE_LOG"),
        (STACK, "STACK"),
        (ARRAY_SLICE, "ARRAY_SLICE"),
        (BITMAP_WALK, "BITMAP_WALK"),
        (DEFERRED, "DEFERRED"),
        (REBUILD, "REBUILD"),
    ];
}

/// What the patched collector counts. The agent owns the storage; the JVM adds with relaxed
/// atomic increments (`AtomicU64` has the layout of `uint64_t`).
#[repr(C)]
#[derive(Debug, Default)]
pub struct HookCounters {
    /// Entries of the application threads' store log (their SATB queues: the references
    /// their stores overwrote and, with the hooks, the references they stored) that
    /// concurrent marking processed.
    pub recorded: AtomicU64,
    /// Of those, objects marking had not reached yet: marked and traced from there, where
    /// the application is.
    pub lined_up: AtomicU64,
    /// Objects deferred because their page was not resident (an object deferred again after
    /// its marking step was aborted counts again).
    pub deferred: AtomicU64,
    /// Of those, found resident when traced at last.
    pub deferred_resident: AtomicU64,
    /// Pages hinted to the agent.
    pub hints: AtomicU64,
    /// Concurrent marking cycles with the hooks on.
    pub mark_cycles: AtomicU64,
}

/// The table the agent exports: its version and size first, so that a JVM built against
/// another version can tell without reading further.
#[repr(C)]
#[derive(Debug)]
pub struct Hooks {
    pub version: u32,
    pub size: u32,
    pub heap_view: extern "C" fn() -> *const HeapView,
    /// The GC will read these addresses soon: marking's deferred objects (fetched for the GC
    /// stream, cold), or, during a pause, a mixed collection's old regions (read for the
    /// pause, their regions its collection set).
    pub prefetch: extern "C" fn(addrs: *const usize, n: usize),
    pub gc_phase: extern "C" fn(phase: u32),
    pub counters: *const HookCounters,
    /// The collector freed `[start, start + len)`: nothing there is read again before it is
    /// written. Called before the range is reused; returns when the pages are dropped.
    pub release: extern "C" fn(start: usize, len: usize),
    /// A refinement pass is about to read these pages (its cards' and, on G1, those it walks
    /// through to reach a card from the block before it), in this order (each page once): the
    /// remote ones are read in the calling thread, in one request, before it
    /// returns (blocking for that read, as the pass's first fault would).
    pub refine: extern "C" fn(pages: *const usize, n: usize),
    /// The calling thread's marking-path byte (a [`mark_path`] value), valid for the
    /// thread's life: a concurrent marking thread stores the path it is on there, and the
    /// agent counts its remote faults under it. Appended to version 2: a JVM calls it only
    /// where `size` covers it.
    pub mark_path: extern "C" fn() -> *mut u8,
}

// SAFETY: the table is immutable; `counters` points to atomics that live for the process.
unsafe impl Sync for Hooks {}
// SAFETY: as above.
unsafe impl Send for Hooks {}

/// The agent's view of the paged heap, valid from VMInit until the process exits.
///
/// `residency[i] == 0` means a touch of heap page `i` (at `base + (i << page_shift)`) is served
/// locally (the page is mapped, kept in a local slot, or never touched: a zero fill). Any other
/// value means the page is remote: a touch fetches it over the network. Plain byte loads are
/// enough: the map is a hint, never a guarantee, since the pager may evict right after the load.
#[repr(C)]
#[derive(Debug)]
pub struct HeapView {
    pub abi_version: u32,
    pub page_shift: u32,
    pub base: usize,
    pub pages: usize,
    pub residency: *const u8,
}

// SAFETY: the view only holds addresses; the bytes behind `residency` are atomics owned by the
// pager and live for the rest of the process.
unsafe impl Sync for HeapView {}
// SAFETY: as above.
unsafe impl Send for HeapView {}

impl HeapView {
    /// Whether the page holding `addr` is resident (false outside the heap).
    ///
    /// # Safety
    /// `self.residency` must point to `self.pages` readable bytes.
    pub unsafe fn is_resident(&self, addr: usize) -> bool {
        if addr < self.base {
            return false;
        }
        let i = (addr - self.base) >> self.page_shift;
        // SAFETY: bounds checked; the caller guarantees the map's size.
        i < self.pages && unsafe { std::ptr::read_volatile(self.residency.add(i)) } == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    #[test]
    fn layout_matches_the_c_header() {
        assert_eq!(offset_of!(HeapView, abi_version), 0);
        assert_eq!(offset_of!(HeapView, page_shift), 4);
        assert_eq!(offset_of!(HeapView, base), 8);
        assert_eq!(offset_of!(HeapView, pages), 16);
        assert_eq!(offset_of!(HeapView, residency), 24);
        assert_eq!(offset_of!(Hooks, version), 0);
        assert_eq!(offset_of!(Hooks, size), 4);
        assert_eq!(offset_of!(Hooks, heap_view), 8);
        assert_eq!(offset_of!(Hooks, prefetch), 16);
        assert_eq!(offset_of!(Hooks, gc_phase), 24);
        assert_eq!(offset_of!(Hooks, counters), 32);
        assert_eq!(offset_of!(Hooks, release), 40);
        assert_eq!(offset_of!(Hooks, refine), 48);
        assert_eq!(offset_of!(Hooks, mark_path), 56);
        assert_eq!(std::mem::size_of::<Hooks>(), 64);
        let counters = [
            (offset_of!(HookCounters, recorded), "recorded"),
            (offset_of!(HookCounters, lined_up), "lined_up"),
            (offset_of!(HookCounters, deferred), "deferred"),
            (
                offset_of!(HookCounters, deferred_resident),
                "deferred_resident",
            ),
            (offset_of!(HookCounters, hints), "hints"),
            (offset_of!(HookCounters, mark_cycles), "mark_cycles"),
        ];
        let header = include_str!("../include/memliner.h");
        for (offset, name) in counters {
            // e.g. "uint64_t hints; /* offset 32:" (aligned with spaces in the header)
            let line = header
                .lines()
                .find(|l| l.contains(&format!(" {name};")))
                .unwrap_or_else(|| panic!("memliner.h has no counter {name}"));
            assert!(
                line.contains(&format!("/* offset {offset}:")),
                "memliner.h puts {name} elsewhere than offset {offset}: {line}"
            );
        }
        assert!(header.contains(&format!("#define MEMLINER_ABI_VERSION {ABI_VERSION}")));
        assert!(header.contains(&format!(
            "#define MEMLINER_PHASE_MARK_START {PHASE_MARK_START}"
        )));
        assert!(header.contains(&format!("#define MEMLINER_PHASE_MARK_END {PHASE_MARK_END}")));
        for (value, name) in mark_path::ALL {
            let define = format!("#define MEMLINER_MARK_{name} {value} ");
            assert!(header.contains(&define), "memliner.h lacks {define}");
        }
        assert!(header.contains("uint8_t *(*mark_path)(void);"));
        assert!(header.contains(&format!("\"{HOOKS_SYMBOL}\"")));
        assert!(header.contains(&format!("\"{HEAP_VIEW_SYMBOL}\"")));
    }

    #[test]
    fn residency_lookup() {
        let map = [0u8, 1, 0];
        let v = HeapView {
            abi_version: ABI_VERSION,
            page_shift: 12,
            base: 0x10000,
            pages: 3,
            residency: map.as_ptr(),
        };
        // SAFETY: map has `pages` bytes.
        unsafe {
            assert!(v.is_resident(0x10000));
            assert!(!v.is_resident(0x11000));
            assert!(v.is_resident(0x12fff));
            assert!(!v.is_resident(0x13000));
            assert!(!v.is_resident(0x0));
        }
    }
}
