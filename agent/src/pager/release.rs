//! Dropping ranges whose contents do not matter: a patched collector's freed regions (its
//! release hook), a stock JDK's dead space after a collection (`gc_layout`), and pages the
//! JVM unmapped. Their pages are dropped wherever they are, so reusing them zero-fills locally
//! instead of fetching garbage from the store, and no garbage is written back or keeps budget.
//!
//! A page in write-back is dropped too (its write finishes and frees the slot, and the page
//! stays dropped): left to finish, it would land remote, and the region's reuse would fetch
//! its garbage. A page another thread holds (a fetch or a deactivation in flight) is looked
//! at once more after the rest; one still held keeps whatever bytes it gets, which is as good
//! as any for a page whose contents do not matter.
//! The store's copy is left where it is and only forgotten: freeing it would race a later
//! write-back of the same page on another connection, and the store never holds more than one
//! copy per heap page anyway.

use swap_backend::PAGE_SIZE;

use super::os;
use super::page_table::{Claim, PageState};
use super::parts::Parts;

/// What dropping a range did.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Dropped {
    pub dropped: usize,
    /// Of those, pages only the store held (fetches of dead bytes saved).
    pub remote: u64,
    /// Of those, pages that were mapped (budget given back at once).
    pub mapped: usize,
}

/// Leaves a claimed page untouched (its next touch zero-fills): drops what the pager keeps of
/// it here (a prefetch marker's bytes, an inactive page's slot, its place on the lists) and
/// forgets the store's copy; returns whether the store had one. A mapped page must be
/// discarded first.
pub(super) fn forget(parts: &Parts, c: Claim<'_>) -> bool {
    let p = c.page();
    if c.from() == PageState::Cached {
        if let Some(pf) = &parts.prefetch {
            pf.drop_marker(p);
        }
    }
    parts.reclaim.forget(p, c.from());
    c.finish(PageState::Untouched);
    parts.ctx.table.set_stored(p, false)
}

/// Drops the pages wholly inside `[start, start + len)`. The caller promises that nobody
/// touches the range until this returns (the JVM frees a region before reusing it; a stock
/// JDK's dead space is read at the safepoint that ends a collection).
pub(super) fn drop_range(parts: &Parts, start: usize, len: usize) -> Dropped {
    let ctx = &*parts.ctx;
    let lo = start.max(ctx.base).next_multiple_of(PAGE_SIZE);
    let hi = (start.saturating_add(len)).min(ctx.base + ctx.npages * PAGE_SIZE);
    if lo >= hi {
        return Dropped::default();
    }
    let (first, last) = ((lo - ctx.base) / PAGE_SIZE, (hi - ctx.base) / PAGE_SIZE);
    let mut out = Dropped::default();
    let held = drop_pages(parts, first..last, &mut out);
    // A second look at the pages another thread held: most were being unmapped by the
    // reclaimer, which is often done by now. Left alone they would be written back, and the
    // region's reuse would fetch their garbage. (Pages still held are left: a fetch lands
    // local, and is reclaimed as any page is.)
    if !held.is_empty() {
        drop_pages(parts, held.into_iter(), &mut out);
    }
    out
}

/// Drops `pages` that nobody holds, adding to `out`; returns those another thread held.
fn drop_pages(parts: &Parts, pages: impl Iterator<Item = usize>, out: &mut Dropped) -> Vec<usize> {
    let ctx = &*parts.ctx;
    let mut held = Vec::new();
    let mut mapped: Vec<Claim<'_>> = Vec::new();
    for p in pages {
        let Some(c) = ctx.table.claim_if(p, |s| s != PageState::Untouched) else {
            if ctx.table.get(p) == PageState::Busy {
                held.push(p);
            }
            continue;
        };
        if c.from().is_mapped() {
            mapped.push(c);
            continue;
        }
        out.remote += u64::from(c.from() == PageState::Remote);
        forget(parts, c);
        out.dropped += 1;
    }
    if mapped.is_empty() {
        return held;
    }
    let pages: Vec<usize> = mapped.iter().map(Claim::page).collect();
    match ctx.discard(&os::runs(ctx.base, &pages)) {
        Ok(()) => {
            out.dropped += mapped.len();
            out.mapped += mapped.len();
            for c in mapped {
                forget(parts, c);
            }
        }
        // The claims drop: the pages stay as they were, correct, only not released.
        Err(e) => crate::logging::log!(
            crate::options::LogLevel::Warn,
            "cannot discard released heap pages: {e}"
        ),
    }
    held
}
