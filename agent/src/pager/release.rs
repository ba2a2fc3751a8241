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
//!
//! A clean page left mapped forgets the store's copy: its eviction, unwritten, then drops it
//! like a page of zeros, instead of leaving its garbage remote for the region's reuse to fetch.
//!
//! # Mapped pages only when the budget is short
//! Dropping a mapped page gives its budget back, but the JVM reuses free regions for new
//! objects: the reuse then costs a zero-fill fault, where the page left mapped is reused in
//! place for nothing (and the discard costs a TLB shootdown per batch). The budget given back
//! is worth that only when the budget is short ([`Room`]). With room to spare (a budget the
//! size of the heap, say), mapped dead pages stay as they are: measured on kv with the whole
//! 1 GiB heap local, dropping them cost 1.2x the wall of a run without the agent.

use std::sync::atomic::{AtomicU64, Ordering};

use swap_backend::PAGE_SIZE;

use super::context::Ctx;
use super::os;
use super::page_table::budget::Budget;
use super::page_table::{Claim, PageState};
use super::parts::Parts;

/// What a drop does with the pages that are mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mapped {
    /// Discarded: budget given back now, a zero-fill fault when the JVM reuses the page.
    Drop,
    /// Left as they are: the JVM reuses them in place, or the reclaimer evicts them as any.
    Leave,
}

/// Whether the budget is short enough that dropping mapped dead pages pays. A budget that holds
/// the whole heap never is. A smaller one is, unless it has been short before (pages were
/// evicted) but no page was evicted since the last collection ended and an eighth of it is
/// free: the JVM has been running within it. Before the first eviction it counts as short: a
/// heap still filling up soon runs out, and a dead page left mapped then is written back as
/// garbage and fetched again when a pause copies into its region.
#[derive(Debug, Default)]
pub(super) struct Room {
    /// Pages evicted when the last collection ended.
    evicted_then: AtomicU64,
}

impl Room {
    /// What drops now do with mapped pages.
    pub fn mapped(&self, ctx: &Ctx, budget: &Budget) -> Mapped {
        let evicted = ctx.counters.evicted();
        let short = budget.pages_can_run_short()
            && (evicted == 0
                || evicted != self.evicted_then.load(Ordering::Relaxed)
                || budget.free() < budget.pages() / 8);
        if short {
            Mapped::Drop
        } else {
            Mapped::Leave
        }
    }

    /// A collection ended (after its dead space was dropped).
    pub fn collection_ended(&self, ctx: &Ctx) {
        self.evicted_then
            .store(ctx.counters.evicted(), Ordering::Relaxed);
    }
}

/// What dropping a range did.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Dropped {
    pub dropped: usize,
    /// Of those, pages only the store held (fetches of dead bytes saved).
    pub remote: u64,
    /// Of those, pages that were mapped (budget given back at once).
    pub mapped: usize,
    /// Pages left mapped ([`Mapped::Leave`]), not counted in `dropped`.
    pub left_mapped: usize,
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
pub(super) fn drop_range(parts: &Parts, start: usize, len: usize, mapped: Mapped) -> Dropped {
    let ctx = &*parts.ctx;
    let lo = start.max(ctx.base).next_multiple_of(PAGE_SIZE);
    let hi = (start.saturating_add(len)).min(ctx.base + ctx.npages * PAGE_SIZE);
    if lo >= hi {
        return Dropped::default();
    }
    let (first, last) = ((lo - ctx.base) / PAGE_SIZE, (hi - ctx.base) / PAGE_SIZE);
    let mut out = Dropped::default();
    let held = drop_pages(parts, first..last, mapped, &mut out);
    // A second look at the pages another thread held: most were being unmapped by the
    // reclaimer, which is often done by now. Left alone they would be written back, and the
    // region's reuse would fetch their garbage. (Pages still held are left: a fetch lands
    // local, and is reclaimed as any page is.)
    if !held.is_empty() {
        drop_pages(parts, held.into_iter(), mapped, &mut out);
    }
    out
}

/// Drops `pages` that nobody holds, adding to `out`; returns those another thread held.
fn drop_pages(
    parts: &Parts,
    pages: impl Iterator<Item = usize>,
    what: Mapped,
    out: &mut Dropped,
) -> Vec<usize> {
    let ctx = &*parts.ctx;
    let mut held = Vec::new();
    let mut mapped: Vec<Claim<'_>> = Vec::new();
    let leave = what == Mapped::Leave;
    // Left mapped, a clean page is still claimed: its store copy is forgotten (below).
    let left_as_is = |s: PageState| leave && matches!(s, PageState::CleanZero | PageState::Dirty);
    for p in pages {
        let wanted = |s: PageState| s != PageState::Untouched && !left_as_is(s);
        let Some(c) = ctx.table.claim_if(p, wanted) else {
            match ctx.table.get(p) {
                PageState::Busy => held.push(p),
                s if left_as_is(s) => out.left_mapped += 1,
                _ => {}
            }
            continue;
        };
        if c.from().is_mapped() {
            if leave {
                // Clean (`left_as_is` passes the others by), its bytes dead: without the
                // store's copy, its eviction unwritten drops it (the next touch zero-fills)
                // instead of leaving it remote for the region's reuse to fetch garbage (a
                // pause copying into the region: `copy_destination`). A dirty page cannot be
                // told from one the JVM writes after reusing it: it stays as is.
                ctx.table.set_stored(p, false);
                c.finish(PageState::CleanZero);
                out.left_mapped += 1;
            } else {
                mapped.push(c);
            }
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
