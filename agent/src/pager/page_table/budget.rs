//! The local budget: the only place that charges a page against it, by one rule per purpose,
//! and the free reserve the reclaimer keeps (its watermarks).
//!
//! A page is charged while its claim is held, before its bytes arrive, so the budget holds
//! while pages are in flight; the claim (see `page_table`) gives the charge back when the page
//! leaves. Check and charge are one atomic step: concurrent chargers never overrun a limit.
//!
//! | purpose | limit | when full |
//! |---|---|---|
//! | a demand fault, a GC hint | the budget | the caller reclaims directly, then retries |
//! | a stream's prefetch | the budget less the low watermark | the window is dropped |
//! | a zero fill ahead of a write | the budget | the run stops there |
//!
//! The reclaimer keeps `budget - charged` between the low and high watermarks: any charge that
//! leaves fewer than `low` free wakes it.

use std::sync::{Arc, OnceLock};

use super::super::context::Ctx;
use super::Claim;

/// Why a page is charged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::pager) enum Charge {
    /// A fault waits for it (or the GC will certainly read it: a hint).
    Demand,
    /// A stream's guess: it never takes the reserve demand faults are served from.
    Prefetch,
    /// Zero-filled ahead of an allocating write: only while there is room.
    FillAhead,
}

pub(in crate::pager) struct Budget {
    ctx: Arc<Ctx>,
    pages: usize,
    /// Free pages below which the reclaimer is woken, and up to which it reclaims.
    pub low: usize,
    pub high: usize,
    reclaimer: OnceLock<std::thread::Thread>,
}

impl Budget {
    pub fn new(ctx: Arc<Ctx>) -> Budget {
        let (pages, npages) = (ctx.config.budget_pages, ctx.npages);
        // A small reserve (1/256 of the budget, 64 pages to 8 MiB, at most an eighth of a small
        // budget): the kernel keeps none in a memory cgroup, and every page of it is a page of
        // the working set evicted early; 64 pages absorb what the JVM touches between a heap
        // re-mapping and its registration (adopted over the budget). A budget that holds the
        // whole region needs none: evicting would only bring pages back.
        let (low, high) = if pages >= npages {
            (0, 0)
        } else {
            let low = (pages / 256).clamp(64, 2048).min(pages / 8).max(1);
            (low, (low * 2).min(pages / 2).max(low))
        };
        Budget {
            ctx,
            pages,
            low,
            high,
            reclaimer: OnceLock::new(),
        }
    }

    pub fn pages(&self) -> usize {
        self.pages
    }

    pub fn set_reclaimer(&self, t: std::thread::Thread) {
        let _ = self.reclaimer.set(t);
    }

    /// Wakes the reclaimer thread.
    pub fn wake_reclaimer(&self) {
        if let Some(t) = self.reclaimer.get() {
            t.unpark();
        }
    }

    /// Pages charged now.
    pub fn charged(&self) -> usize {
        self.ctx.table.charged()
    }

    /// Free pages in the budget.
    pub fn free(&self) -> usize {
        self.pages.saturating_sub(self.charged())
    }

    /// Speculative pages the reserve has room for.
    pub fn room(&self) -> usize {
        self.free().saturating_sub(self.low)
    }

    /// Whether the reserve has room for `n` more speculative pages.
    pub fn has_room_for(&self, n: usize) -> bool {
        self.free() >= self.low + n
    }

    /// Charges claimed page `c` for `why`, within that purpose's limit; wakes the reclaimer
    /// when the reserve runs low. `false`: no room now (the claim stays uncharged).
    pub fn charge(&self, c: &mut Claim<'_>, why: Charge) -> bool {
        let limit = match why {
            Charge::Demand | Charge::FillAhead => self.pages,
            Charge::Prefetch => self.pages.saturating_sub(self.low),
        };
        let ok = c.try_charge(limit);
        if self.ctx.table.charged() + self.low > self.pages {
            self.wake_reclaimer();
        }
        ok
    }

    /// Charges a page the kernel already backs (touched before registration), whatever the
    /// budget: the reclaimer trims it.
    pub fn adopt(&self, p: usize) -> bool {
        let adopted = self.ctx.table.adopt(p);
        if adopted && self.ctx.table.charged() + self.low > self.pages {
            self.wake_reclaimer();
        }
        adopted
    }

    /// Records the current charge as a peak candidate (after pages were admitted).
    pub fn note_peak(&self) {
        self.ctx.table.note_peak();
    }

    /// Whether any reclaim is needed at all (the budget is smaller than the region).
    pub fn pages_can_run_short(&self) -> bool {
        self.high > 0
    }
}
