//! The page table: one state per heap page, the residency map the GC hooks read, and the count
//! of pages charged against the local budget. Every state change goes through a [`Claim`]:
//! a page is claimed by a compare-and-swap to `Busy`, and the claim, when finished or dropped,
//! writes the next state, the residency byte and the budget charge in one place.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use super::bits::AtomicBits;

/// The budget: the one place that charges pages (a child, so that it alone reaches the
/// table's charging calls, which are private).
pub mod budget;

/// What the pager knows of one heap page.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::FromRepr)]
pub enum PageState {
    /// Never touched, or all zeros when last evicted: a touch zero-fills it locally.
    Untouched = 0,
    /// Only the store holds it.
    Remote = 1,
    /// Mapped write-protected, no stored copy: all zeros, or dead bytes (a released page left
    /// mapped). Evicted unwritten, it zero-fills.
    CleanZero = 2,
    /// Mapped write-protected, the stored copy is current.
    Clean = 3,
    /// Mapped writable (written, or not tracked).
    Dirty = 4,
    /// Claimed by a handler, worker or the reclaimer.
    Busy = 5,
    /// Remote, with a current copy kept here as a prefetch marker (see `prefetch_io`).
    Cached = 6,
    /// Unmapped by the reclaimer to see whether it is used; its bytes wait in a slot
    /// (see `reclaim`), and the stored copy (if any) is current.
    InactiveClean = 7,
    /// Unmapped by the reclaimer, bytes in a slot, to be written back.
    InactiveDirty = 8,
    /// An inactive dirty page the reclaimer is writing back from its slot. A fault may still
    /// take it (the slot's bytes do not change); the reclaimer then frees the slot.
    Writeback = 9,
}

impl PageState {
    /// The state a table byte holds: only ever written from a `PageState`.
    fn from_u8(v: u8) -> PageState {
        PageState::from_repr(v).unwrap_or_else(|| unreachable!("page state {v}"))
    }

    /// Mapped in the heap: touching it costs no fault.
    pub fn is_mapped(self) -> bool {
        matches!(
            self,
            PageState::CleanZero | PageState::Clean | PageState::Dirty
        )
    }

    /// Unmapped, bytes kept in a slot.
    pub fn is_inactive(self) -> bool {
        matches!(
            self,
            PageState::InactiveClean | PageState::InactiveDirty | PageState::Writeback
        )
    }

    /// Its bytes are held locally, so it counts against the budget.
    pub fn is_charged(self) -> bool {
        self.is_mapped() || self.is_inactive() || self == PageState::Cached
    }
}

/// The states and the charge count. Indexes are page numbers within the region.
pub struct PageTable {
    state: Box<[AtomicU8]>,
    /// One byte per page, 1 = remote (a touch fetches it from the store), 0 = a touch is
    /// served locally (mapped, inactive, a marker, or never touched: a zero fill): the GC
    /// hooks' view (see gc-hooks).
    residency: Box<[AtomicU8]>,
    /// The store holds a copy (current while the page is Clean, Remote, Cached or
    /// InactiveClean): a bit per page.
    stored: AtomicBits,
    /// Pages charged against the budget, claimed ones included once charged.
    charged: AtomicUsize,
    peak: AtomicUsize,
}

impl std::fmt::Debug for PageTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageTable")
            .field("pages", &self.state.len())
            .field("charged", &self.charged())
            .finish()
    }
}

impl PageTable {
    pub fn new(npages: usize) -> PageTable {
        PageTable {
            state: (0..npages)
                .map(|_| AtomicU8::new(PageState::Untouched as u8))
                .collect(),
            residency: (0..npages).map(|_| AtomicU8::new(0)).collect(),
            stored: AtomicBits::new(npages),
            charged: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }

    pub fn get(&self, p: usize) -> PageState {
        PageState::from_u8(self.state[p].load(Ordering::SeqCst))
    }

    /// Claims page `p` if it is in state `from`.
    pub fn claim(&self, p: usize, from: PageState) -> Option<Claim<'_>> {
        debug_assert_ne!(from, PageState::Busy);
        self.state[p]
            .compare_exchange(
                from as u8,
                PageState::Busy as u8,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .ok()?;
        Some(Claim {
            table: self,
            page: p,
            from,
            charged: from.is_charged(),
        })
    }

    /// Claims page `p` if its current state satisfies `want`.
    pub fn claim_if(&self, p: usize, want: impl Fn(PageState) -> bool) -> Option<Claim<'_>> {
        let s = self.get(p);
        if s == PageState::Busy || !want(s) {
            return None;
        }
        self.claim(p, s)
    }

    /// Pages charged against the budget.
    pub fn charged(&self) -> usize {
        self.charged.load(Ordering::SeqCst)
    }

    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Records the current charge as a peak candidate (after pages were admitted).
    pub fn note_peak(&self) {
        self.peak.fetch_max(self.charged(), Ordering::Relaxed);
    }

    pub fn is_stored(&self, p: usize) -> bool {
        self.stored.get(p, Ordering::SeqCst)
    }

