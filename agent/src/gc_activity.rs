//! What a GC thread was doing when it read a remote page: the collector's activities as the
//! stats document names them, and the classification of a stop-the-world pause's remote
//! faults once the pause has ended. A leaf module: pure, tested without a JVM.
//!
//! Concurrent threads say what they do by their names (`G1 Conc#` marks, `G1 Refine#`
//! refines). A pause's GC workers do not: what one of their faults was for is told by where
//! the page lies and by what the pause did with it, which is only known at its end:
//! - a page of a young region (eden, survivor) at the pause's start: evacuation of the young
//!   collection set;
//! - a page of an old region the pause freed: the region was in the collection set (a mixed
//!   collection evacuated it);
//! - a page of an old region the pause kept: read through a dirty card, a remembered set or a
//!   root into that region (G1 scans the cards of old regions that point into the collection
//!   set; it never evacuates a region it keeps);
//! - a page of a humongous region: a large object's cards scanned, or its eager reclaim;
//! - a page of a region free at the pause's start: the pause copied objects into it (G1 takes
//!   its survivor and old destinations from the free regions) and found it remote: pushed out
//!   since the pause filled part of it, or holding dead bytes the store kept;
//! - the pause was a full collection, or G1's remark or cleanup: the whole pause is that.
//!
//! Nothing here guesses: a page whose region was not known at the pause's start (no reader of
//! the collector's layout, a concurrent collector's collection set) is `pause_other`.

pub use memliner_contracts::model::GcActivity;

/// What a region of the heap was at a pause's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionKind {
    /// Eden and survivor regions (G1), eden and survivor spaces (Parallel, Serial).
    Young,
    /// Old regions (G1, archive regions included), the old generation (Parallel, Serial).
    Old,
    /// Humongous regions (G1): one large object each.
    Humongous,
    /// Free regions.
    Free,
    /// Regions a concurrently evacuating collector (Shenandoah) is collecting.
    CollectionSet,
}

/// A run of heap bytes of one kind, `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionSpan {
    pub start: usize,
    pub end: usize,
    pub kind: RegionKind,
}

/// Which way a pause's threads walk an old region's cards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanOrder {
    /// From low addresses up (G1, a region at a time).
    Up,
    /// From high addresses down (Serial: its card iteration runs from the space's top).
    Down,
}

/// The heap's regions at a pause's start, sorted by address, adjacent spans of one kind
/// merged (a G1 heap of 2,048 regions is a few dozen spans).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegionMap {
    spans: Vec<RegionSpan>,
    /// The collector evacuates concurrently and the map holds its collection set: its
    /// concurrent threads' work is told from it (`concurrent_activity`).
    concurrent_cset: bool,
    /// The collector's region size in bytes, its regions aligned to it (G1); 0: not known.
    grain: usize,
}

impl RegionMap {
    /// The collection set (`CollectionSet` spans, possibly none) of a collector that
    /// evacuates concurrently (Shenandoah), read at the end of one of its pauses.
    pub fn concurrent(spans: Vec<RegionSpan>) -> RegionMap {
        RegionMap {
            concurrent_cset: true,
            ..RegionMap::new(spans)
        }
    }

    /// What a concurrent GC thread reading `addr` does, while this map (from the last pause's
    /// end) holds: with a collection set, a page in it is being evacuated and any other is
    /// read to update its references; without one the collector is marking. `None`: the map
    /// does not tell (a collector that evacuates in pauses only).
    pub fn concurrent_activity(&self, addr: usize) -> Option<GcActivity> {
        if !self.concurrent_cset {
            return None;
        }
        let cset = self
            .spans
            .iter()
            .any(|s| s.kind == RegionKind::CollectionSet);
        Some(match self.kind_at(addr) {
            Some(RegionKind::CollectionSet) => GcActivity::ConcurrentEvacuation,
            _ if cset => GcActivity::ConcurrentUpdateRefs,
            _ => GcActivity::ConcurrentMark,
        })
    }

    /// Takes `spans` in any order.
    pub fn new(mut spans: Vec<RegionSpan>) -> RegionMap {
        spans.sort_unstable_by_key(|s| s.start);
        let mut merged: Vec<RegionSpan> = Vec::with_capacity(spans.len());
        for s in spans {
            match merged.last_mut() {
                Some(l) if l.end == s.start && l.kind == s.kind => l.end = s.end,
                _ => merged.push(s),
            }
        }
        RegionMap {
            spans: merged,
            concurrent_cset: false,
            grain: 0,
        }
    }

