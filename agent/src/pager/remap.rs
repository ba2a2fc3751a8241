//! Registration and re-mapping: the anonymous spans of the region are registered one by one,
//! pages touched before registration are adopted, and an UNMAP event (heap shrink or expand:
//! HotSpot commits and uncommits with mmap MAP_FIXED) resets the pages of the range and
//! registers what is mapped there now.

use std::sync::atomic::Ordering;

use swap_backend::PAGE_SIZE;

use super::os;
use super::page_table::{Claim, PageState};
use super::Shared;
use crate::maps::{self, Span};
use crate::policy::Admission;

impl Shared {
    pub(super) fn register_and_adopt(&self, start: usize, end: usize) -> std::io::Result<()> {
        let start = start.max(self.base);
        let end = end.min(self.base + self.npages * PAGE_SIZE);
        if start >= end {
            return Ok(());
        }
        // Do not let the kernel back the region with huge pages: faults and eviction are per
        // 4 KiB page.
        // SAFETY: advice only; changes no contents.
        unsafe { libc::madvise(start as *mut _, end - start, libc::MADV_NOHUGEPAGE) };
        self.uffd.register(start, end - start)?;
        {
            let mut spans = self.spans.lock().unwrap();
            *spans = maps::subtract(&spans, start, end);
            spans.push(Span { start, end });
        }
        // Pages touched before registration never fault: adopt them as dirty (the store has
        // no copy of them). No peak update: the pager did not admit them; the reclaimer
        // brings them under budget.
        let first = (start - self.base) / PAGE_SIZE;
        let resident = os::mincore_resident(start, (end - start) / PAGE_SIZE);
        for (i, r) in resident.into_iter().enumerate() {
            if r && self.table.adopt(first + i) {
                self.reclaim.admit(first + i, Admission::Hot, false);
            }
        }
        Ok(())
    }

    /// Leaves a claimed page untouched (its next touch zero-fills): drops what the pager keeps
    /// of it here (a prefetch marker's bytes, an inactive page's slot) and forgets the store's
    /// copy; returns whether the store had one. A mapped page must be discarded first.
    pub(super) fn forget(&self, c: Claim<'_>) -> bool {
        let p = c.page();
        match c.from() {
            PageState::Cached => self.drop_marker_data(p),
            PageState::InactiveClean | PageState::InactiveDirty => self.reclaim.forget_inactive(p),
            _ => {}
        }
        c.finish(PageState::Untouched);
        self.table.set_stored(p, false)
    }

    /// Forgets pages of an unmapped range, then registers what is mapped there now.
    pub(super) fn unmapped(&self, start: usize, end: usize) {
        let lo = start.max(self.base);
        let hi = end.min(self.base + self.npages * PAGE_SIZE);
        if lo >= hi {
            return;
        }
        self.counters.unmap_events.fetch_add(1, Ordering::Relaxed);
        let (first, last) = (
            (lo - self.base) / PAGE_SIZE,
            (hi - self.base).div_ceil(PAGE_SIZE),
        );
        let mut to_free = Vec::new();
        for p in first..last {
            // Wait out whoever has the page in flight (a write-back finishes on its own).
            let claim = loop {
                match self.table.get(p) {
                    PageState::Busy | PageState::Writeback => std::thread::yield_now(),
                    PageState::Untouched => break None,
                    s => {
                        if let Some(c) = self.table.claim(p, s) {
                            break Some(c);
                        }
                    }
                }
            };
            let Some(c) = claim else { continue };
            if self.forget(c) {
                to_free.push(p as u64);
            }
        }
        let _ = self.store.free_pages(&to_free);
        {
            let mut spans = self.spans.lock().unwrap();
            *spans = maps::subtract(&spans, lo, hi);
        }
        // A plain munmap leaves nothing to register.
        let text = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        for span in maps::anonymous_spans(&maps::parse_maps(&text), lo, hi - lo) {
            if let Err(e) = self.register_and_adopt(span.start, span.end) {
                crate::log!(
                    crate::options::LogLevel::Warn,
                    "cannot page the remapped heap range {:#x}-{:#x}: {e}; it stays local",
                    span.start,
                    span.end
                );
            }
        }
        // Pages touched between the remap and the registration were adopted.
        self.reclaim.wake();
    }
}
