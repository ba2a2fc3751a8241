//! The stats document's types: what the agent writes (`stats=`) and what the `memliner`
//! command reads (run summary, bench report, plots, tests). Defined once, here; a field that
//! moves or disappears is a compile error on both sides, and a document that lacks one fails
//! to parse with the field's name instead of reading as 0.

use serde::{Deserialize, Serialize};

use crate::model::{Discovery, FaultDelivery, GcActivity, Replacement, ThreadClass};
use crate::options::Policy;

/// Version of the document's layout; bumped when a field changes meaning.
pub const VERSION: u32 = 5;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsDoc {
    pub version: u32,
    /// `memliner`, `baseline` or `off`.
    pub policy: Policy,
    pub wall_ms: f64,
    /// The paged heap; `None` before VMInit found it or with `policy=off`.
    pub heap: Option<HeapDoc>,
    pub pager: Option<PagerDoc>,
    pub faults: FaultsDoc,
    pub prefetch: Option<PrefetchDoc>,
    pub gc: GcDoc,
    /// GC threads' remote faults by the collector's activity (empty with `policy=off`).
    #[serde(default)]
    pub gc_faults: GcFaultsDoc,
    /// What a GC-hook patched JVM's collector did (all zero on a stock JVM).
    pub gc_hooks: GcHooksDoc,
    /// The JDK: the patched build's version and patch hash, or the `release` file's runtime
    /// version; empty when unknown.
    pub jdk: String,
    pub process: ProcessDoc,
}

/// The counters of a GC-hook patched collector (`-XX:+MemLinerLineUp`) and the agent's side of
/// its prefetch hints.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GcHooksDoc {
    /// The JVM took the agent's hooks table (patched JVM with `-XX:+MemLinerLineUp`).
    pub on: bool,
    pub mark_cycles: u64,
    /// Time inside concurrent marking, summed over cycles.
    pub marking_ms: f64,
    /// Store-log (SATB) entries concurrent marking processed: the references the
    /// application's stores overwrote and, with the hooks, the references they stored.
    pub recorded: u64,
    /// Of those, objects marking had not reached yet, marked and traced from there.
    pub lined_up: u64,
    /// Remote faults of the concurrent GC threads between the JVM's marking start and end
    /// events (the rest of that class: refinement, remembered-set rebuild, concurrent
    /// evacuation and reference updating).
    #[serde(default)]
    pub concurrent_remote_while_marking: u64,
    /// Objects deferred because their page was not resident.
    pub deferred: u64,
    /// Of those, found resident when traced at last (the hint arrived in time).
    pub deferred_resident: u64,
    /// deferred_resident / deferred.
    pub deferred_resident_share: Option<f64>,
    /// Pages the JVM hinted.
    pub hinted_pages: u64,
    /// Of those, pages that were remote and were fetched for the GC.
    pub hint_pages_fetched: u64,
    /// Remote hinted pages not fetched (reserve low, too many in flight).
    pub hint_pages_dropped: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeapDoc {
    /// Hex address of the reserved heap.
    pub base: String,
    pub bytes: u64,
    pub collector: String,
    /// `vmstructs` or `maps`.
    pub discovery: Discovery,
    /// Anonymous mappings registered inside the heap.
    pub spans: u64,
    /// The young generation as the agent found and left it (`young=`): G1, Parallel and
    /// Serial; absent for other collectors and where the flags could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub young: Option<YoungDoc>,
}

lowercase_enum! {
    /// What the agent did to the young generation when it loaded.
    pub enum YoungSizing {
        /// Lowered its largest size to half the budget.
        Fitted,
        /// Nothing: half the budget already holds its largest size.
        Roomy,
        /// Nothing: the command line sized it.
        User,
        /// Nothing: `young=keep`, or a policy other than `memliner`.
        Kept,
    }
}

