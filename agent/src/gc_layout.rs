//! Where the collector holds nothing live, read from HotSpot's own tables at the end of a
//! collection: a stock JDK tells the pager which heap bytes are dead without a patch.
//!
//! Right after a stop-the-world pause the heap's layout says it:
//! - G1: free regions hold nothing; every other region nothing above its `top`.
//! - Parallel and Serial: eden, from- and to-space and the old generation hold nothing above
//!   their `top` (after a young collection eden's `top` is its bottom).
//! - Shenandoah: empty and trash regions hold nothing (trash: collected, every reference to
//!   them updated); other regions nothing above `top`.
//!
//! Nobody reads those bytes before writing them again (allocation is bump-pointer from `top`;
//! heap walkers stop at `top`), so the pager drops their pages without writing them back and
//! zero-fills them on reuse instead of fetching dead bytes (`Pager::release`).
//!
//! When this is safe: only inside the JVMTI GarbageCollectionFinish callback, which HotSpot
//! posts from the VM thread at the end of the pause, while every Java thread and every
//! concurrent GC thread is still stopped at the safepoint. Read at any other moment, a region
//! just handed out to a mutator could be dropped under its new objects. The tables are the
//! serviceability agent's (`gHotSpotVMStructs`); a JVM that does not describe a field gets no
//! dead-space release (the reason is logged), never a guess.

#![allow(unsafe_code)]

use crate::gc_activity::{RegionKind, RegionMap, RegionSpan, ScanOrder};
use crate::vmstructs::VmStructs;

/// Why a range holds nothing live; the stats name it as `name` does.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, strum::EnumCount, strum::VariantArray, strum::IntoStaticStr,
)]
#[strum(serialize_all = "snake_case")]
pub enum Reason {
    /// A whole free (empty, trash) region.
    FreeRegion,
    /// The unallocated end of a region or space, above its `top`.
    AboveTop,
}

impl Reason {
    pub const ALL: &'static [Reason] = <Reason as strum::VariantArray>::VARIANTS;
    pub const COUNT: usize = <Reason as strum::EnumCount>::COUNT;
}

/// A heap range with nothing live in it, `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeadRange {
    pub start: usize,
    pub end: usize,
    pub reason: Reason,
}

/// Field offsets of a region or space: `bottom`, `end`, `top`.
#[derive(Clone, Copy, Debug)]
struct Bounds {
    bottom: usize,
    end: usize,
    top: usize,
}

#[derive(Debug)]
enum Layout {
    /// `heap + table`: the `G1HeapRegionTable`, an array of region pointers.
    G1 {
        heap: usize,
        table: usize,
        base: usize,
        length: usize,
        region: Bounds,
        /// Offset of the region's type tag.
        tag: usize,
        free_tag: i32,
        /// The type tag's young, humongous and old bits, for the regions' kinds at a pause's
        /// start (`None`: this JVM does not describe them; pauses go unattributed).
        masks: Option<TagMasks>,
    },
    /// Spaces reached through pointer chains from a root (Parallel, Serial).
    Spaces {
        spaces: Vec<SpacePath>,
        space: Bounds,
    },
    Shenandoah {
        heap: usize,
        count: usize,
        regions: usize,
        region: Bounds,
        state: usize,
        /// States whose regions hold nothing (empty committed, trash).
        dead_states: Vec<i32>,
        /// States of regions in the collection set (cset, pinned cset).
        cset_states: Vec<i32>,
    },
}

/// G1's region type bits (`HeapRegionType::YoungMask`, ...).
#[derive(Clone, Copy, Debug)]
struct TagMasks {
    young: i32,
    humongous: i32,
    old: i32,
}

/// A space as `*(*(root) + gen) + space` (each step a pointer load).
#[derive(Clone, Copy, Debug)]
struct SpacePath {
    /// Address of the pointer to the generation (a static field, or a field of the heap).
    generation_slot: usize,
    /// Offset of the space pointer in the generation.
    space: usize,
    /// Eden or a survivor space (else the old generation).
    young: bool,
}

/// A generational heap's spaces (Parallel, Serial): eden, from- and to-space through the
/// young generation's slot, and the old generation's one space.
fn generational(
    young: usize,
    young_spaces: [usize; 3],
    old: (usize, usize),
    space: Bounds,
) -> Layout {
    let spaces = young_spaces
        .iter()
        .map(|&s| SpacePath {
            generation_slot: young,
            space: s,
            young: true,
        })
        .chain([SpacePath {
            generation_slot: old.0,
            space: old.1,
            young: false,
        }])
        .collect();
    Layout::Spaces { spaces, space }
}