    /// The map of a collector whose regions are `grain` bytes, aligned to it (G1).
    pub fn with_grain(self, grain: usize) -> RegionMap {
        RegionMap { grain, ..self }
    }

    /// The collector named `addrs` as pages its pause will evacuate (a patched G1's mixed
    /// collection names the live pages of its collection set's old regions): the regions
    /// holding them become `CollectionSet` spans. Without a region size, or for an address
    /// the map does not hold, nothing changes.
    pub fn collecting(&mut self, addrs: &[usize]) {
        if !self.grain.is_power_of_two() {
            return; // 0: not known
        }
        let mut regions: Vec<usize> = addrs
            .iter()
            .filter(|&&a| matches!(self.kind_at(a), Some(k) if k != RegionKind::CollectionSet))
            .map(|&a| a & !(self.grain - 1))
            .collect();
        regions.sort_unstable();
        regions.dedup();
        if regions.is_empty() {
            return;
        }
        let mut spans = Vec::with_capacity(self.spans.len() + 2 * regions.len());
        for s in &self.spans {
            let mut at = s.start;
            let first = regions.partition_point(|&r| r + self.grain <= s.start);
            for &r in regions[first..].iter().take_while(|&&r| r < s.end) {
                let (start, end) = (r.max(s.start), (r + self.grain).min(s.end));
                if at < start {
                    spans.push(RegionSpan {
                        start: at,
                        end: start,
                        ..*s
                    });
                }
                spans.push(RegionSpan {
                    start,
                    end,
                    kind: RegionKind::CollectionSet,
                });
                at = end;
            }
            if at < s.end {
                spans.push(RegionSpan { start: at, ..*s });
            }
        }
        *self = RegionMap {
            concurrent_cset: self.concurrent_cset,
            grain: self.grain,
            ..RegionMap::new(spans)
        };
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    pub fn spans(&self) -> &[RegionSpan] {
        &self.spans
    }

    /// The spans of regions of `kind`, in address order.
    pub fn of_kind(&self, kind: RegionKind) -> impl Iterator<Item = &RegionSpan> {
        self.spans.iter().filter(move |s| s.kind == kind)
    }

    /// The kind of the region holding `addr`, if the map names it.
    pub fn kind_at(&self, addr: usize) -> Option<RegionKind> {
        let i = self.spans.partition_point(|s| s.end <= addr);
        self.spans
            .get(i)
            .filter(|s| s.start <= addr)
            .map(|s| s.kind)
    }
}

/// What kind of pause ended, as the JVM's own collector counters say (hsperfdata).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseKind {
    /// A young or mixed collection (or a pause the counters do not tell apart).
    Incremental = 0,
    Full = 1,
    /// G1's remark or cleanup.
    RemarkCleanup = 2,
}

/// What is known of a pause when it ends: its kind, the regions at its start, and the ranges
/// it left free (the dead-space reader's free regions).
#[derive(Clone, Copy, Debug)]
pub struct PauseFacts<'a> {
    pub kind: PauseKind,
    pub start: &'a RegionMap,
    /// Sorted, disjoint `[start, end)` ranges free at the pause's end.
    pub free_at_end: &'a [(usize, usize)],
}

