//! A stop-the-world pause's pages read in bulk, ahead of its threads: when it starts, the
//! remote pages of its young regions (it evacuates them); while it scans old regions' cards,
//! the remote pages of the dirty cards just ahead of where it faults, and, where they all fit
//! in the pause's share of the prefetch, every card's it is about to scan (the collector
//! merged its remembered sets into the card table just before). The lists come from the
//! collector's own structures, read by the agent (`gc_layout`) and handed in here; the pages
//! go to the prefetch workers, admitted for the pause. When it ends, the remote pages of the
//! cards it left dirty, for the refinement threads.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use super::attribution::Attribution;
use super::bits::AtomicBits;
use super::context::Ctx;
use super::page_table::PageState;
use super::prefetch_io::Prefetcher;
use super::reclaim::Reclaimer;
use crate::gc_activity::{RegionKind, RegionMap, RegionSpan, ScanOrder};

/// The parts of the pager a pause's reads use (`Parts::for_pause_reads` lends them).
pub(super) struct Using<'a> {
    pub ctx: &'a Ctx,
    pub attribution: &'a Attribution,
    pub reclaim: &'a Reclaimer,
    /// `None` when prefetching is off.
    pub prefetch: Option<&'a Prefetcher>,
}

/// Appends the addresses of the pages of `spans` whose cards the pause will scan; `false`
/// when the collector's card table cannot be read.
pub type CardReader = Box<dyn Fn(&[RegionSpan], &mut Vec<usize>) -> bool + Send + Sync>;

/// The heap bytes (from the heap's start) whose cards one fault reads ahead: G1's smallest
/// region, and a divisor of every region size G1 picks. G1 scans a region's dirty cards from
/// its bottom up, its workers claiming chunks of it in turn, in an order of regions the agent
/// cannot read; so the first fault of a pause in a granule names what the pause scans next:
/// that granule's dirty cards above it. Reading further ahead was measured and was worse:
/// graph at 25% of 1 GiB, card-scan faults 60k reading to the granule's end, 63k to the next
/// one's, 81k three granules on; the pages read too early went out before the scan came.
pub const SCAN_AHEAD: usize = 1 << 20;

pub(super) struct PauseReads {
    cards: OnceLock<(CardReader, ScanOrder)>,
    /// The pause under way has had its whole card list read (or should not).
    cards_done: AtomicBool,
    /// Reads are on for the pause under way.
    reading: AtomicBool,
    /// One bit per `SCAN_AHEAD` granule of the heap: its cards ahead were read in the pause
    /// under way.
    scanned_ahead: AtomicBits,
}

impl std::fmt::Debug for PauseReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PauseReads")
            .field("cards", &self.cards.get().is_some())
            .finish()
    }
}

impl PauseReads {
    /// For a heap of `npages` pages.
    pub fn new(npages: usize) -> PauseReads {
        PauseReads {
            cards: OnceLock::new(),
            cards_done: AtomicBool::new(true),
            reading: AtomicBool::new(false),
            scanned_ahead: AtomicBits::new((npages * swap_backend::PAGE_SIZE).div_ceil(SCAN_AHEAD)),
        }
    }

    pub fn set_card_reader(&self, r: CardReader, order: ScanOrder) {
        let _ = self.cards.set((r, order));
    }

    /// A pause starts (`read`: its pages are to be read in bulk): its young regions' local
    /// pages are held for it (it evacuates them, reading every live object, while its copies
    /// push pages out) and their remote pages queued; returns how many were queued.
    pub fn started(&self, p: &Using<'_>, regions: &RegionMap, read: bool) -> usize {
        self.scanned_ahead.clear();
        self.cards_done.store(!read, Ordering::SeqCst);
        self.reading.store(read, Ordering::SeqCst);
        if !read {
            return 0;
        }
        let young = || {
            regions
                .of_kind(RegionKind::Young)
                .flat_map(|s| pages_of(p, s))
        };
        p.reclaim.hold_for_pause(young(), true);
        queue(p, young(), Prefetcher::read_for_pause)
    }