    /// Sets whether the store holds a copy of `p`; returns the previous value.
    pub fn set_stored(&self, p: usize, v: bool) -> bool {
        self.stored.set(p, v, Ordering::SeqCst)
    }

    pub fn residency_ptr(&self) -> *const u8 {
        self.residency.as_ptr().cast()
    }

    /// Adopts an untouched page the kernel already backs (touched before registration):
    /// charged, dirty (the store has no copy). Private: only the budget (a child module)
    /// charges.
    fn adopt(&self, p: usize) -> bool {
        match self.claim(p, PageState::Untouched) {
            Some(mut c) => {
                c.charge();
                c.finish(PageState::Dirty);
                true
            }
            None => false,
        }
    }
}

/// A page held `Busy` by one owner. Finishing writes the new state; dropping it unfinished
/// puts the old state back. Either way the budget charge and the residency byte follow the
/// state written.
#[must_use = "a claim restores the page's old state when dropped"]
pub struct Claim<'a> {
    table: &'a PageTable,
    page: usize,
    from: PageState,
    charged: bool,
}

impl std::fmt::Debug for Claim<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claim")
            .field("page", &self.page)
            .field("from", &self.from)
            .finish()
    }
}

impl Claim<'_> {
    pub fn page(&self) -> usize {
        self.page
    }

    /// The state the page was claimed in.
    pub fn from(&self) -> PageState {
        self.from
    }

    /// Charges the page against the budget now, before its bytes arrive (so that the
    /// budget holds while pages are in flight), if fewer than `limit` pages are charged.
    /// Check and charge are one atomic step: concurrent chargers never overrun `limit`.
    /// Private: only the budget (a child module) calls it, as it knows each purpose's limit.
    fn try_charge(&mut self, limit: usize) -> bool {
        if !self.charged {
            self.charged = self
                .table
                .charged
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                    (n < limit).then_some(n + 1)
                })
                .is_ok();
        }
        self.charged
    }

    /// Charges the page whatever the budget (pages the kernel already backs are adopted as
    /// they are; the reclaimer trims them).
    fn charge(&mut self) {
        if !self.charged {
            self.charged = true;
            self.table.charged.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Ends the claim with the page in state `to`.
    pub fn finish(mut self, to: PageState) {
        self.write(to);
        std::mem::forget(self);
    }

    fn write(&mut self, to: PageState) {
        debug_assert_ne!(to, PageState::Busy);
        let t = self.table;
        let local = to.is_charged();
        if local != self.charged {
            if local {
                t.charged.fetch_add(1, Ordering::SeqCst);
            } else {
                t.charged.fetch_sub(1, Ordering::SeqCst);
            }
            self.charged = local;
        }
        // Remote only: a touch of any other page is served locally (an untouched page is a
        // zero fill; an inactive, cached or written-back page keeps its bytes here).
        t.residency[self.page].store(u8::from(to == PageState::Remote), Ordering::Release);
        t.state[self.page].store(to as u8, Ordering::SeqCst);
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let from = self.from;
        self.write(from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_owns_the_charge_and_rolls_back() {
        let t = PageTable::new(4);
        {
            assert!(t.claim(0, PageState::Remote).is_none());
            let mut c = t.claim(0, PageState::Untouched).unwrap();
            c.charge();
            assert_eq!(t.charged(), 1);
            assert_eq!(t.get(0), PageState::Busy);
            assert!(t.claim(0, PageState::Untouched).is_none());
        }
        // Dropped unfinished: untouched and uncharged again.
        assert_eq!(t.get(0), PageState::Untouched);
        assert_eq!(t.charged(), 0);

        let mut c = t.claim(1, PageState::Untouched).unwrap();
        c.charge();
        c.finish(PageState::Dirty);
        assert_eq!(t.charged(), 1);
        assert_eq!(t.residency[1].load(Ordering::Relaxed), 0);

        // Eviction: Dirty -> Remote uncharges.
        t.claim(1, PageState::Dirty)
            .unwrap()
            .finish(PageState::InactiveDirty);
        assert_eq!(t.charged(), 1, "inactive pages still count");
        t.claim(1, PageState::InactiveDirty)
            .unwrap()
            .finish(PageState::Remote);
        assert_eq!(t.charged(), 0);
        assert_eq!(t.residency[1].load(Ordering::Relaxed), 1);

        // A failed fetch rolls back to Remote, uncharged.
        let mut c = t.claim(1, PageState::Remote).unwrap();
        c.charge();
        drop(c);
        assert_eq!((t.get(1), t.charged()), (PageState::Remote, 0));
    }

    #[test]
    fn claim_if_skips_busy_and_unwanted_pages() {
        let t = PageTable::new(2);
        assert!(t.adopt(0));
        assert!(!t.adopt(0));
        assert!(t.claim_if(0, PageState::is_inactive).is_none());
        let c = t.claim_if(0, PageState::is_mapped).unwrap();
        assert!(t.claim_if(0, |_| true).is_none());
        drop(c);
        assert_eq!(t.get(0), PageState::Dirty);
    }
}