/// The dead-space reader of one running JVM.
#[derive(Debug)]
pub struct GcLayout {
    collector: &'static str,
    layout: Layout,
    /// The card table, for the cards a pause is about to scan (`None`: not described, or a
    /// collector without one read here).
    cards: Option<CardTable>,
}

/// A card table as the barrier set holds it: card `i` covers `[i << shift, (i + 1) << shift)`
/// and lives at `biased_base + i` (`CardTable::_byte_map_base` is biased by the heap's start).
#[derive(Clone, Copy, Debug)]
struct CardTable {
    /// `BarrierSet::_barrier_set`'s address, and the offsets to the biased base.
    barrier_set: usize,
    card_table: usize,
    byte_map_base: usize,
    shift: u32,
    dirty: u8,
    scanned: Scanned,
}

/// Which cards of old regions a young collection scans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scanned {
    /// G1: the dirty ones (it merges its remembered sets into the card table as dirty cards
    /// when the pause starts).
    Dirty,
    /// Serial (and Parallel): every card that is not `clean` (dirty, or left marked by the
    /// last collection because its objects still point into the young generation).
    NotClean { clean: u8 },
}

impl CardTable {
    /// The table as G1 scans it (`Scanned::Dirty`).
    fn find(vm: &VmStructs) -> Result<CardTable, String> {
        // JDK 17 exports the shift as a constant; JDK 18+ sizes cards by a flag.
        let shift = match vm.int_constant(&["CardTable::card_shift"]) {
            Ok(s) => s as u32,
            Err(_) => {
                let bytes = vm.flag_u32("GCCardSizeInBytes")?;
                if !bytes.is_power_of_two() {
                    return Err(format!("GCCardSizeInBytes is {bytes}, not a power of two"));
                }
                bytes.trailing_zeros()
            }
        };
        Ok(CardTable {
            barrier_set: vm.static_address_of(&[("BarrierSet", "_barrier_set")])?,
            card_table: vm.offset_of(&[("CardTableBarrierSet", "_card_table")])?,
            byte_map_base: vm.offset_of(&[("CardTable", "_byte_map_base")])?,
            shift,
            dirty: vm.int_constant(&["CardTable::dirty_card"])? as u8,
            scanned: Scanned::Dirty,
        })
    }

    /// The same table as Serial scans it (`Scanned::NotClean`).
    fn not_clean(self, vm: &VmStructs) -> Result<CardTable, String> {
        Ok(CardTable {
            // -1 as JDK 17's signed card byte, 255 as JDK 25's unsigned one: 0xff either way.
            scanned: Scanned::NotClean {
                clean: vm.int_constant(&["CardTable::clean_card"])? as u8,
            },
            ..self
        })
    }

    /// The table's biased base as it is now (`None` before the barrier set is set up).
    ///
    /// # Safety
    /// Call after the VM has set up its barrier set (VMInit).
    unsafe fn resolve(&self) -> Option<PendingCards> {
        // SAFETY: the caller's contract; the barrier set and its card table are the VM's own.
        let base = unsafe { chase(self.barrier_set, &[self.card_table, self.byte_map_base]) }?;
        Some(PendingCards {
            base,
            shift: self.shift,
            dirty: self.dirty,
        })
    }

    /// Whether a pause scans a card holding `value`.
    fn scans(&self, value: u8) -> bool {
        match self.scanned {
            Scanned::Dirty => value == self.dirty,
            Scanned::NotClean { clean } => value != clean,
        }
    }
}

/// G1's card table, resolved: tells whether a heap page holds a dirty card, one the collector
/// has yet to read (a refinement thread, or the next pause, scans the page for it). The card
/// table's base is fixed for the VM's life.
#[derive(Clone, Copy, Debug)]
pub struct PendingCards {
    /// `CardTable::_byte_map_base`: card `i` lives at `base + i`.
    base: usize,
    shift: u32,
    dirty: u8,
}

impl PendingCards {
    /// Whether any card of the page at `page` (page-aligned) is dirty, or, with `next`, the
    /// card that starts the next page: scanning that card reads the object crossing into it
    /// from its start, on this page. A racing write by the VM gives the old or the new byte: a
    /// guess either way, never a wrong page served.
    ///
    /// # Safety
    /// `page` (and the next page, with `next`) must lie in a committed region of this heap
    /// (the card table is committed with its regions: with `-Xms` equal to `-Xmx`, the whole
    /// heap for the VM's life).
    pub unsafe fn page_is_pending(&self, page: usize, next: bool) -> bool {
        let first = page >> self.shift;
        let n = (swap_backend::PAGE_SIZE >> self.shift).max(1) + usize::from(next);
        // SAFETY: the caller's contract; a card byte is plain data the VM writes with byte
        // stores.
        let cards = unsafe { std::slice::from_raw_parts((self.base + first) as *const u8, n) };
        cards.contains(&self.dirty)
    }
}