    /// The collector named `addrs` as pages the pause under way will read (a patched G1's
    /// mixed collection: the pages of its old regions that hold live objects, named when it
    /// has chosen them). Their regions are the pause's collection set from now on: the pages
    /// it faults in there are held until it ends, as its young regions' are (it reads an
    /// object it copied again for every reference to it; admitted cold, as a card's page is,
    /// they went out and came back over and over: graph at 25% of 256 MiB, 144k faults on
    /// 10k pages). The local ones are held for the pause, out of its own evictions, as its
    /// young regions' are; the remote ones read in bulk for it. False, with nothing done, when
    /// no pause is under way: the addresses are then a marking hint.
    pub fn named(&self, p: &Using<'_>, addrs: &[usize]) -> bool {
        if !p.attribution.collecting(addrs) {
            return false;
        }
        if self.reading.load(Ordering::Relaxed) {
            let pages: Vec<usize> = addrs.iter().filter_map(|&a| p.ctx.page_of(a)).collect();
            p.reclaim.hold_for_pause(pages.iter().copied(), false);
            queue(p, pages.into_iter(), Prefetcher::read_for_pause);
        }
        true
    }

    /// A GC thread of the pause faults on `page`, in a region that was `kind` when the pause
    /// started. Faults on old regions read cards; cheap after the first in a granule.
    ///
    /// Only old regions: G1 reads the header of every humongous object before it merges the
    /// remembered sets into the card table (whether it may reclaim the object early), so a
    /// fault there comes before the cards are there to read. Counted on graph at 25% of
    /// 1 GiB: half the pauses read their card list at such a fault and named 2k pages instead
    /// of 53k. A card scan's first faults are on old regions in every pause seen.
    pub fn gc_fault(&self, p: &Using<'_>, page: usize, kind: Option<RegionKind>) {
        if kind != Some(RegionKind::Old) || !self.reading.load(Ordering::Relaxed) {
            return;
        }
        self.read_ahead(p, page);
        // A load first: every old-region fault of the pause comes here, the swap once.
        if self.cards_done.load(Ordering::Relaxed) || self.cards_done.swap(true, Ordering::SeqCst) {
            return;
        }
        let Some(pages) = self.dirty_card_pages(p, p.attribution.pause_spans().iter()) else {
            return;
        };
        // Measured on a key-value cache at 25% local: three in four of the pages a pause
        // scans through cards were local when it started scanning, and two in three of its
        // card faults were on those, pushed out by the pause's own reads. They stay now.
        keep_local(p, &pages);
        // The remote ones, all at once where they all fit: lowest first is not the order the
        // pause scans them in (`SCAN_AHEAD`), so a list cut at the cap reads pages long before
        // their turn, and with the young regions' reads fills the budget the pause works in
        // (graph at 25% of 1 GiB: 13k remote card pages a pause; reading the lowest that fit
        // beside the scan-ahead made pauses 9.4 s in all against 7.9 s without).
        let remote = pages
            .iter()
            .filter(|&&q| p.ctx.table.get(q) == PageState::Remote)
            .count();
        if p.prefetch.is_some_and(|pf| remote <= pf.pause_room()) {
            queue(p, pages.into_iter(), Prefetcher::read_for_pause);
        }
    }

