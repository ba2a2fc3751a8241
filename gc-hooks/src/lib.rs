//! The C ABI between the memliner agent and GC-hook patched HotSpot builds.
//!
//! A patched collector finds the agent's exported symbols with `dlsym` at VM start; without the
//! agent the hooks are no-ops. This crate holds the types both sides agree on; the matching C
//! declarations are in `include/memliner.h` and must change together with them (the layout
//! test below pins the offsets the header promises).

#![deny(missing_debug_implementations)]

/// Bumped on any incompatible change of the structures below.
pub const ABI_VERSION: u32 = 1;

/// Name of the exported function returning the heap view (`memliner_heap_view`).
pub const HEAP_VIEW_SYMBOL: &str = "memliner_heap_view";

/// The agent's view of the paged heap, valid from VMInit until the process exits.
///
/// `residency[i] == 0` means heap page `i` (at `base + (i << page_shift)`) is resident: a GC
/// tracer may read it without a fault. Any other value means a touch would fault (and likely
/// fetch the page over the network). Plain byte loads are enough: the map is a hint, never a
/// guarantee, since the pager may evict right after the load.
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
        let header = include_str!("../include/memliner.h");
        assert!(header.contains(&format!("#define MEMLINER_ABI_VERSION {ABI_VERSION}")));
        assert!(header.contains(HEAP_VIEW_SYMBOL));
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
