//! The vocabulary the agent, its stats document, its metrics and the command share: who
//! faulted, how a fault was served and delivered, what the collector was doing, how the heap
//! was found and how the reclaimer chooses. Each enum's `name()` is how options, documents and
//! metrics spell it.

/// Who faulted, as the pager counts it; the stats document names it as `name` does.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    strum::EnumCount,
    strum::VariantArray,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[strum(serialize_all = "kebab-case")]
pub enum ThreadClass {
    /// Java threads.
    Application = 0,
    /// Stop-the-world GC workers.
    Gc = 1,
    /// Concurrent GC threads: markers, refinement, concurrent workers.
    GcConcurrent = 2,
    /// JIT compiler threads.
    Jit = 3,
    /// The VM thread and other VM-internal threads.
    Vm = 4,
    /// Anything else (native threads, threads not yet known, the agent's latency probe).
    Other = 5,
}

impl ThreadClass {
    pub const COUNT: usize = <ThreadClass as strum::EnumCount>::COUNT;
    pub const ALL: &'static [ThreadClass] = <ThreadClass as strum::VariantArray>::VARIANTS;

    /// The class `name` names (its stats name).
    pub fn from_name(name: &str) -> Option<ThreadClass> {
        name.parse().ok()
    }

    pub fn is_gc(self) -> bool {
        matches!(self, ThreadClass::Gc | ThreadClass::GcConcurrent)
    }
}

lowercase_enum! {
    /// How faults reach the code that serves them; the stats document names it as `name` does.
    pub enum FaultDelivery {
        /// As a SIGBUS to the faulting thread, which serves its own fault.
        Signal,
        /// As userfaultfd events, to fault-handler threads that wake the faulting thread.
        Thread,
    }
}

lowercase_enum! {
    /// How the heap was found: HotSpot's serviceability tables, or a guess from /proc/self/maps.
    pub enum Discovery {
        VmStructs,
        Maps,
    }
}

/// Why a fault was served the way it was; the stats document names it as `name` does.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, strum::EnumCount, strum::VariantArray, strum::IntoStaticStr,
)]
#[strum(serialize_all = "snake_case")]
pub enum FaultKind {
    /// First touch: zero-filled locally, no network.
    Zero = 0,
    /// Fetched from the page store.
    Remote = 1,
    /// First write to a page mapped write-protected (dirtiness tracking).
    Write = 2,
    /// A duplicate or stale message: the page was already there.
    Stale = 3,
    /// Served from a prefetched marker page: no network.
    #[strum(serialize = "prefetch_hit")]
    Hit = 4,
    /// A touch of a page the reclaimer had unmapped to sample its use (its bytes were kept
    /// locally): mapped back, no network; the page is referenced.
    Reactivate = 5,
}

impl FaultKind {
    pub const COUNT: usize = <FaultKind as strum::EnumCount>::COUNT;
    pub const ALL: &'static [FaultKind] = <FaultKind as strum::VariantArray>::VARIANTS;
}

