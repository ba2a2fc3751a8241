//! A stop-the-world pause's pages read in bulk, ahead of its threads: when it starts, the
//! remote pages of its young regions (it evacuates them); when it first reads an old region
//! through a card, the remote pages of every card it is about to scan (the collector merged its
//! remembered sets into the card table just before). Both lists come from the collector's own
//! structures, read by the agent (`gc_layout`) and handed in here; the pages go to the prefetch
//! workers, lowest first, admitted for the pause. When it ends, the remote pages of the cards it
//! left dirty, for the refinement threads.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use super::attribution::Attribution;
use super::context::Ctx;
use super::page_table::PageState;
use super::prefetch_io::Prefetcher;
use super::reclaim::Reclaimer;
use crate::gc_activity::{RegionKind, RegionMap, RegionSpan};

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

#[derive(Default)]
pub(super) struct PauseReads {
    cards: OnceLock<CardReader>,
    /// The pause under way has had its cards read (or should not).
    cards_done: AtomicBool,
}

impl std::fmt::Debug for PauseReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PauseReads")
            .field("cards", &self.cards.get().is_some())
            .finish()
    }
}

impl PauseReads {
    pub fn set_card_reader(&self, r: CardReader) {
        let _ = self.cards.set(r);
    }

    /// A pause starts (`read`: its pages are to be read in bulk): queues its young regions'
    /// remote pages; returns how many.
    pub fn started(&self, p: &Using<'_>, regions: &RegionMap, read: bool) -> usize {
        self.cards_done.store(!read, Ordering::SeqCst);
        if !read {
            return 0;
        }
        let spans = regions
            .spans()
            .iter()
            .filter(|s| s.kind == RegionKind::Young);
        queue(
            p,
            spans.flat_map(|s| pages_of(p, s)),
            Prefetcher::read_for_pause,
        )
    }

    /// A GC thread of the pause faults on an old or humongous region's page: the first such
    /// fault queues every page the card table says the pause will scan. Cheap after the first.
    pub fn old_region_fault(&self, p: &Using<'_>) {
        if self.cards_done.swap(true, Ordering::SeqCst) {
            return;
        }
        let Some(pages) = self.dirty_card_pages(p, p.attribution.pause_spans().iter()) else {
            return;
        };
        // Measured on a key-value cache at 25% local: three in four of the pages a pause
        // scans through cards were local when it started scanning, and two in three of its
        // card faults were on those, pushed out by the pause's own reads. They stay now.
        let local: Vec<usize> = pages
            .iter()
            .copied()
            .filter(|&q| p.ctx.table.get(q).is_mapped())
            .collect();
        p.reclaim.will_read(&local);
        queue(p, pages.into_iter(), Prefetcher::read_for_pause);
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
        let reader = self.cards.get()?;
        let old: Vec<RegionSpan> = spans
            .filter(|s| matches!(s.kind, RegionKind::Old | RegionKind::Humongous))
            .cloned()
            .collect();
        let mut addrs = Vec::new();
        reader(&old, &mut addrs)
            .then(|| addrs.into_iter().filter_map(|a| p.ctx.page_of(a)).collect())
    }
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