/// Reads a pointer-sized word.
///
/// # Safety
/// `addr` must be a readable, aligned word of the VM's own data.
unsafe fn word(addr: usize) -> usize {
    // SAFETY: the caller's contract.
    unsafe { (addr as *const usize).read_volatile() }
}

/// Follows a chain of pointers: `*slot`, then at each offset the pointer stored there; `None`
/// at a null on the way.
///
/// # Safety
/// Each step must read a pointer-sized field of a live VM structure.
unsafe fn chase(slot: usize, offsets: &[usize]) -> Option<usize> {
    // SAFETY: the caller's contract.
    let mut p = unsafe { word(slot) };
    for &off in offsets {
        if p == 0 {
            return None;
        }
        // SAFETY: the caller's contract.
        p = unsafe { word(p + off) };
    }
    (p != 0).then_some(p)
}

impl GcLayout {
    /// Describes `collector`'s heap layout from the VM's tables. `Err` says which field is not
    /// described (then the JVM runs without dead-space release).
    pub fn find(vm: &VmStructs, collector: &'static str) -> Result<GcLayout, String> {
        let heap = vm.collected_heap()?;
        let layout = match collector {
            "G1" => {
                let hrm = vm.offset_of(&[("G1CollectedHeap", "_hrm")])?;
                let regions = vm.offset_of(&[
                    ("HeapRegionManager", "_regions"),
                    ("G1HeapRegionManager", "_regions"),
                ])?;
                let region = |f| [("HeapRegion", f), ("G1HeapRegion", f)];
                let ty = vm.offset_of(&region("_type"))?;
                let tag =
                    vm.offset_of(&[("HeapRegionType", "_tag"), ("G1HeapRegionType", "_tag")])?;
                Layout::G1 {
                    heap,
                    table: hrm + regions,
                    base: vm.offset_of(&[("G1HeapRegionTable", "_base")])?,
                    length: vm.offset_of(&[("G1HeapRegionTable", "_length")])?,
                    region: Bounds {
                        bottom: vm.offset_of(&region("_bottom"))?,
                        end: vm.offset_of(&region("_end"))?,
                        top: vm.offset_of(&region("_top"))?,
                    },
                    tag: ty + tag,
                    free_tag: vm
                        .int_constant(&["HeapRegionType::FreeTag", "G1HeapRegionType::FreeTag"])?,
                    masks: (|| {
                        let c = |n: &str| {
                            vm.int_constant(&[
                                &format!("HeapRegionType::{n}") as &str,
                                &format!("G1HeapRegionType::{n}"),
                            ])
                        };
                        Ok::<_, String>(TagMasks {
                            young: c("YoungMask")?,
                            humongous: c("HumongousMask")?,
                            old: c("OldMask")?,
                        })
                    })()
                    .ok(),
                }
            }
            "Parallel" => {
                let young = vm.static_address_of(&[("ParallelScavengeHeap", "_young_gen")])?;
                let old = vm.static_address_of(&[("ParallelScavengeHeap", "_old_gen")])?;
                let space = |f| vm.offset_of(&[("PSYoungGen", f)]);
                generational(
                    young,
                    [
                        space("_eden_space")?,
                        space("_from_space")?,
                        space("_to_space")?,
                    ],
                    (old, vm.offset_of(&[("PSOldGen", "_object_space")])?),
                    Bounds {
                        bottom: vm.offset_of(&[("MutableSpace", "_bottom")])?,
                        end: vm.offset_of(&[("MutableSpace", "_end")])?,
                        top: vm.offset_of(&[("MutableSpace", "_top")])?,
                    },
                )
            }
            "Serial" => {
                let young = heap
                    + vm.offset_of(&[
                        ("GenCollectedHeap", "_young_gen"),
                        ("SerialHeap", "_young_gen"),
                    ])?;
                let old = heap
                    + vm.offset_of(&[
                        ("GenCollectedHeap", "_old_gen"),
                        ("SerialHeap", "_old_gen"),
                    ])?;
                let space = |f| vm.offset_of(&[("DefNewGeneration", f)]);
                generational(
                    young,
                    [
                        space("_eden_space")?,
                        space("_from_space")?,
                        space("_to_space")?,
                    ],
                    (old, vm.offset_of(&[("TenuredGeneration", "_the_space")])?),
                    Bounds {
                        bottom: vm
                            .offset_of(&[("Space", "_bottom"), ("ContiguousSpace", "_bottom")])?,
                        end: vm.offset_of(&[("Space", "_end"), ("ContiguousSpace", "_end")])?,
                        top: vm.offset_of(&[("ContiguousSpace", "_top")])?,
                    },
                )
            }
            "Shenandoah" => {
                let region = |f| [("ShenandoahHeapRegion", f)];
                let state =
                    |n: &str| vm.int_constant(&[&format!("ShenandoahHeapRegion::{n}") as &str]);
                Layout::Shenandoah {
                    heap,
                    count: vm.offset_of(&[("ShenandoahHeap", "_num_regions")])?,
                    regions: vm.offset_of(&[("ShenandoahHeap", "_regions")])?,
                    region: Bounds {
                        bottom: vm.offset_of(&region("_bottom"))?,
                        end: vm.offset_of(&region("_end"))?,
                        top: vm.offset_of(&region("_top"))?,
                    },
                    state: vm.offset_of(&region("_state"))?,
                    dead_states: vec![state("_empty_committed")?, state("_trash")?],
                    cset_states: ["_cset", "_pinned_cset"]
                        .into_iter()
                        .filter_map(|n| state(n).ok())
                        .collect(),
                }
            }
            other => return Err(format!("no dead-space reader for the {other} collector")),
        };
        let cards = match collector {
            "G1" => CardTable::find(vm).ok(),
            "Serial" => CardTable::find(vm).and_then(|t| t.not_clean(vm)).ok(),
            // Parallel's workers scan the old generation's cards in interleaved stripes; its
            // card pages read ahead made it slower (kv and graph at 25% of 1 GiB: 1.05x the
            // wall, paired; young-evacuation faults doubled as they pushed eden out).
            _ => None,
        };
        Ok(GcLayout {
            collector,
            layout,
            cards,
        })
    }