/// What the collector was doing; the stats document names it as `name` does.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    strum::EnumCount,
    strum::VariantArray,
    strum::IntoStaticStr,
)]
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum GcActivity {
    /// A pause copying live objects out of young regions (eden and survivors).
    YoungEvacuation,
    /// A pause copying live objects out of old regions in the collection set (mixed
    /// collections): regions the pause freed.
    MixedEvacuation,
    /// A pause reading old regions it keeps: dirty cards, remembered sets and roots that point
    /// into the collection set.
    CardScan,
    /// A pause reading humongous regions (their cards, or their eager reclaim).
    Humongous,
    /// G1's remark and cleanup pauses.
    RemarkCleanup,
    /// A full (compacting) collection.
    FullGc,
    /// A pause copying into a region free when it started (G1's survivor and old
    /// destinations): a page it had filled and that was pushed out before it was done, or
    /// one whose dead bytes the store still held.
    CopyDestination,
    /// A pause whose page lay where the collector's layout said nothing (or no layout).
    PauseOther,
    /// Concurrent marking threads (`G1 Conc#`, `G1 Main Marker`) where no finer path is
    /// known: on a stock JVM everything but the remembered-set rebuild; with the GC hooks,
    /// what they do outside the paths below.
    ConcurrentMark,
    /// Marking scanning its root regions (G1's survivors when marking starts; GC hooks).
    MarkRootRegions,
    /// Marking draining the application's store log (G1's SATB buffers: overwritten and,
    /// with the hooks' line-up, stored references; GC hooks).
    MarkStoreLog,
    /// Marking tracing objects popped from its mark stack or stolen from another
    /// marker's (GC hooks).
    MarkStack,
    /// Marking tracing slices of large object arrays (GC hooks).
    MarkArraySlices,
    /// Marking walking a region's mark bitmap, scanning the objects marked above its
    /// finger (GC hooks).
    MarkBitmapWalk,
    /// Marking tracing the objects it deferred because their pages were remote (GC hooks).
    MarkDeferred,
    /// G1 rebuilding remembered sets between remark and cleanup (stock: faults of its
    /// marking threads in that window; GC hooks: the rebuild task's own).
    RemsetRebuild,
    /// Concurrent refinement threads (`G1 Refine#`): dirty cards of old regions.
    ConcurrentRefinement,
    /// A concurrently evacuating collector (Shenandoah) copying its collection set: its
    /// concurrent threads' faults on collection-set regions while it has one.
    ConcurrentEvacuation,
    /// The same collector's other regions read while it has a collection set: references
    /// updated to the copies.
    ConcurrentUpdateRefs,
    /// Other concurrent GC work: `G1 Service`, ZGC's workers, concurrent threads before a
    /// collector's first pause.
    ConcurrentOther,
}

impl GcActivity {
    pub const COUNT: usize = <GcActivity as strum::EnumCount>::COUNT;
    pub const ALL: &'static [GcActivity] = <GcActivity as strum::VariantArray>::VARIANTS;
    /// Concurrent marking by path, as a GC-hook patched G1's marking threads report it.
    pub const MARK_PATHS: &'static [GcActivity] = &[
        GcActivity::MarkRootRegions,
        GcActivity::MarkStoreLog,
        GcActivity::MarkStack,
        GcActivity::MarkArraySlices,
        GcActivity::MarkBitmapWalk,
        GcActivity::MarkDeferred,
    ];

    /// Work done inside a stop-the-world pause (the pause's activities are a fixed few; the
    /// concurrent ones grow with what the collectors report).
    pub fn in_pause(self) -> bool {
        matches!(
            self,
            GcActivity::YoungEvacuation
                | GcActivity::MixedEvacuation
                | GcActivity::CardScan
                | GcActivity::Humongous
                | GcActivity::RemarkCleanup
                | GcActivity::FullGc
                | GcActivity::CopyDestination
                | GcActivity::PauseOther
        )
    }
}

lowercase_enum! {
    /// How the reclaimer chooses victims (`lru`, `fifo` in options and stats).
    pub enum Replacement {
        /// The kernel's two lists with working-set detection and references sampled by unmapping
        /// (the agent's `pager::reclaim::lists`).
        Lru,
        /// Arrival order: no sampling, no working-set detection (pages written while mapped still
        /// get a second chance). For comparison.
        Fifo,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_stats_documents_and_tables_follow_the_discriminants() {
        let classes: Vec<&str> = ThreadClass::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(
            classes,
            ["application", "gc", "gc-concurrent", "jit", "vm", "other"]
        );
        let kinds: Vec<&str> = FaultKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(
            kinds,
            [
                "zero",
                "remote",
                "write",
                "stale",
                "prefetch_hit",
                "reactivate"
            ]
        );
        // Counters are arrays indexed by `as usize`.
        for (i, c) in ThreadClass::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
            assert_eq!(ThreadClass::from_name(c.name()), Some(*c));
        }
        for (i, k) in FaultKind::ALL.iter().enumerate() {
            assert_eq!(*k as usize, i);
        }
        assert_eq!(ThreadClass::from_name("gc_concurrent"), None);
        assert_eq!(
            (FaultDelivery::Signal.name(), Discovery::VmStructs.name()),
            ("signal", "vmstructs")
        );
    }
}