    /// The pause's first fault in `page`'s granule: queues the remote pages of the dirty cards
    /// from `page` to the granule's end in the scan's direction (its top when the scan goes
    /// up, its bottom when it goes down), ahead of every other read.
    fn read_ahead(&self, p: &Using<'_>, page: usize) {
        let g = page * swap_backend::PAGE_SIZE / SCAN_AHEAD;
        // A load first: the word is shared by the pause's threads, set once per granule.
        if self.scanned_ahead.get(g, Ordering::Relaxed)
            || self.scanned_ahead.set(g, true, Ordering::Relaxed)
        {
            return;
        }
        let at = p.ctx.page_addr(page);
        let (from, to) = match self.cards.get().map(|(_, o)| *o) {
            Some(ScanOrder::Down) => (p.ctx.base + g * SCAN_AHEAD, at + swap_backend::PAGE_SIZE),
            _ => (at, p.ctx.base + (g + 1) * SCAN_AHEAD),
        };
        let ahead = ahead_of(&p.attribution.pause_spans(), from, to);
        if let Some(pages) = self.dirty_card_pages(p, ahead.iter()) {
            queue(p, pages.into_iter(), Prefetcher::read_ahead_of_scan);
        }
    }

    /// A pause ended with the heap's regions as `after` says: on G1 it has just redirtied the
    /// cards it scanned that still point into young regions, for refinement threads to add to
    /// remembered sets. Many of their pages went out during the pause (the pause pushed them
    /// out with its own reads, while those cards read as scanned, not dirty); queues the
    /// remote ones for the refinement threads. Returns how many.
    pub fn ended(&self, p: &Using<'_>, after: &RegionMap) -> usize {
        match self.dirty_card_pages(p, after.spans().iter()) {
            Some(pages) => queue(p, pages.into_iter(), Prefetcher::read_for_cards),
            None => 0,
        }
    }

    /// The heap pages holding dirty cards in the old and humongous ones of `spans`, in address
    /// order; `None` when the card table is not read.
    fn dirty_card_pages<'s>(
        &self,
        p: &Using<'_>,
        spans: impl Iterator<Item = &'s RegionSpan>,
    ) -> Option<Vec<usize>> {
        let (reader, _) = self.cards.get()?;
        let old: Vec<RegionSpan> = spans
            .filter(|s| matches!(s.kind, RegionKind::Old | RegionKind::Humongous))
            .cloned()
            .collect();
        let mut addrs = Vec::new();
        reader(&old, &mut addrs)
            .then(|| addrs.into_iter().filter_map(|a| p.ctx.page_of(a)).collect())
    }
}

/// The mapped ones of `pages`, which the pause under way will read, get a reference each, so
/// that its own faults push out other pages first.
fn keep_local(p: &Using<'_>, pages: &[usize]) {
    let local: Vec<usize> = pages
        .iter()
        .copied()
        .filter(|&q| p.ctx.table.get(q).is_mapped())
        .collect();
    p.reclaim.will_read(&local);
}

/// The parts of `spans` within `[from, to)`.
fn ahead_of(spans: &[RegionSpan], from: usize, to: usize) -> Vec<RegionSpan> {
    spans
        .iter()
        .filter_map(|s| {
            let (start, end) = (s.start.max(from), s.end.min(to));
            (start < end).then_some(RegionSpan { start, end, ..*s })
        })
        .collect()
}

/// The heap pages of `s` (clipped to the paged heap).
fn pages_of(p: &Using<'_>, s: &RegionSpan) -> std::ops::Range<usize> {
    let ctx = &p.ctx;
    match (ctx.page_of(s.start), ctx.page_of(s.end - 1)) {
        (Some(a), Some(b)) => a..b + 1,
        _ => 0..0,
    }
}

/// Queues the remote ones of `pages` with `read` (for the pause, or for the cards it left);
/// returns how many.
fn queue(
    p: &Using<'_>,
    pages: impl Iterator<Item = usize>,
    read: fn(&Prefetcher, &mut Vec<u32>),
) -> usize {
    let Some(pf) = p.prefetch else {
        return 0;
    };
    let mut remote: Vec<u32> = pages
        .filter(|&q| p.ctx.table.get(q) == PageState::Remote)
        .map(|q| q as u32)
        .collect();
    let n = remote.len();
    read(pf, &mut remote);
    n
}