    /// Appends the pages of `spans` that hold a card the pause scans: in a G1 pause, once the
    /// remembered sets are merged into the card table, the dirty ones; in Serial's, every card
    /// not clean. A card that starts a page names the page before it too: the scan reads the
    /// object crossing into the card from its start, there (a key-value cache at 25% of 1 GiB:
    /// a third of the pauses' card-scan faults). `false`: this JVM's card table is not read.
    ///
    /// # Safety
    /// Call only inside a collection pause, with `spans` committed regions of this heap (the
    /// card table is committed with its regions).
    pub unsafe fn dirty_card_pages(&self, spans: &[RegionSpan], out: &mut Vec<usize>) -> bool {
        let Some(table) = self.cards else {
            return false;
        };
        // SAFETY: inside a pause, after VMInit (the caller's contract).
        let Some(ct) = (unsafe { table.resolve() }) else {
            return false;
        };
        let page_shift = swap_backend::PAGE_SIZE.trailing_zeros();
        // SAFETY: the card bytes read cover committed regions only (the caller's contract). GC
        // workers write cards meanwhile (marking them scanned): a byte read is the old or the
        // new value, either a fine guess of what will be read.
        unsafe {
            for s in spans {
                let (first, last) = (s.start >> ct.shift, (s.end - 1) >> ct.shift);
                let cards =
                    std::slice::from_raw_parts((ct.base + first) as *const u8, last - first + 1);
                let mut last_page = usize::MAX;
                let span_page = s.start >> page_shift;
                for (i, &c) in cards.iter().enumerate() {
                    if !table.scans(c) {
                        continue;
                    }
                    let card = (first + i) << ct.shift;
                    let page = card >> page_shift;
                    let starts_page = card & (swap_backend::PAGE_SIZE - 1) == 0;
                    if starts_page && page > span_page && page - 1 != last_page {
                        out.push((page - 1) << page_shift);
                    }
                    if page != last_page {
                        out.push(page << page_shift);
                        last_page = page;
                    }
                }
            }
        }
        true
    }

    /// G1's card table as it is now, for telling pages with dirty cards one at a time (see
    /// [`PendingCards`]: a refinement thread or the next pause reads them); `None` on other
    /// collectors (Serial's cards stay marked while their objects point into the young
    /// generation, so holding their pages would hold them for good).
    ///
    /// # Safety
    /// Call after the VM has set up its barrier set (VMInit).
    pub unsafe fn pending_cards(&self) -> Option<PendingCards> {
        if !self.refines_cards() {
            return None;
        }
        // SAFETY: the caller's contract.
        unsafe { self.cards?.resolve() }
    }