/// The young generation as the agent found and left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct YoungDoc {
    pub sizing: YoungSizing,
    /// The most of the heap the collector may make young, in whole percent, as it runs (G1:
    /// `G1MaxNewSizePercent`; Parallel and Serial: `MaxNewSize` over the heap).
    pub max_percent: u64,
    /// The same before the agent loaded.
    pub jvm_max_percent: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PagerDoc {
    pub budget_pages: u64,
    pub resident_pages: u64,
    pub peak_resident_pages: u64,
    /// Resident heap pages as the kernel sees them (mincore), at the time of writing.
    pub resident_pages_mincore: u64,
    pub heap_pages: u64,
    /// The page store, as a URL (`tcp://HOST:PORT`, `local`).
    pub store: String,
    /// With several memory servers: each one's state, losses and rejoins, and the copies.
    #[serde(default)]
    pub replication: Option<crate::store_stats::ReplicationStats>,
    /// The end-to-end page checks (`checksums=on`): pages verified, pages that came back with
    /// wrong bytes (never installed).
    #[serde(default)]
    pub integrity: Option<crate::store_stats::IntegrityStats>,
    /// How faults were delivered: `signal` or `thread`.
    pub delivery: FaultDelivery,
    /// Faults served by the faulting thread itself (`faults=signal`).
    pub signal_faults: u64,
    /// `process_madvise` (batched) or `madvise`.
    pub discard: String,
    pub remote: RemoteDoc,
    pub evictions: EvictionsDoc,
    pub zero_filled_ahead: u64,
    /// Pages of zeros or dead bytes unprotected with the write fault before them (a freed
    /// young region left mapped write-protected, reused front to back).
    #[serde(default)]
    pub unprotected_ahead: u64,
    /// Pages a patched collector released (the regions it freed): dropped, local and
    /// remote, so that their reuse zero-fills locally.
    #[serde(default)]
    pub released: ReleasedDoc,
    /// Pages dropped as dead at the end of collections, read from a stock JDK's heap layout
    /// (free regions, the space above each region's or space's top).
    pub dead: DeadDoc,
    pub unmap_events: u64,
    /// Reclaim passes that found every charged page in flight.
    pub reclaim_found_all_in_flight: u64,
    pub cold: ColdDoc,
    /// Concurrent GC cycles whose threads read a remote page: from a marking (or other cycle
    /// work's) fault to G1's cleanup where the JVM's counters say it, else to 100 ms without
    /// such a fault. Refinement is not cycle work.
    pub concurrent_cycles: u64,
    /// The application's faults while such a cycle was under way.
    pub app_faults_in_concurrent_cycle: u64,
    pub latency: LatencyDoc,
    pub reclaim: ReclaimDoc,
    pub agent_cpu: AgentCpuDoc,
    /// How long the pager took to start: its per-page tables, its threads, registering the
    /// heap with userfaultfd and adopting the pages the JVM had touched (ms).
    #[serde(default)]
    pub start_ms: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteDoc {
    pub pages_read: u64,
    /// Of `pages_read`, read by prefetch.
    pub pages_prefetched: u64,
    pub pages_written: u64,
    pub pages_freed: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleasedDoc {
    pub pages: u64,
    /// Of those, pages only the store held: fetches of garbage saved.
    pub remote: u64,
    /// Pages released while mapped and left as they were, not in `pages`: the budget had room,
    /// so the JVM reuses them in place rather than zero-filling them again.
    #[serde(default)]
    pub left_mapped: u64,
    /// Of `left_mapped`, written pages of freed young regions write-protected in the pause:
    /// the JVM reuses them as eden with one write fault a run, and the reclaimer drops those
    /// it evicts first without a write-back.
    #[serde(default)]
    pub protected: u64,
}

/// Dead heap space dropped after collections (`dead=drop`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadDoc {
    /// Whether the collector's layout could be read (`false`: `why_not` says why).
    pub on: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why_not: Option<String>,
    /// Collections after which dead space was dropped.
    pub collections: u64,
    /// Time spent dropping it, inside those pauses.
    pub pause_ms: f64,
    pub free_region: DeadReasonDoc,
    pub above_top: DeadReasonDoc,
}

impl DeadDoc {
    pub fn pages(&self) -> u64 {
        self.free_region.pages + self.above_top.pages
    }

    pub fn remote(&self) -> u64 {
        self.free_region.remote + self.above_top.remote
    }

    pub fn mapped(&self) -> u64 {
        self.free_region.mapped + self.above_top.mapped
    }

    pub fn left_mapped(&self) -> u64 {
        self.free_region.left_mapped + self.above_top.left_mapped
    }

    pub fn protected(&self) -> u64 {
        self.free_region.protected + self.above_top.protected
    }
}

/// Pages dropped for one reason.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadReasonDoc {
    pub pages: u64,
    /// Of those, pages only the store held: fetches of dead bytes saved.
    pub remote: u64,
    /// Of those, pages that were mapped: budget given back at once.
    pub mapped: u64,
    /// Dead pages that were mapped and left as they were, not in `pages`: the budget had room,
    /// so the JVM reuses them in place rather than zero-filling them again.
    #[serde(default)]
    pub left_mapped: u64,
    /// Of `left_mapped`, written pages of freed young regions write-protected in the pause
    /// (see `ReleasedDoc::protected`).
    #[serde(default)]
    pub protected: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvictionsDoc {
    pub clean: u64,
    pub dirty: u64,
    pub zero: u64,
}

impl EvictionsDoc {
    pub fn total(&self) -> u64 {
        self.clean + self.dirty + self.zero
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColdDoc {
    pub evicted: u64,
    pub promoted: u64,
    pub demoted_after_pause: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyDoc {
    /// Every fault, service time.
    pub all: Percentiles,
    /// Remote faults, service time.
    pub remote: Percentiles,
    /// Remote faults as the faulting thread sees them (the probe).
    pub thread_remote: Percentiles,
    /// Local faults as the faulting thread sees them (the probe, `faults=signal`).
    pub thread_local: Percentiles,
}

/// A latency histogram's summary; the percentiles are absent when nothing was recorded.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Percentiles {
    pub count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_us: Option<f64>,
}

/// The reclaimer: what sampling cost (local reactivation faults) and found, where refaults
/// came from, and the lists over the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReclaimDoc {
    /// `lru` or `fifo`.
    pub mode: Replacement,
    pub watermarks_pages: Watermarks,
    /// Unmapped pages waiting for a touch (write-backs included), and the list's target.
    pub inactive_pages: u64,
    pub inactive_target_pages: u64,
    pub target_grown: u64,
    pub target_shrunk: u64,
    pub cost_local_fault_us: f64,
    pub cost_remote_fault_us: f64,
    /// Refaults per eviction at the end (recent epochs): the bar prefetch windows must clear.
    #[serde(default)]
    pub refaults_per_eviction: f64,
    /// Pages unmapped to sample their use, and those touched again (local faults).
    pub deactivated: u64,
    pub reactivated: u64,
    pub reactivated_in_writeback: u64,
    /// Refaults within the active list's size: part of the working set, activated at once.
    pub workingset_activations: u64,
    /// Refaults from farther away: on probation.
    pub distant_refaults: u64,
    /// Pages activated at the probation front for a write seen while mapped.
    pub referenced_activations: u64,
    /// Active pages moved back to probation (aging).
    pub aged: u64,
    /// Active pages that passed the front and stayed on heat (refaulted soon after eviction).
    #[serde(default)]
    pub heat_rotations: u64,
    /// Refault distances, in fractions and multiples of the budget.
    pub refault_distance: Vec<DistanceBucketDoc>,
    /// Prefetched pages evicted without a use seen since they came.
    pub prefetched_evicted_unused: u64,
    /// Trips past the inactive front that pages with cards the collector had yet to read
    /// were kept for (`card_hold=on`), and such pages evicted all the same.
    #[serde(default)]
    pub card_holds: u64,
    #[serde(default)]
    pub evicted_pending_card: u64,
    /// Pages of a concurrently evacuating collector's collection set that its threads read
    /// back within the working set's distance of their eviction: kept on probation instead of
    /// cold (`policy=memliner`).
    #[serde(default)]
    pub cold_rereads_kept: u64,
    /// Pages deactivated while a pipe held them across their discard: no write-protect, one
    /// TLB shootdown for the batch (vmsplice; pages adopted at registration, or a kernel that
    /// refuses, go the other way).
    #[serde(default)]
    pub deactivated_in_pipe: u64,
    /// Clean pages the reclaimer chose while the sampling window was closed (target 0):
    /// evicted at once, as the store's copy is current, instead of unmapped into a slot.
    #[serde(default)]
    pub dropped_unsampled: u64,
    /// Write-protect calls of deactivations (one TLB shootdown each): one per run of dirty
    /// victims not held in a pipe.
    #[serde(default)]
    pub deactivation_write_protects: u64,
    pub direct_reclaims: u64,
    /// Pages a fault's (or prefetch worker's) own reclaim made room with by dropping an
    /// inactive page that needed no write-back, instead of writing back or deactivating.
    #[serde(default)]
    pub direct_dropped: u64,
    /// Changes to the replacement lists (a page mapped, a first write) that a fault or
    /// prefetch left to the lists' next holder instead of waiting for their lock.
    #[serde(default)]
    pub deferred_list_changes: u64,
    pub background_passes: u64,
    pub background_evicted: u64,
    /// The lists' lengths over the run (at most 257 samples, the last one at writing).
    pub timeline: Vec<ListSampleDoc>,
}

/// Refaults whose distance (pages that left the inactive list since the eviction) is below
/// `below_budgets` budgets (`None`: the rest).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DistanceBucketDoc {
    pub below_budgets: Option<f64>,
    pub refaults: u64,
}

/// The lists' lengths at one moment, in pages.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListSampleDoc {
    pub ms: f64,
    pub cold: u64,
    pub probation: u64,
    pub active: u64,
    pub inactive: u64,
    pub writeback: u64,
    /// Charged pages on no list: prefetch markers, pages in flight.
    pub other: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Watermarks {
    pub low: u64,
    pub high: u64,
}

/// CPU seconds of the agent's threads by role, and the time faulting threads spent serving
/// their own faults (`faults=signal`: wall time, an upper bound of its CPU).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentCpuDoc {
    pub fault_handlers_s: f64,
    pub reclaimer_s: f64,
    pub prefetch_s: f64,
    pub probe_s: f64,
    pub signal_service_s: f64,
    pub total_s: f64,
    /// `total_s` per remote fault, in µs; `None` without remote faults.
    pub per_remote_fault_us: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultsDoc {
    pub by_class: ByClass<ClassFaults>,
    /// Every fault but stale ones (already served when handled).
    pub total: u64,
    pub zero: u64,
    pub remote: u64,
    pub write: u64,
    pub stale: u64,
    pub prefetch_hit: u64,
    pub reactivate: u64,
    pub gc_share_of_remote: Option<f64>,
    pub gc_share_of_all: Option<f64>,
}

/// One thread class's faults by kind (`FaultKind::name`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassFaults {
    pub zero: u64,
    pub remote: u64,
    pub write: u64,
    pub stale: u64,
    pub prefetch_hit: u64,
    pub reactivate: u64,
    /// All but stale.
    pub total: u64,
}