impl PauseFacts<'_> {
    /// What the pause was doing when it read the page at `addr`.
    pub fn classify(&self, addr: usize) -> GcActivity {
        match self.kind {
            PauseKind::Full => return GcActivity::FullGc,
            PauseKind::RemarkCleanup => return GcActivity::RemarkCleanup,
            PauseKind::Incremental => {}
        }
        match self.start.kind_at(addr) {
            Some(RegionKind::Young) => GcActivity::YoungEvacuation,
            Some(RegionKind::Old) if self.freed(addr) => GcActivity::MixedEvacuation,
            Some(RegionKind::Old) => GcActivity::CardScan,
            Some(RegionKind::Humongous) => GcActivity::Humongous,
            Some(RegionKind::Free) => GcActivity::CopyDestination,
            // Named by a patched G1 as its mixed collection's (`RegionMap::collecting`).
            Some(RegionKind::CollectionSet) if !self.start.concurrent_cset => {
                GcActivity::MixedEvacuation
            }
            Some(RegionKind::CollectionSet) | None => GcActivity::PauseOther,
        }
    }

    fn freed(&self, addr: usize) -> bool {
        let i = self.free_at_end.partition_point(|&(_, e)| e <= addr);
        self.free_at_end.get(i).is_some_and(|&(s, _)| s <= addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: usize = 1 << 20;

    fn span(i: usize, n: usize, kind: RegionKind) -> RegionSpan {
        RegionSpan {
            start: i * R,
            end: (i + n) * R,
            kind,
        }
    }

    #[test]
    fn adjacent_regions_of_a_kind_merge_and_lookups_find_their_span() {
        let m = RegionMap::new(vec![
            span(3, 1, RegionKind::Old),
            span(0, 1, RegionKind::Young),
            span(1, 1, RegionKind::Young),
            span(2, 1, RegionKind::Old),
            span(5, 1, RegionKind::Humongous),
        ]);
        assert_eq!(
            m.spans(),
            &[
                span(0, 2, RegionKind::Young),
                span(2, 2, RegionKind::Old),
                span(5, 1, RegionKind::Humongous)
            ]
        );
        assert_eq!(m.kind_at(0), Some(RegionKind::Young));
        assert_eq!(m.kind_at(2 * R - 1), Some(RegionKind::Young));
        assert_eq!(m.kind_at(2 * R), Some(RegionKind::Old));
        assert_eq!(m.kind_at(4 * R), None, "a gap between spans");
        assert_eq!(m.kind_at(6 * R), None, "past the last span");
    }

    /// A scripted young pause, then a mixed one over the same regions: each remote fault is
    /// told by its region at the start and by what the pause freed.
    #[test]
    fn a_pause_s_faults_are_told_by_their_region_and_what_the_pause_freed() {
        let start = RegionMap::new(vec![
            span(0, 2, RegionKind::Young),
            span(2, 4, RegionKind::Old),
            span(6, 1, RegionKind::Humongous),
            span(7, 1, RegionKind::Free),
        ]);
        let young = PauseFacts {
            kind: PauseKind::Incremental,
            start: &start,
            // Eden freed, as every young pause does.
            free_at_end: &[(0, 2 * R), (7 * R, 8 * R)],
        };
        let at = |f: &PauseFacts, addrs: &[usize]| -> Vec<GcActivity> {
            addrs.iter().map(|&a| f.classify(a)).collect()
        };
        let faults = [R + 4096, 2 * R, 4 * R + 8192, 6 * R, 7 * R + 1, 9 * R];
        assert_eq!(
            at(&young, &faults),
            vec![
                GcActivity::YoungEvacuation,
                GcActivity::CardScan,
                GcActivity::CardScan,
                GcActivity::Humongous,
                GcActivity::CopyDestination,
                GcActivity::PauseOther,
            ]
        );
        // A mixed pause also freed old regions 2 and 3: their pages were evacuated; regions
        // 4 and 5 stay and were read through their cards.
        let mixed = PauseFacts {
            free_at_end: &[(0, 4 * R), (7 * R, 8 * R)],
            ..young
        };
        assert_eq!(
            at(&mixed, &[2 * R, 3 * R + 4096, 4 * R, 5 * R + 4096]),
            vec![
                GcActivity::MixedEvacuation,
                GcActivity::MixedEvacuation,
                GcActivity::CardScan,
                GcActivity::CardScan,
            ]
        );
        // A full collection or a remark takes the whole pause, wherever its pages lie.
        for (kind, all) in [
            (PauseKind::Full, GcActivity::FullGc),
            (PauseKind::RemarkCleanup, GcActivity::RemarkCleanup),
        ] {
            let f = PauseFacts { kind, ..young };
            assert!(at(&f, &faults).iter().all(|&a| a == all), "{kind:?}");
        }
        // No layout known: every pause fault is `pause_other`, never a guess.
        let none = RegionMap::default();
        let f = PauseFacts {
            start: &none,
            ..young
        };
        assert!(at(&f, &faults).iter().all(|&a| a == GcActivity::PauseOther));
    }

    /// A patched G1 names pages of its mixed collection's old regions when the pause has
    /// chosen them: the regions holding them (by G1's region size) become the pause's
    /// collection set, wherever in the region the named page lies, and faults there are
    /// mixed evacuation even when the pause keeps the region (an evacuation failure);
    /// without a region size nothing changes.
    #[test]
    fn regions_named_by_the_collector_are_its_collection_set() {
        let start = RegionMap::new(vec![
            span(0, 1, RegionKind::Young),
            span(1, 5, RegionKind::Old),
            span(6, 1, RegionKind::Free),
        ]);
        let mut no_grain = start.clone();
        no_grain.collecting(&[2 * R]);
        assert_eq!(no_grain, start, "no region size: no change");
        let mut m = start.with_grain(R);
        // Regions 2 and 4 (two pages of 2, one in the middle of 4), and an address past the
        // map: ignored.
        m.collecting(&[2 * R + 4096, 2 * R + 8192, 4 * R + R / 2, 9 * R]);
        assert_eq!(
            m.spans(),
            &[
                span(0, 1, RegionKind::Young),
                span(1, 1, RegionKind::Old),
                span(2, 1, RegionKind::CollectionSet),
                span(3, 1, RegionKind::Old),
                span(4, 1, RegionKind::CollectionSet),
                span(5, 1, RegionKind::Old),
                span(6, 1, RegionKind::Free),
            ]
        );
        // Named again (a second batch), and a neighbour: merged with it.
        m.collecting(&[2 * R, 3 * R]);
        assert_eq!(m.spans()[2], span(2, 3, RegionKind::CollectionSet));
        let f = PauseFacts {
            kind: PauseKind::Incremental,
            start: &m,
            free_at_end: &[(0, R), (2 * R, 3 * R)],
        };
        assert_eq!(f.classify(2 * R + 4096), GcActivity::MixedEvacuation);
        assert_eq!(
            f.classify(4 * R),
            GcActivity::MixedEvacuation,
            "kept (evacuation failed): still its collection set"
        );
        assert_eq!(f.classify(5 * R), GcActivity::CardScan);
        assert_eq!(f.classify(0), GcActivity::YoungEvacuation);
    }

    /// Shenandoah's cycle as its pauses leave it: no collection set (marking), one (its pages
    /// evacuated, the rest read to update references), none again.
    #[test]
    fn a_concurrent_collector_s_work_is_told_by_its_collection_set() {
        let marking = RegionMap::concurrent(vec![]);
        assert_eq!(
            marking.concurrent_activity(3 * R),
            Some(GcActivity::ConcurrentMark)
        );
        let evacuating = RegionMap::concurrent(vec![span(2, 2, RegionKind::CollectionSet)]);
        assert_eq!(
            evacuating.concurrent_activity(3 * R + 8),
            Some(GcActivity::ConcurrentEvacuation)
        );
        assert_eq!(
            evacuating.concurrent_activity(5 * R),
            Some(GcActivity::ConcurrentUpdateRefs)
        );
        // A collector that evacuates in its pauses: its map says nothing of concurrent work.
        let g1 = RegionMap::new(vec![span(2, 2, RegionKind::Old)]);
        assert_eq!(g1.concurrent_activity(3 * R), None);
        // In a pause, a collection-set page is not guessed at.
        let f = PauseFacts {
            kind: PauseKind::Incremental,
            start: &evacuating,
            free_at_end: &[],
        };
        assert_eq!(f.classify(3 * R), GcActivity::PauseOther);
    }

    #[test]
    fn names_and_pause_membership() {
        let names: Vec<&str> = GcActivity::ALL.iter().map(|a| a.name()).collect();
        assert_eq!(
            names,
            [
                "young_evacuation",
                "mixed_evacuation",
                "card_scan",
                "humongous",
                "remark_cleanup",
                "full_gc",
                "copy_destination",
                "pause_other",
                "concurrent_mark",
                "mark_root_regions",
                "mark_store_log",
                "mark_stack",
                "mark_array_slices",
                "mark_bitmap_walk",
                "mark_deferred",
                "remset_rebuild",
                "concurrent_refinement",
                "concurrent_evacuation",
                "concurrent_update_refs",
                "concurrent_other"
            ]
        );
        for (i, a) in GcActivity::ALL.iter().enumerate() {
            assert_eq!(*a as usize, i);
            assert_eq!(a.in_pause(), i < 8);
        }
    }
}