    pub fn collector(&self) -> &'static str {
        self.collector
    }

    /// Which way a pause walks the cards [`GcLayout::dirty_card_pages`] names: Serial's
    /// (`ClearNoncleanCardWrapper`) from a space's top down, G1's from a region's bottom up.
    pub fn card_scan_order(&self) -> ScanOrder {
        match self.collector {
            "Serial" => ScanOrder::Down,
            _ => ScanOrder::Up,
        }
    }

    /// Whether concurrent threads scan the cards a pause leaves dirty (G1's refinement):
    /// elsewhere they wait for the next pause, which reads them then.
    pub fn refines_cards(&self) -> bool {
        self.cards.is_some_and(|c| c.scanned == Scanned::Dirty)
    }

    /// The heap's regions and their kinds now (for attributing a pause's faults); empty for a
    /// collector whose kinds are not read (Shenandoah) or a JVM that does not describe them.
    ///
    /// # Safety
    /// Call only at a safepoint (a JVMTI GarbageCollectionStart or Finish callback), as
    /// `dead_ranges`.
    pub unsafe fn region_map(&self) -> RegionMap {
        let mut spans = Vec::new();
        // G1's region size (every region's), its regions aligned to it; 0 elsewhere.
        let mut grain = 0;
        // SAFETY: as in `dead_ranges`: the VM's own structures at offsets it describes, at a
        // safepoint (the caller's contract).
        unsafe {
            match &self.layout {
                Layout::G1 {
                    masks: Some(m),
                    free_tag,
                    ..
                } => self.g1_regions(|bottom, end, _, tag| {
                    grain = end - bottom;
                    let kind = if tag == *free_tag {
                        RegionKind::Free
                    } else if tag & m.young != 0 {
                        RegionKind::Young
                    } else if tag & m.humongous != 0 {
                        RegionKind::Humongous
                    } else if tag & m.old != 0 {
                        RegionKind::Old
                    } else {
                        return; // archive regions: never collected, never read by a pause
                    };
                    spans.push(RegionSpan {
                        start: bottom,
                        end,
                        kind,
                    });
                }),
                Layout::Spaces { spaces, space } => {
                    for s in spaces {
                        if let Some((bottom, _, end)) = Self::space(s, space) {
                            spans.push(RegionSpan {
                                start: bottom,
                                end,
                                kind: if s.young {
                                    RegionKind::Young
                                } else {
                                    RegionKind::Old
                                },
                            });
                        }
                    }
                }
                Layout::Shenandoah {
                    cset_states, state, ..
                } => {
                    if cset_states.is_empty() {
                        return RegionMap::default();
                    }
                    self.shenandoah_regions(|bottom, end, _, r| {
                        if cset_states.contains(&((r + state) as *const i32).read_volatile()) {
                            spans.push(RegionSpan {
                                start: bottom,
                                end,
                                kind: RegionKind::CollectionSet,
                            });
                        }
                    });
                    return RegionMap::concurrent(spans);
                }
                Layout::G1 { masks: None, .. } => {}
            }
        }
        RegionMap::new(spans).with_grain(grain)
    }

    /// Calls `f(bottom, end, top, tag)` for each committed G1 region.
    ///
    /// # Safety
    /// As `dead_ranges`; `self` is a G1 layout.
    unsafe fn g1_regions(&self, mut f: impl FnMut(usize, usize, usize, i32)) {
        let Layout::G1 {
            heap,
            table,
            base,
            length,
            region,
            tag,
            ..
        } = &self.layout
        else {
            return;
        };
        // SAFETY: the caller's contract.
        unsafe {
            let t = heap + table;
            let (array, n) = (word(t + base), word(t + length));
            for i in 0..n {
                let r = word(array + i * std::mem::size_of::<usize>());
                if r == 0 {
                    continue; // never committed
                }
                f(
                    word(r + region.bottom),
                    word(r + region.end),
                    word(r + region.top),
                    ((r + tag) as *const i32).read_volatile(),
                );
            }
        }
    }

    /// Calls `f(bottom, end, top, region)` for each of Shenandoah's regions (`region`: its
    /// address, for its state).
    ///
    /// # Safety
    /// As `dead_ranges`; `self` is a Shenandoah layout.
    unsafe fn shenandoah_regions(&self, mut f: impl FnMut(usize, usize, usize, usize)) {
        let Layout::Shenandoah {
            heap,
            count,
            regions,
            region,
            ..
        } = &self.layout
        else {
            return;
        };
        // SAFETY: the caller's contract.
        unsafe {
            let (n, array) = (word(heap + count), word(heap + regions));
            for i in 0..n {
                let r = word(array + i * std::mem::size_of::<usize>());
                if r == 0 {
                    continue;
                }
                f(
                    word(r + region.bottom),
                    word(r + region.end),
                    word(r + region.top),
                    r,
                );
            }
        }
    }

    /// A generational space's `(bottom, top, end)`, if it exists and is consistent.
    ///
    /// # Safety
    /// As `dead_ranges`.
    unsafe fn space(s: &SpacePath, space: &Bounds) -> Option<(usize, usize, usize)> {
        // SAFETY: the caller's contract.
        unsafe {
            let sp = chase(s.generation_slot, &[s.space])?;
            let (bottom, top, end) = (
                word(sp + space.bottom),
                word(sp + space.top),
                word(sp + space.end),
            );
            (bottom <= top && top <= end).then_some((bottom, top, end))
        }
    }

    /// Appends the ranges that hold nothing live now to `out`.
    ///
    /// # Safety
    /// Call only while the VM is at the safepoint that ends a collection (the JVMTI
    /// GarbageCollectionFinish callback): the structures read are the collector's own, and
    /// only then are they consistent and the ranges free of new objects.
    pub unsafe fn dead_ranges(&self, out: &mut Vec<DeadRange>) {
        let above_top = |out: &mut Vec<DeadRange>, top: usize, end: usize| {
            let start = top.next_multiple_of(swap_backend::PAGE_SIZE);
            if start < end {
                out.push(DeadRange {
                    start,
                    end,
                    reason: Reason::AboveTop,
                });
            }
        };
        // A region holds nothing when free, else nothing above its top.
        let region = |out: &mut Vec<DeadRange>, free: bool, start, end, top| {
            if free {
                out.push(DeadRange {
                    start,
                    end,
                    reason: Reason::FreeRegion,
                });
            } else {
                above_top(out, top, end);
            }
        };
        // SAFETY: every load below reads the VM's own structures at offsets the VM describes,
        // through pointers taken from those structures, at a safepoint (the caller's
        // contract), while they do not change.
        unsafe {
            match &self.layout {
                Layout::G1 { free_tag, .. } => self.g1_regions(|bottom, end, top, tag| {
                    region(out, tag == *free_tag, bottom, end, top)
                }),
                Layout::Spaces { spaces, space } => {
                    for s in spaces {
                        if let Some((_, top, end)) = Self::space(s, space) {
                            above_top(out, top, end);
                        }
                    }
                }
                Layout::Shenandoah {
                    state, dead_states, ..
                } => self.shenandoah_regions(|bottom, end, top, r| {
                    let st = ((r + state) as *const i32).read_volatile();
                    region(out, dead_states.contains(&st), bottom, end, top)
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swap_backend::PAGE_SIZE;

    const PAGE: usize = PAGE_SIZE;

    /// A word-addressed block of fake VM memory that stays put.
    fn block(words: usize) -> &'static mut [usize] {
        Box::leak(vec![0usize; words].into_boxed_slice())
    }

    fn addr(b: &[usize]) -> usize {
        b.as_ptr() as usize
    }

    /// G1 as JDK 17 names it: a region table of three regions (free, old with `top` inside
    /// its second page, eden full to its end); JDK 21+ names are tried second.
    #[test]
    fn g1_free_regions_and_the_space_above_top_are_dead() {
        let base = 0x7f00_0000_0000usize;
        let region = 64 * PAGE;
        let regions: Vec<&mut [usize]> = (0..3).map(|_| block(8)).collect();
        let (bottom, end, top, ty) = (0usize, 1usize, 2usize, 3usize);
        let tags = [0i32, 16, 2]; // free, old, eden
        let tops = [base, base + region + PAGE + 8, base + 3 * region];
        let mut table = vec![];
        for (i, r) in regions.into_iter().enumerate() {
            r[bottom] = base + i * region;
            r[end] = base + (i + 1) * region;
            r[top] = tops[i];
            r[ty] = tags[i] as u32 as usize;
            table.push(addr(r));
        }
        let table: &'static [usize] = Box::leak(table.into_boxed_slice());
        let heap = block(16);
        // The heap's region table at word 4: base at +0 words, length at +1.
        heap[4] = addr(table);
        heap[5] = 3;
        let universe = block(1);
        universe[0] = addr(heap);
        let w = std::mem::size_of::<usize>() as u64;
        let vm = VmStructs::fake(
            &[
                ("Universe", "_collectedHeap", true, 0, addr(universe)),
                ("G1CollectedHeap", "_hrm", false, 2 * w, 0),
                ("HeapRegionManager", "_regions", false, 2 * w, 0),
                ("G1HeapRegionTable", "_base", false, 0, 0),
                ("G1HeapRegionTable", "_length", false, w, 0),
                ("G1HeapRegion", "_bottom", false, bottom as u64 * w, 0),
                ("G1HeapRegion", "_end", false, end as u64 * w, 0),
                ("G1HeapRegion", "_top", false, top as u64 * w, 0),
                ("G1HeapRegion", "_type", false, ty as u64 * w, 0),
                ("G1HeapRegionType", "_tag", false, 0, 0),
            ],
            &[
                ("G1HeapRegionType::FreeTag", 0),
                ("G1HeapRegionType::YoungMask", 2),
                ("G1HeapRegionType::HumongousMask", 4),
                ("G1HeapRegionType::OldMask", 16),
            ],
        );
        let l = GcLayout::find(&vm, "G1").unwrap();
        // The regions' kinds, for attributing a pause's faults.
        // SAFETY: as below.
        let map = unsafe { l.region_map() };
        let kinds: Vec<Option<RegionKind>> =
            (0..4).map(|i| map.kind_at(base + i * region)).collect();
        assert_eq!(
            kinds,
            vec![
                Some(RegionKind::Free),
                Some(RegionKind::Old),
                Some(RegionKind::Young),
                None
            ]
        );
        let mut out = Vec::new();
        // SAFETY: the fake structures above stand for a VM at a safepoint.
        unsafe { l.dead_ranges(&mut out) };
        assert_eq!(
            out,
            vec![
                DeadRange {
                    start: base,
                    end: base + region,
                    reason: Reason::FreeRegion
                },
                // `top` is inside page 1 of the old region: that page holds objects.
                DeadRange {
                    start: base + region + 2 * PAGE,
                    end: base + 2 * region,
                    reason: Reason::AboveTop
                },
            ],
            "the full eden region holds nothing dead"
        );
    }

    /// The cards a pause will scan, as G1's card table holds them once the remembered sets are
    /// merged (Serial's as it holds them): the pages of the old spans' dirty (not clean)
    /// cards, each page once, in address order.
    #[test]
    fn the_pages_of_dirty_cards_in_old_spans_are_named_once_each() {
        let start = 0x7d00_0000_0000usize;
        let (clean, dirty) = (0xffu8, 0u8);
        // Two old spans of 16 pages, 512-byte cards (8 a page).
        let cards: &'static mut [u8] = Box::leak(vec![clean; 2 * 16 * 8].into_boxed_slice());
        // Cards 48 and 128 start pages 6 and 16: the page before 6 is named for it, the one
        // before 16 is another span's.
        for c in [0, 8, 9, 15, 48, 100, 16 * 8, 16 * 8 + 3] {
            cards[c] = dirty;
        }
        cards[200] = 4; // a young card's value: not dirty
        let table = block(4);
        table[1] = cards.as_ptr() as usize - (start >> 9); // biased by the heap's start
        let bs = block(4);
        bs[2] = addr(table);
        let slot = block(1);
        slot[0] = addr(bs);
        let universe = block(1);
        universe[0] = addr(block(4));
        let w = std::mem::size_of::<usize>() as u64;
        let vm = VmStructs::fake(
            &[
                ("Universe", "_collectedHeap", true, 0, addr(universe)),
                (
                    "ParallelScavengeHeap",
                    "_young_gen",
                    true,
                    0,
                    addr(block(1)),
                ),
                ("ParallelScavengeHeap", "_old_gen", true, 0, addr(block(1))),
                ("PSYoungGen", "_eden_space", false, 0, 0),
                ("PSYoungGen", "_from_space", false, w, 0),
                ("PSYoungGen", "_to_space", false, 2 * w, 0),
                ("PSOldGen", "_object_space", false, 0, 0),
                ("MutableSpace", "_bottom", false, 0, 0),
                ("MutableSpace", "_top", false, w, 0),
                ("MutableSpace", "_end", false, 2 * w, 0),
                ("BarrierSet", "_barrier_set", true, 0, addr(slot)),
                ("CardTableBarrierSet", "_card_table", false, 2 * w, 0),
                ("CardTable", "_byte_map_base", false, w, 0),
            ],
            &[("CardTable::card_shift", 9), ("CardTable::dirty_card", 0)],
        );
        let mut l = GcLayout::find(&vm, "Parallel").unwrap();
        l.cards = Some(CardTable::find(&vm).unwrap());
        let spans = [
            RegionSpan {
                start,
                end: start + 16 * PAGE,
                kind: RegionKind::Old,
            },
            RegionSpan {
                start: start + 16 * PAGE,
                end: start + 32 * PAGE,
                kind: RegionKind::Humongous,
            },
        ];
        let mut out = Vec::new();
        // SAFETY: the fake card table covers both spans.
        assert!(unsafe { l.dirty_card_pages(&spans, &mut out) });
        let pages: Vec<usize> = out.iter().map(|a| (a - start) / PAGE).collect();
        assert_eq!(pages, vec![0, 1, 5, 6, 12, 16]);
        // One page at a time, as the reclaimer asks outside pauses: the same pages, and the one
        // before the second span's first card (the reclaimer does not know spans).
        // SAFETY: as above.
        let pending = unsafe { l.pending_cards() }.expect("a card table");
        let one_by_one: Vec<usize> = (0..32)
            // SAFETY: the fake card table covers all 32 pages.
            .filter(|&i| unsafe { pending.page_is_pending(start + i * PAGE, i < 31) })
            .collect();
        assert_eq!(one_by_one, vec![0, 1, 5, 6, 12, 15, 16]);
        let own_cards: Vec<usize> = (0..32)
            // SAFETY: as above.
            .filter(|&i| unsafe { pending.page_is_pending(start + i * PAGE, false) })
            .collect();
        assert_eq!(own_cards, vec![0, 1, 6, 12, 16]);
        // Serial scans every card not clean: the young card's page too; its cards are not held
        // one by one.
        l.cards = Some(CardTable {
            scanned: Scanned::NotClean { clean: 0xff },
            ..l.cards.unwrap()
        });
        out.clear();
        // SAFETY: as above.
        assert!(unsafe { l.dirty_card_pages(&spans, &mut out) });
        let pages: Vec<usize> = out.iter().map(|a| (a - start) / PAGE).collect();
        assert_eq!(pages, vec![0, 1, 5, 6, 12, 16, 24, 25]);
        // SAFETY: as above.
        assert!(unsafe { l.pending_cards() }.is_none());
        // Without a card table: nothing named, and the caller told so.
        l.cards = None;
        // SAFETY: as above.
        assert!(unsafe { l.pending_cards() }.is_none());
        // SAFETY: as above.
        assert!(!unsafe { l.dirty_card_pages(&spans, &mut out) });
    }

    #[test]
    fn parallel_spaces_are_dead_above_their_top_and_a_missing_field_is_named() {
        let base = 0x7e00_0000_0000usize;
        let space = |b: usize, t: usize, e: usize| {
            let s = block(3);
            s[0] = b;
            s[1] = t;
            s[2] = e;
            addr(s)
        };
        // Eden emptied by a young collection, from-space with survivors, to-space empty,
        // the old generation part full.
        let young = block(3);
        young[0] = space(base, base, base + 16 * PAGE);
        young[1] = space(base + 16 * PAGE, base + 17 * PAGE, base + 20 * PAGE);
        young[2] = space(base + 20 * PAGE, base + 20 * PAGE, base + 24 * PAGE);
        let old = block(1);
        old[0] = space(base + 32 * PAGE, base + 40 * PAGE - 1, base + 64 * PAGE);
        let (young_slot, old_slot) = (block(1), block(1));
        young_slot[0] = addr(young);
        old_slot[0] = addr(old);
        let universe = block(1);
        universe[0] = addr(block(4));
        let w = std::mem::size_of::<usize>() as u64;
        let fields = [
            ("Universe", "_collectedHeap", true, 0, addr(universe)),
            (
                "ParallelScavengeHeap",
                "_young_gen",
                true,
                0,
                addr(young_slot),
            ),
            ("ParallelScavengeHeap", "_old_gen", true, 0, addr(old_slot)),
            ("PSYoungGen", "_eden_space", false, 0, 0),
            ("PSYoungGen", "_from_space", false, w, 0),
            ("PSYoungGen", "_to_space", false, 2 * w, 0),
            ("PSOldGen", "_object_space", false, 0, 0),
            ("MutableSpace", "_bottom", false, 0, 0),
            ("MutableSpace", "_top", false, w, 0),
            ("MutableSpace", "_end", false, 2 * w, 0),
        ];
        let l = GcLayout::find(&VmStructs::fake(&fields, &[]), "Parallel").unwrap();
        let mut out = Vec::new();
        // SAFETY: the fake structures above stand for a VM at a safepoint.
        unsafe { l.dead_ranges(&mut out) };
        let pages: Vec<(usize, usize)> = out
            .iter()
            .map(|r| ((r.start - base) / PAGE, (r.end - base) / PAGE))
            .collect();
        assert_eq!(pages, vec![(0, 16), (17, 20), (20, 24), (40, 64)]);
        assert!(out.iter().all(|r| r.reason == Reason::AboveTop));
        // A VM that does not describe a field gets no reader, and the error names it.
        let err = GcLayout::find(&VmStructs::fake(&fields[..6], &[]), "Parallel").unwrap_err();
        assert!(err.contains("PSOldGen::_object_space"), "{err}");
        assert!(GcLayout::find(&VmStructs::fake(&fields, &[]), "Z")
            .unwrap_err()
            .contains("no dead-space reader"));
    }
}
