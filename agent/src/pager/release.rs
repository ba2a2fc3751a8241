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
//! A written one can be made the same only by write-protecting it ([`Mapped::Protect`], for
//! freed young regions that eden is about to reuse).
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
    /// Left mapped but write-protected, their bytes forgotten (`CleanZero`): the JVM reuses
    /// them with one write fault per run and no zero fill, and the reclaimer drops those it
    /// evicts first without a write-back (a dirty page left as is would be written back as
    /// garbage and fetched again on reuse). For regions the JVM is about to reuse: freed
    /// young regions, which G1 hands out again as eden.
    Protect,
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
    /// Pages of young regions when the pause under way started.
    young_then: AtomicU64,
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

    /// A pause started with `pages` of young regions (eden and survivors).
    pub fn pause_started(&self, young_pages: usize) {
        self.young_then.store(young_pages as u64, Ordering::Relaxed);
    }

    /// Whether the young regions a pause frees are left mapped write-protected
    /// ([`Mapped::Protect`]) rather than discarded, when the budget is short: G1 hands them out
    /// again as eden (the free list's highest regions first), so they are reused within a
    /// mutator interval, unless the reclaimer turns the budget over faster than that. Left
    /// mapped, a dead page holds budget until its reuse; the reclaimer then evicts live pages
    /// in its place, or the dead one before its reuse, which costs a zero fill anyway. So they
    /// stay only where the last interval evicted fewer than half the pages the young regions
    /// hold. Measured at 25% of 1 GiB: Spark KMeans evicted ~600 pages an interval against
    /// 27k young, and protecting made 3.9M zero-filled pages 15k write faults; KvCache evicted
    /// 38k against 12.5k, and protecting cost it 12% more remote reads; connected components
    /// (15k against 24k) gained nothing either way.
    pub fn keeps_young(&self, ctx: &Ctx) -> bool {
        let evicted = ctx.counters.evicted() - self.evicted_then.load(Ordering::Relaxed);
        evicted.saturating_mul(2) < self.young_then.load(Ordering::Relaxed)
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
    /// Pages left mapped ([`Mapped::Leave`], [`Mapped::Protect`]), not counted in `dropped`.
    pub left_mapped: usize,
    /// Of those, dirty pages write-protected ([`Mapped::Protect`]).
    pub protected: usize,
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
    // Left mapped, a clean page is still claimed: its store copy is forgotten (below).
    let left_as_is = |s: PageState| match what {
        Mapped::Drop => false,
        Mapped::Leave => matches!(s, PageState::CleanZero | PageState::Dirty),
        Mapped::Protect => s == PageState::CleanZero,
    };
    let mut written: Vec<Claim<'_>> = Vec::new();
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
            if what == Mapped::Protect && c.from() == PageState::Dirty {
                written.push(c);
            } else if what != Mapped::Drop {
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
    protect(parts, written, out);
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

/// Write-protects the claimed dirty pages `written` (dead bytes) and leaves them `CleanZero`,
/// adding to `out`. Where the kernel refuses (an unread event is changing the mm) the claims
/// drop and the pages stay dirty: correct, only not released.
fn protect(parts: &Parts, written: Vec<Claim<'_>>, out: &mut Dropped) {
    if written.is_empty() {
        return;
    }
    let ctx = &*parts.ctx;
    let pages: Vec<usize> = written.iter().map(Claim::page).collect();
    for (s, l) in os::runs(ctx.base, &pages) {
        match ctx.uffd.write_protect(s, l, true, false) {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                crate::logging::log!(
                    crate::options::LogLevel::Warn,
                    "cannot write-protect released heap pages: {e}"
                );
                return;
            }
        }
    }
    out.left_mapped += written.len();
    out.protected += written.len();
    for c in written {
        ctx.table.set_stored(c.page(), false);
        c.finish(PageState::CleanZero);
    }
}