/// One value per thread class, named as `ThreadClass::name`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ByClass<T> {
    pub application: T,
    pub gc: T,
    #[serde(rename = "gc-concurrent")]
    pub gc_concurrent: T,
    pub jit: T,
    pub vm: T,
    pub other: T,
}

impl<T> ByClass<T> {
    pub fn get(&self, c: ThreadClass) -> &T {
        match c {
            ThreadClass::Application => &self.application,
            ThreadClass::Gc => &self.gc,
            ThreadClass::GcConcurrent => &self.gc_concurrent,
            ThreadClass::Jit => &self.jit,
            ThreadClass::Vm => &self.vm,
            ThreadClass::Other => &self.other,
        }
    }

    pub fn get_mut(&mut self, c: ThreadClass) -> &mut T {
        match c {
            ThreadClass::Application => &mut self.application,
            ThreadClass::Gc => &mut self.gc,
            ThreadClass::GcConcurrent => &mut self.gc_concurrent,
            ThreadClass::Jit => &mut self.jit,
            ThreadClass::Vm => &mut self.vm,
            ThreadClass::Other => &mut self.other,
        }
    }

    /// (class, value) in `ThreadClass::ALL` order.
    pub fn iter(&self) -> impl Iterator<Item = (ThreadClass, &T)> {
        ThreadClass::ALL
            .iter()
            .copied()
            .map(move |c| (c, self.get(c)))
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefetchDoc {
    /// The policy whose streams these are.
    pub policy: String,
    pub all: PrefetchClassDoc,
    pub by_class: ByClass<PrefetchClassDoc>,
}

/// Prefetch figures of one stream class (or all).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefetchClassDoc {
    pub windows: u64,
    pub pages: u64,
    pub marker_hits: u64,
    pub marker_misses: u64,
    pub hit_pages: u64,
    pub dropped_windows: u64,
    pub dropped_low_reserve: u64,
    /// Windows not sent: used less often than evicted pages came back.
    #[serde(default)]
    pub gated_windows: u64,
    /// Windows along a trend read while the reserve was low, reclaiming for their pages.
    #[serde(default)]
    pub reclaimed_windows: u64,
    /// Windows along a trend read by the faulting thread itself, with its miss.
    #[serde(default)]
    pub sync_windows: u64,
    pub demand_faults: u64,
    /// Marker hits / markers resolved.
    pub accuracy: Option<f64>,
    /// Pages of hit windows / (those + demand faults).
    pub coverage: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GcDoc {
    pub pauses: u64,
    pub pause_total_ms: f64,
    pub pause_max_ms: f64,
    /// Pauses by kind, as the JVM's collector counters (hsperfdata) say: young and mixed
    /// collections, full collections, G1's remark and cleanup (all incremental without them).
    #[serde(default)]
    pub incremental_pauses: u64,
    #[serde(default)]
    pub full_pauses: u64,
    #[serde(default)]
    pub remark_cleanup_pauses: u64,
    /// Pages read in bulk for pauses (`pause_reads=on`): their young regions' remote pages
    /// and their cards'; and those left to the pauses' own faults (too many in flight, the
    /// reserve low).
    #[serde(default)]
    pub pause_read_pages: u64,
    #[serde(default)]
    pub pause_read_dropped: u64,
    /// Of those, the pages of the dirty cards read just ahead of a pause's card scan (from its
    /// first fault in a granule of the heap to the granule's end), and those left to it.
    #[serde(default)]
    pub scan_ahead_pages: u64,
    #[serde(default)]
    pub scan_ahead_dropped: u64,
    /// Pages read after pauses for the dirty cards they left in old regions, which refinement
    /// threads scan next (`card_hold=on`), and those left to the threads' own faults.
    #[serde(default)]
    pub card_read_pages: u64,
    #[serde(default)]
    pub card_read_dropped: u64,
    /// Pages read for refinement passes before they start (a GC-hook patched G1 names the
    /// cards each pass is about to refine; its thread reads them), and those left to the
    /// passes' own faults.
    #[serde(default)]
    pub refine_read_pages: u64,
    #[serde(default)]
    pub refine_read_dropped: u64,
}

/// GC threads' remote faults by what the collector was doing (`gc_activity`): one entry per
/// activity, keys as `GcActivity::name`. The entries sum to the `gc` and `gc-concurrent`
/// classes' remote faults.
pub type GcFaultsDoc = std::collections::BTreeMap<GcActivity, ActivityDoc>;

/// One activity's remote faults and the time the GC threads spent waiting on them (the
/// faulting thread's own service time under `faults=signal`, the handler's otherwise).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActivityDoc {
    pub remote: u64,
    pub wait_ms: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessDoc {
    pub peak_rss_bytes: Option<u64>,
    pub rss_bytes: Option<u64>,
    /// The agent's own memory: bytes its code holds allocated (per-page tables, lists,
    /// histograms, logs, buffers) when the document was written, and the most at once.
    #[serde(default)]
    pub agent_bytes: u64,
    #[serde(default)]
    pub agent_peak_bytes: u64,
}

impl StatsDoc {
    /// Parses a stats document; an error names what is missing or malformed.
    pub fn parse(text: &str) -> Result<StatsDoc, String> {
        let doc: StatsDoc = serde_json::from_str(text)
            .map_err(|e| format!("not a memliner stats document: {e}"))?;
        if doc.version != VERSION {
            return Err(format!(
                "stats document version {} (this memliner reads version {VERSION})",
                doc.version
            ));
        }
        Ok(doc)
    }
}

impl StatsDoc {
    /// A small, consistent document (a G1 heap of 64 MiB at 25% over TCP), for the tests of
    /// whatever reads documents.
    pub fn sample() -> StatsDoc {
        let class = |total: u64, remote: u64| ClassFaults {
            zero: total - remote,
            remote,
            total,
            ..ClassFaults::default()
        };
        let pf = |accuracy: Option<f64>, coverage: Option<f64>| PrefetchClassDoc {
            accuracy,
            coverage,
            ..PrefetchClassDoc::default()
        };
        StatsDoc {
            version: VERSION,
            policy: Policy::MemLiner,
            wall_ms: 1500.0,
            heap: Some(HeapDoc {
                base: "0x7f0000000000".into(),
                bytes: 64 << 20,
                collector: "G1".into(),
                discovery: Discovery::VmStructs,
                spans: 1,
                young: Some(YoungDoc {
                    sizing: YoungSizing::Fitted,
                    max_percent: 12,
                    jvm_max_percent: 60,
                }),
            }),
            pager: Some(PagerDoc {
                budget_pages: 4096,
                resident_pages: 4000,
                peak_resident_pages: 4000,
                resident_pages_mincore: 3990,
                heap_pages: 16384,
                store: "tcp://127.0.0.1:1".into(),
                replication: None,
                integrity: None,
                delivery: FaultDelivery::Signal,
                signal_faults: 90,
                discard: "process_madvise".into(),
                remote: RemoteDoc {
                    pages_read: 10,
                    pages_prefetched: 0,
                    pages_written: 5,
                    pages_freed: 0,
                },
                evictions: EvictionsDoc {
                    clean: 1,
                    dirty: 2,
                    zero: 3,
                },
                zero_filled_ahead: 0,
                unprotected_ahead: 0,
                released: ReleasedDoc::default(),
                dead: DeadDoc::default(),
                unmap_events: 0,
                reclaim_found_all_in_flight: 0,
                cold: ColdDoc {
                    evicted: 0,
                    promoted: 0,
                    demoted_after_pause: 0,
                },
                concurrent_cycles: 0,
                app_faults_in_concurrent_cycle: 0,
                latency: LatencyDoc {
                    all: Percentiles {
                        count: 100,
                        p50_us: Some(4.0),
                        p99_us: Some(20.0),
                        max_us: Some(50.0),
                    },
                    remote: Percentiles::default(),
                    thread_remote: Percentiles {
                        count: 7,
                        p50_us: Some(30.0),
                        p99_us: Some(90.0),
                        max_us: Some(95.0),
                    },
                    thread_local: Percentiles::default(),
                },
                reclaim: ReclaimDoc {
                    mode: Replacement::Lru,
                    watermarks_pages: Watermarks {
                        low: 128,
                        high: 256,
                    },
                    inactive_pages: 0,
                    inactive_target_pages: 1024,
                    target_grown: 0,
                    target_shrunk: 0,
                    cost_local_fault_us: 5.0,
                    cost_remote_fault_us: 40.0,
                    refaults_per_eviction: 0.5,
                    deactivated: 900,
                    reactivated: 300,
                    reactivated_in_writeback: 0,
                    workingset_activations: 20,
                    distant_refaults: 5,
                    referenced_activations: 40,
                    aged: 100,
                    heat_rotations: 10,
                    refault_distance: vec![
                        DistanceBucketDoc {
                            below_budgets: Some(0.0625),
                            refaults: 20,
                        },
                        DistanceBucketDoc {
                            below_budgets: None,
                            refaults: 5,
                        },
                    ],
                    prefetched_evicted_unused: 3,
                    card_holds: 40,
                    evicted_pending_card: 7,
                    cold_rereads_kept: 4,
                    deactivated_in_pipe: 300,
                    dropped_unsampled: 40,
                    deactivation_write_protects: 6,
                    direct_reclaims: 2,
                    direct_dropped: 1,
                    deferred_list_changes: 20,
                    background_passes: 10,
                    background_evicted: 600,
                    timeline: vec![ListSampleDoc {
                        ms: 1000.0,
                        active: 2000,
                        probation: 1500,
                        inactive: 400,
                        ..ListSampleDoc::default()
                    }],
                },
                start_ms: 3.5,
                agent_cpu: AgentCpuDoc {
                    fault_handlers_s: 0.8,
                    reclaimer_s: 0.4,
                    prefetch_s: 0.1,
                    probe_s: 0.0,
                    signal_service_s: 0.2,
                    total_s: 1.5,
                    per_remote_fault_us: Some(12.5),
                },
            }),
            faults: FaultsDoc {
                by_class: ByClass {
                    application: class(25, 10),
                    gc: class(75, 30),
                    ..ByClass::default()
                },
                total: 100,
                zero: 60,
                remote: 40,
                write: 0,
                stale: 0,
                prefetch_hit: 0,
                reactivate: 0,
                gc_share_of_remote: Some(0.75),
                gc_share_of_all: Some(0.75),
            },
            prefetch: Some(PrefetchDoc {
                policy: "memliner".into(),
                all: PrefetchClassDoc {
                    pages: 300,
                    windows: 40,
                    ..pf(Some(0.9), Some(0.5))
                },
                by_class: ByClass {
                    application: pf(Some(0.95), None),
                    ..ByClass::default()
                },
            }),
            gc: GcDoc {
                pauses: 3,
                pause_total_ms: 12.0,
                pause_max_ms: 6.0,
                incremental_pauses: 2,
                full_pauses: 0,
                remark_cleanup_pauses: 1,
                pause_read_pages: 0,
                pause_read_dropped: 0,
                scan_ahead_pages: 0,
                scan_ahead_dropped: 0,
                card_read_pages: 0,
                card_read_dropped: 0,
                refine_read_pages: 0,
                refine_read_dropped: 0,
            },
            // The sample's 30 remote faults of the `gc` class.
            gc_faults: GcActivity::ALL
                .iter()
                .map(|&a| {
                    let remote = match a {
                        GcActivity::YoungEvacuation => 20,
                        GcActivity::CardScan => 10,
                        _ => 0,
                    };
                    let wait_ms = remote as f64 * 10.0;
                    (a, ActivityDoc { remote, wait_ms })
                })
                .collect(),
            gc_hooks: GcHooksDoc::default(),
            jdk: "17.0.19+10-1~deb12u2".into(),
            process: ProcessDoc {
                peak_rss_bytes: Some(200 << 20),
                rss_bytes: Some(190 << 20),
                agent_bytes: 1 << 20,
                agent_peak_bytes: 2 << 20,
            },
        }
    }
}

/// The document's fields as Markdown table rows (`| path | kind | example |`), generated from
/// [`StatsDoc::sample`] with its optional parts filled in: docs/stats-and-metrics.md carries
/// them, and a test fails when the two differ. Per-class and per-activity objects are written
/// once, as `<class>` and `<activity>`; a list's items as `[]`.
pub fn reference_rows() -> String {
    let mut doc = StatsDoc::sample();
    if let Some(pager) = doc.pager.as_mut() {
        pager.replication = Some(crate::store_stats::ReplicationStats {
            servers: vec![crate::store_stats::ServerReplicaStats::default()],
            ..Default::default()
        });
        pager.integrity = Some(crate::store_stats::IntegrityStats::default());
    }
    let value = serde_json::to_value(&doc).unwrap_or_default();
    let mut rows = Vec::new();
    walk(&value, "", &mut rows);
    let mut text = String::from("| field | kind | example |\n|---|---|---|\n");
    for (path, kind, example) in rows {
        text += &format!("| `{path}` | {kind} | {example} |\n");
    }
    text
}

/// Appends the leaves under `v` at `path` (sorted, as serde_json's maps are).
fn walk(v: &serde_json::Value, path: &str, rows: &mut Vec<(String, &'static str, String)>) {
    use serde_json::Value;
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match v {
        Value::Object(m) => {
            // An object keyed by every thread class (or every activity) and nothing else.
            let keyed_by =
                |names: &[&str]| names.len() == m.len() && names.iter().all(|n| m.contains_key(*n));
            let classes: Vec<&str> = ThreadClass::ALL.iter().map(|c| c.name()).collect();
            let activities: Vec<&str> = GcActivity::ALL.iter().map(|a| a.name()).collect();
            let placeholder = if keyed_by(&classes) {
                Some("<class>")
            } else if keyed_by(&activities) {
                Some("<activity>")
            } else {
                None
            };
            match (placeholder, m.values().next()) {
                (Some(p), Some(first)) => walk(first, &join(p), rows),
                _ => {
                    for (k, v) in m {
                        walk(v, &join(k), rows);
                    }
                }
            }
        }
        Value::Array(a) => match a.first() {
            Some(first) => walk(first, &format!("{path}[]"), rows),
            None => rows.push((path.to_string(), "list", "[]".into())),
        },
        Value::Bool(b) => rows.push((path.to_string(), "true/false", b.to_string())),
        Value::Number(n) if n.is_f64() => rows.push((path.to_string(), "number", n.to_string())),
        Value::Number(n) => rows.push((path.to_string(), "count", n.to_string())),
        Value::String(t) => rows.push((path.to_string(), "text", format!("`{t}`"))),
        Value::Null => rows.push((path.to_string(), "number or null", "null".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_round_trips_and_a_missing_field_is_named() {
        let doc = StatsDoc::sample();
        let text = serde_json::to_string(&doc).unwrap();
        assert_eq!(StatsDoc::parse(&text).unwrap(), doc);
        // Class names as the thread classes name themselves.
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        for &c in ThreadClass::ALL {
            assert!(
                v["faults"]["by_class"][c.name()].is_object(),
                "{}",
                c.name()
            );
        }
        let mut v = v;
        v["pager"]
            .as_object_mut()
            .unwrap()
            .remove("peak_resident_pages");
        let err = StatsDoc::parse(&v.to_string()).unwrap_err();
        assert!(err.contains("missing field `peak_resident_pages`"), "{err}");
        v["version"] = 1.into();
        assert!(StatsDoc::parse(&v.to_string()).is_err());
    }

    #[test]
    fn enums_are_written_as_their_names_and_no_other_name_reads() {
        let v = serde_json::to_value(StatsDoc::sample()).unwrap();
        assert_eq!(v["policy"], Policy::MemLiner.name());
        assert_eq!(v["heap"]["discovery"], Discovery::VmStructs.name());
        assert_eq!(v["pager"]["delivery"], FaultDelivery::Signal.name());
        assert_eq!(v["pager"]["reclaim"]["mode"], "lru");
        for p in [Policy::Off, Policy::Baseline, Policy::MemLiner] {
            assert_eq!(serde_json::to_value(p).unwrap(), p.name());
        }
        for d in [FaultDelivery::Thread, FaultDelivery::Signal] {
            assert_eq!(serde_json::to_value(d).unwrap(), d.name());
        }
        for d in [Discovery::VmStructs, Discovery::Maps] {
            assert_eq!(serde_json::to_value(d).unwrap(), d.name());
        }
        let mut bad = v.clone();
        bad["pager"]["delivery"] = "SIGNAL".into();
        let err = StatsDoc::parse(&bad.to_string()).unwrap_err();
        assert!(err.contains("unknown variant `SIGNAL`"), "{err}");
    }

    #[test]
    fn the_stats_reference_lists_every_field_as_the_code_writes_it() {
        let page = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/stats-and-metrics.md"
        ));
        let rows = reference_rows();
        assert!(rows.lines().count() > 100, "{rows}");
        assert!(
            rows.contains("| `faults.by_class.<class>.remote` | count |"),
            "{rows}"
        );
        assert!(
            rows.contains("| `gc_faults.<activity>.wait_ms` | number |"),
            "{rows}"
        );
        assert!(
            rows.contains("| `pager.replication.servers[].up` | true/false |"),
            "{rows}"
        );
        assert!(
            page.contains(&rows),
            "docs/stats-and-metrics.md's field reference differs from the stats document's \
             types (contracts/src/stats.rs); its rows should read:\n{rows}"
        );
    }
}
