//! Registration and re-mapping: the anonymous spans of the region are registered one by one,
//! pages touched before registration are adopted, and an UNMAP event (heap shrink or expand:
//! HotSpot commits and uncommits with mmap MAP_FIXED) resets the pages of the range and
//! registers what is mapped there now.

use crate::policy::Admission;
use std::sync::atomic::Ordering;

use swap_backend::PAGE_SIZE;

use super::os;
use super::page_table::PageState;
use super::parts::Parts;
use super::reclaim::Arrival;
use super::release::forget;
use crate::maps::{self, Span};

/// `trim`: bring each adopted page under the budget at once (evicting as a fault would), for a
/// heap range the JVM re-mapped while it runs; at start the reclaimer thread trims them.
pub(super) fn register_and_adopt(
    parts: &Parts,
    start: usize,
    end: usize,
    trim: bool,
) -> std::io::Result<()> {
    let ctx = &*parts.ctx;
    let start = start.max(ctx.base);
    let end = end.min(ctx.base + ctx.npages * PAGE_SIZE);
    if start >= end {
        return Ok(());
    }
    // Do not let the kernel back the region with huge pages: faults and eviction are per
    // 4 KiB page.
    os::no_huge_pages(start, end - start);
    ctx.uffd.register(start, end - start)?;
    // A forked child (one that execs at once, as the JDK's launchers do) gets no copy of the
    // heap, so that no heap page is ever shared copy-on-write, which a pipe holding pages
    // for eviction relies on (`splice`); without UFFD_FEATURE_EVENT_FORK its copy would read
    // evicted pages as zeros anyway.
    if let Err(e) = os::dont_fork(start, end - start) {
        parts.reclaim.no_pipes(&e);
    }
    {
        let mut spans = ctx.spans.lock().unwrap();
        *spans = maps::subtract(&spans, start, end);
        spans.push(Span { start, end });
    }
    // Pages touched before registration never fault: adopt them as dirty (the store has no
    // copy of them). No peak update: the pager did not admit them. At start the reclaimer
    // brings them under budget; after a re-mapping each is brought under it here, before the
    // next: the JVM allocates into a range it has just committed while this thread reads the
    // maps, and the dozens of pages it touched meanwhile, adopted over the budget, were still
    // charged when its next faults were admitted (Shenandoah at -Xms8m, 64 re-mappings: peaks
    // 36-59 pages over the budget, 1 run in 6).
    let first = (start - ctx.base) / PAGE_SIZE;
    let resident = os::mincore_resident(start, (end - start) / PAGE_SIZE);
    for (i, r) in resident.into_iter().enumerate() {
        if r && parts.budget.adopt(first + i) {
            parts
                .reclaim
                .admit(first + i, Arrival::Adopted, Admission::Hot);
            while trim && parts.budget.charged() > parts.budget.pages() {
                if !parts.reclaim.direct(false) {
                    break; // nothing to evict now: the reclaimer thread (woken) goes on
                }
            }
        }
    }
    Ok(())
}

/// Forgets pages of an unmapped range, then registers what is mapped there now.
pub(super) fn unmapped(parts: &Parts, start: usize, end: usize) {
    let ctx = &*parts.ctx;
    let lo = start.max(ctx.base);
    let hi = end.min(ctx.base + ctx.npages * PAGE_SIZE);
    if lo >= hi {
        return;
    }
    ctx.counters.unmap_events.fetch_add(1, Ordering::Relaxed);
    let (first, last) = (
        (lo - ctx.base) / PAGE_SIZE,
        (hi - ctx.base).div_ceil(PAGE_SIZE),
    );
    let mut to_free = Vec::new();
    for p in first..last {
        // Wait out whoever has the page in flight (a write-back finishes on its own).
        let claim = loop {
            match ctx.table.get(p) {
                PageState::Busy | PageState::Writeback => std::thread::yield_now(),
                PageState::Untouched => break None,
                s => {
                    if let Some(c) = ctx.table.claim(p, s) {
                        break Some(c);
                    }
                }
            }
        };
        let Some(c) = claim else { continue };
        if forget(parts, c) {
            to_free.push(p as u64);
        }
    }
    let _ = ctx.store.free_pages(&to_free);
    {
        let mut spans = ctx.spans.lock().unwrap();
        *spans = maps::subtract(&spans, lo, hi);
    }
    // A plain munmap leaves nothing to register.
    let text = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    for span in maps::anonymous_spans(&maps::parse_maps(&text), lo, hi - lo) {
        if let Err(e) = register_and_adopt(parts, span.start, span.end, true) {
            crate::logging::log!(
                crate::options::LogLevel::Warn,
                "cannot page the remapped heap range {:#x}-{:#x}: {e}; it stays local",
                span.start,
                span.end
            );
        }
    }
    // Pages touched between the remap and the registration were adopted.
    parts.budget.wake_reclaimer();
}
