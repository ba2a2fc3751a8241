//! The user-space pager: serves faults on a registered region from a local budget of pages,
//! evicting to a [`PageStore`] in the background so that a fault rarely waits for eviction.
//!
//! # Page states (`page_table`)
//! ```text
//! Untouched --first touch (zero fill)--> CleanZero (read) | Dirty (write)
//! Remote    --fetch------------------->  Clean (read)     | Dirty (write)
//! Clean/CleanZero --write (WP fault)---> Dirty
//! Clean   --released, left mapped----->  CleanZero (the store's copy forgotten: dead bytes)
//! Dirty   --released young, protected->  CleanZero (write-protected in the pause: dead bytes)
//! CleanZero --deactivate (reclaimer)-->  Untouched (zeros or dead bytes: no slot needed)
//! Clean/Dirty --deactivate (reclaimer)-> InactiveClean | InactiveDirty  (bytes in a slot)
//! Inactive --touch (local fault)------>  mapped again, referenced
//! InactiveClean --evict--------------->  Remote (stored copy current) | Untouched (zeros)
//! InactiveDirty --evict--> Writeback --> Remote (written back) | Untouched (all zeros)
//! ```
//! Every transition goes through a `Claim` (a compare-and-swap to `Busy`), which owns the
//! budget charge and the residency byte and restores the old state if dropped unfinished.
//! Pages are mapped write-protected after a read fault, so the first write is seen (a WP
//! fault) and a page that was only read is dropped at eviction without a write-back.
//!
//! # Parts, each with one owner
//! - `context`: the region, page table, userfaultfd, store, OS calls, counters, config;
//! - `budget`: the only place that charges a page, with one rule per purpose;
//! - `reclaim`: the replacement lists, the slots of unmapped pages, the sampling window's
//!   size; unmaps, writes back and evicts (its thread keeps a free reserve); `splice` holds a
//!   batch's pages in a pipe across their discard, so that it costs one TLB shootdown;
//! - `prefetch_io`: the streams, the windows in flight and the markers (its workers fetch);
//! - `phases`: what is known of the collector's pauses and cycles;
//! - `fault`: the handler, which holds references to the others and maps pages one way;
//! - `release` and `remap`: dropping ranges whose contents do not matter, following the
//!   JVM's re-mappings. This module only wires them up.
//!
//! # Threads
//! Fault handlers (`fault`) serve faults and block in poll when idle; the reclaimer keeps a
//! reserve of free budget; prefetch workers fetch the windows streams ask for; a probe
//! (`probe`) measures fault latency as a faulting thread sees it. None of them spins unless a
//! core is idle (`memliner_cpu::spin`).
//!
//! # Rules the handler keeps
//! It never touches a page that is not local (it would wait on itself), runs with every
//! signal blocked, and stops the process with a fatal message rather than map wrong bytes.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use swap_backend::{PageStore, PAGE_SIZE};

use crate::maps::Span;
use crate::model::{FaultDelivery, ThreadClassifier};
use crate::uffd::{self, Uffd};

mod attribution;
mod bits;
mod config;
mod context;
mod counters;
mod fault;
mod os;
mod page_table;
mod parts;
mod pause_reads;
mod phases;
mod prefetch_io;
mod probe;
mod reclaim;
mod release;
mod remap;
mod signal;
mod splice;

pub use attribution::ActivityCount;
pub use config::{FatalFn, PagerConfig, Replacement, Window};
pub use counters::{Latencies, LatencyBuckets, PagerCounters, Role, CYCLE_GAP, LATENCY_BOUNDS_NS};
use pause_reads::PauseReads;
pub use pause_reads::{CardReader, SCAN_AHEAD};
pub use reclaim::{CardCheck, Decisions, ListSample, ReclaimCounters, DISTANCE_BUCKETS};

use context::Ctx;
use page_table::budget::Budget;
use parts::Parts;
use phases::Phases;
use prefetch_io::Prefetcher;
use reclaim::Reclaimer;

/// A running pager. Dropping it stops its threads and unregisters the region (only for
/// tests: a JVM's heap must stay paged until the process exits).
pub struct Pager {
    parts: Arc<Parts>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// How long `start` took: the per-page tables, the threads, registering the heap with
    /// userfaultfd and adopting the pages the JVM had touched.
    start_time: std::time::Duration,
    /// Whether dead space's mapped pages are dropped (see `release`).
    room: release::Room,
}

impl std::fmt::Debug for Pager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pager")
            .field("base", &format_args!("{:#x}", self.parts.ctx.base))
            .field("pages", &self.parts.ctx.npages)
            .field("budget", &self.parts.budget.pages())
            .finish()
    }
}

/// Starts one of our threads: every signal blocked, its id recorded, a panic turned into a
/// fatal stop (a dead handler would hang every thread that touches a paged-out page).
fn spawn(
    parts: &Arc<Parts>,
    role: Role,
    index: usize,
    body: impl FnOnce(&Parts) + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let p = parts.clone();
    let (name, what) = match role {
        Role::FaultHandler => (format!("memliner-fault{index}"), "fault handler"),
        Role::Reclaimer => ("memliner-reclaim".into(), "reclaimer"),
        Role::Prefetcher => (format!("memliner-prefetch{index}"), "prefetch worker"),
        Role::Probe => ("memliner-probe".into(), "latency probe"),
    };
    os::spawn_blocking_signals(name, move || {
        // A copy from a `unix://` server's memory file that the server emptied raises SIGBUS:
        // blocked, it would kill the process without a word; unblocked, the agent's handler
        // stops the JVM naming the server (the pager's threads never fault on the heap).
        os::unblock_sigbus();
        p.ctx
            .threads
            .lock()
            .unwrap()
            .push((role, memliner_cpu::gettid()));
        let fatal = p.ctx.fatal;
        let run = std::panic::AssertUnwindSafe(|| body(&p));
        if let Err(e) = std::panic::catch_unwind(run) {
            let why = e
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| e.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            fatal(&format!("{what} {index} crashed: {why}"));
        }
    })
}

impl Pager {
    /// Starts the pager's threads, then registers `spans` (all within `[base, base+len)`) and
    /// adopts pages already resident there.
    pub fn start(
        base: usize,
        len: usize,
        spans: &[Span],
        config: PagerConfig,
        store: Box<dyn PageStore>,
        classifier: Box<dyn ThreadClassifier>,
        fatal: FatalFn,
    ) -> std::io::Result<Pager> {
        assert_eq!(base % PAGE_SIZE, 0);
        let started = Instant::now();
        let npages = len / PAGE_SIZE;
        let features =
            uffd::FEATURE_PAGEFAULT_FLAG_WP | uffd::FEATURE_THREAD_ID | uffd::FEATURE_EVENT_UNMAP;
        // Signal delivery needs our SIGBUS handler to run first (see `signal`): where it cannot
        // be installed so (a library interposing sigaction, such as libjsig), handler threads.
        let mut by_signal = config.delivery == FaultDelivery::Signal
            && signal::SUPPORTED
            && signal::install().is_ok();
        let uffd = match by_signal.then(|| Uffd::open(features | uffd::FEATURE_SIGBUS)) {
            Some(Ok(u)) => u,
            // A kernel without SIGBUS delivery: handler threads.
            Some(Err(e)) if e.kind() == std::io::ErrorKind::Unsupported => {
                by_signal = false;
                Uffd::open(features)?
            }
            Some(Err(e)) => return Err(e),
            None => Uffd::open(features)?,
        };
        // With signal delivery one handler thread reads the events that are not faults.
        let handlers = if by_signal { 1 } else { config.handlers.max(1) };
        let prefetching = config.prefetch_depth > 0;
        let ctx = Arc::new(Ctx {
            uffd,
            by_signal,
            base,
            npages,
            table: page_table::PageTable::new(npages),
            spans: Mutex::new(Vec::new()),
            store,
            classifier,
            counters: PagerCounters::default(),
            // One per handler thread, one for faults served by signal, one for the probe.
            latencies: (0..handlers + 2)
                .map(|_| Mutex::new(Latencies::new()))
                .collect(),
            threads: Mutex::new(Vec::new()),
            probe_tid: AtomicU32::new(0),
            probe_source: AtomicUsize::new(0),
            fatal,
            stop: AtomicBool::new(false),
            wakeup: os::eventfd()?,
            madvise: os::Madvise::probe(),
            unlocked: AtomicBool::new(false),
            epoch: Instant::now(),
            config,
        });
        let budget = Arc::new(Budget::new(ctx.clone()));
        let phases = Arc::new(Phases::new(budget.pages()));
        let reclaim = Arc::new(Reclaimer::new(ctx.clone(), budget.clone(), phases.clone())?);
        // A pause logs at most a heap's worth of faults (each page once, on average).
        let attribution = Arc::new(attribution::Attribution::new(npages.max(1 << 16), base));
        let prefetch = prefetching.then(|| {
            Arc::new(Prefetcher::new(
                ctx.clone(),
                budget.clone(),
                reclaim.clone(),
                attribution.clone(),
            ))
        });
        let pause_reads = PauseReads::new(ctx.npages);
        let parts = Arc::new(Parts {
            ctx,
            budget,
            phases,
            attribution,
            pause_reads,
            reclaim,
            prefetch,
        });
        if by_signal {
            // Before the first registration (from then on a fault raises SIGBUS) and before
            // the probe names its page.
            signal::register(&parts)?;
        }
        // The handlers run before the first registration: a registered range with no handler
        // hangs whoever touches it.
        let mut threads = Vec::new();
        for i in 0..handlers {
            threads.push(spawn(&parts, Role::FaultHandler, i, move |p| {
                fault::Handler::new(p, i).run()
            })?);
        }
        let t = spawn(&parts, Role::Reclaimer, 0, |p| p.reclaim.run())?;
        parts.budget.set_reclaimer(t.thread().clone());
        threads.push(t);
        if let Some(prefetch) = &parts.prefetch {
            let mut workers = Vec::new();
            for i in 0..parts.ctx.config.prefetch_workers.max(1) {
                let t = spawn(&parts, Role::Prefetcher, i, |p| {
                    p.prefetch
                        .as_ref()
                        .expect("workers run with prefetch")
                        .worker()
                })?;
                workers.push(t.thread().clone());
                threads.push(t);
            }
            prefetch.set_workers(workers);
        }
        if let Some(every) = parts.ctx.config.probe_every {
            threads.push(spawn(&parts, Role::Probe, 0, move |p| {
                probe::run(p, every)
            })?);
        }
        let mut pager = Pager {
            parts,
            threads,
            start_time: Default::default(),
            room: Default::default(),
        };
        for span in spans {
            remap::register_and_adopt(&pager.parts, span.start, span.end, false)?;
        }
        pager.start_time = started.elapsed();
        // Adopted pages may exceed the budget: have the reclaimer trim now.
        pager.parts.budget.wake_reclaimer();
        Ok(pager)
    }

    pub fn base(&self) -> usize {
        self.parts.ctx.base
    }

    pub fn npages(&self) -> usize {
        self.parts.ctx.npages
    }

    /// How long starting took (tables, threads, registration, adoption).
    pub fn start_time(&self) -> std::time::Duration {
        self.start_time
    }

    pub fn budget_pages(&self) -> usize {
        self.parts.budget.pages()
    }

    /// Pages charged against the budget: mapped, inactive, prefetch markers, in flight.
    pub fn resident_pages(&self) -> usize {
        self.parts.budget.charged()
    }

    pub fn peak_resident_pages(&self) -> usize {
        self.parts.ctx.table.peak()
    }

    /// How often the inactive list's target grew and shrank, and the (local, remote) fault
    /// costs in ns it was balanced with.
    pub fn inactive_sizing(&self) -> (u64, u64, (u64, u64)) {
        let s = self.parts.reclaim.sizer();
        (
            s.grown.load(Ordering::Relaxed),
            s.shrunk.load(Ordering::Relaxed),
            s.costs.estimate(),
        )
    }

    /// Pages waiting inactive (unmapped, bytes local), and the list's current target.
    pub fn inactive_pages(&self) -> (usize, usize) {
        let r = &self.parts.reclaim;
        (r.inactive_pages(), r.inactive_target())
    }

    /// Refaults per eviction over the recent evictions (see `reclaim::pressure`).
    pub fn refaults_per_eviction(&self) -> f64 {
        self.parts.reclaim.pressure()
    }

    /// Free pages the reclaimer keeps in reserve: (low, high) watermarks.
    pub fn watermarks(&self) -> (usize, usize) {
        (self.parts.budget.low, self.parts.budget.high)
    }

    /// How faults are delivered (after any fallback).
    pub fn delivery(&self) -> FaultDelivery {
        if self.parts.ctx.by_signal {
            FaultDelivery::Signal
        } else {
            FaultDelivery::Thread
        }
    }

    /// Whether references are sampled (an inactive list of unmapped pages).
    pub fn sampling(&self) -> bool {
        self.parts.reclaim.sampling()
    }

    pub fn replacement(&self) -> Replacement {
        self.parts.reclaim.replacement()
    }

    pub fn counters(&self) -> &PagerCounters {
        &self.parts.ctx.counters
    }

    pub fn reclaim_counters(&self) -> &ReclaimCounters {
        &self.parts.reclaim.counters
    }

    /// The replacement's decisions so far (working-set activations, refault distances).
    pub fn decisions(&self) -> Decisions {
        self.parts.reclaim.decisions()
    }

    /// The lists' lengths over the run, ending with a sample now.
    pub fn timeline(&self) -> Vec<ListSample> {
        self.parts.reclaim.timeline()
    }

    /// The lists' lengths as the reclaimer last sampled them (for `/metrics`: no lock the
    /// fault path takes).
    pub fn latest_lists(&self) -> ListSample {
        self.parts.reclaim.latest_sample()
    }

    /// Prefetch counters, when prefetching is on.
    pub fn prefetch_counters(&self) -> Option<&crate::prefetch::PrefetchCounters> {
        self.parts.prefetch.as_ref().map(|p| &p.counters)
    }

    pub fn policy_name(&self) -> &'static str {
        self.parts.ctx.config.policy.name()
    }

    /// Waits until the reclaimer has filled its reserve of free budget and sleeps (for tests
    /// that need reclaim not to run at a given moment).
    pub fn settle(&self) {
        self.parts.reclaim.settle()
    }

    /// Holds the replacement lists until the value drops, as the reclaimer does for a batch:
    /// for tests of what faults do meanwhile.
    #[doc(hidden)]
    pub fn hold_lists(&self) -> impl Sized + '_ {
        self.parts.reclaim.hold_lists()
    }

    /// A stop-the-world GC pause has ended (JVMTI GarbageCollectionFinish): the pages its
    /// GC threads brought in become cold at the next reclaim, and its remote faults are
    /// attributed by `facts`, its kind and the ranges it left free, with the regions it
    /// started with (`None`: nothing is known of the pause; they are `pause_other`); `after`,
    /// the regions now, tells a concurrently evacuating collector's work until the next pause.
    /// Never blocks on the network: it may be called from the GC's own callback.
    pub fn gc_pause_finished(
        &self,
        facts: Option<(crate::gc_activity::PauseKind, &[(usize, usize)])>,
        after: crate::gc_activity::RegionMap,
    ) {
        self.parts
            .attribution
            .pause_ended(facts, after, &mut |_, _| {});
        self.parts.phases.pause_finished();
        self.room.collection_ended(&self.parts.ctx);
    }

    /// A stop-the-world pause starts with the heap's regions as `regions` says (the caller is
    /// the JVMTI GarbageCollectionStart callback): its faults are admitted by their region
    /// and attributed by it when it ends. With `read`, the remote pages of its young regions,
    /// which the pause evacuates, are read in bulk first. Returns the pages read.
    pub fn gc_pause_started(&self, regions: crate::gc_activity::RegionMap, read: bool) -> usize {
        // The map first: the pages read for the pause are admitted by their region.
        self.parts.attribution.pause_started(regions.clone());
        let young: usize = regions
            .of_kind(crate::gc_activity::RegionKind::Young)
            .map(|s| (s.end - s.start) / swap_backend::PAGE_SIZE)
            .sum();
        self.room.pause_started(young);
        self.parts
            .pause_reads
            .started(&self.parts.for_pause_reads(), &regions, read)
    }

    /// A pause ended with the heap's regions as `after` says (the caller is the JVMTI
    /// GarbageCollectionFinish callback): the remote pages of the dirty cards it left in old
    /// regions, which refinement threads scan next, are read in bulk. Never blocks. Returns
    /// the pages queued.
    pub fn read_cards_left(&self, after: &crate::gc_activity::RegionMap) -> usize {
        self.parts
            .pause_reads
            .ended(&self.parts.for_pause_reads(), after)
    }

    /// How the agent reads the cards a pause is about to scan (G1's and Serial's card
    /// tables), and which way the pause walks them.
    pub fn set_card_reader(&self, r: CardReader, order: crate::gc_activity::ScanOrder) {
        self.parts.pause_reads.set_card_reader(r, order);
    }

    /// How the agent tells pages holding cards the collector has yet to read (G1's dirty
    /// cards, which refinement or the next pause scans). With `hold`, the reclaimer keeps such
    /// pages on their lists up to a second longer (`reclaim::lists::MAX_HOLD_MS`) before it
    /// unmaps or evicts them; either way their evictions are counted.
    pub fn set_pending_cards(&self, check: CardCheck, hold: bool) {
        self.parts.reclaim.set_cards(check, hold);
    }

    /// GC threads' remote faults and their waits by the collector's activity
    /// (`GcActivity::ALL` order); they sum to the `gc` and `gc-concurrent` classes' remote
    /// faults (read this first, then the fault counters).
    pub fn gc_faults(&self) -> [ActivityCount; crate::gc_activity::GcActivity::COUNT] {
        self.parts.attribution.snapshot()
    }

    /// As `gc_faults`, without a pause under way's faults (they count when it ends), and
    /// without taking a lock a fault takes (for `/metrics`).
    pub fn gc_faults_attributed(&self) -> [ActivityCount; crate::gc_activity::GcActivity::COUNT] {
        self.parts.attribution.attributed()
    }

    /// The JVM says when its concurrent cycles end (G1's performance counters): the stats'
    /// cycles run from a marking fault to `concurrent_cycle_ended`, not to a quiet gap.
    pub fn concurrent_cycle_ends_known(&self) {
        self.parts.phases.cycle_ends_known();
    }

    /// The concurrent cycle under way ended (G1's cleanup pause, or a full collection).
    pub fn concurrent_cycle_ended(&self) {
        self.parts.phases.cycle_ended();
    }

    /// A patched collector started (true) or finished (false) concurrent marking (gc-hooks):
    /// the concurrent GC threads' remote faults are counted apart meanwhile.
    pub fn set_marking(&self, on: bool) {
        self.parts.phases.set_marking(on);
    }

    /// A patched collector will read the objects at `addrs` soon (gc-hooks): during a
    /// stop-the-world pause (G1's mixed collections name their old regions' live pages) they
    /// are read for the pause (`PauseReads::named`); otherwise (marking's deferred objects)
    /// their remote pages are fetched in the background for the concurrent GC threads.
    /// Addresses outside the heap are ignored. Never blocks.
    pub fn hint(&self, addrs: &[usize]) {
        if self
            .parts
            .pause_reads
            .named(&self.parts.for_pause_reads(), addrs)
        {
            return;
        }
        if let Some(pf) = &self.parts.prefetch {
            pf.hint(&mut self.heap_pages(addrs));
        }
    }

    /// The heap pages of `addrs`, in their order; addresses outside the heap are left out.
    fn heap_pages(&self, addrs: &[usize]) -> Vec<u32> {
        let ctx = &self.parts.ctx;
        addrs
            .iter()
            .filter_map(|&a| ctx.page_of(a))
            .map(|p| p as u32)
            .collect()
    }

    /// A patched G1 is about to refine the cards on the pages at `addrs`, in this order.
    /// Refinement cleans a buffer's cards before it reads them, so the reclaimer no longer
    /// holds their pages (`card_hold`), and those it held at the inactive front go out before
    /// their turn: the inactive ones move to the back, the remote ones are read now, by the
    /// caller (the pass's thread), in one request. Without this the pass faulted on them one
    /// at a time (graph at 25% of 1 GiB, hooks on: 200k faults, half the GC threads').
    /// Addresses outside the heap are ignored. Blocks for that one read, as the pass's first
    /// fault would have.
    pub fn will_refine(&self, addrs: &[usize]) {
        let mut pages = self.heap_pages(addrs);
        self.parts.reclaim.will_refine(&pages);
        if let Some(pf) = &self.parts.prefetch {
            pf.read_for_refinement(&mut pages);
        }
    }

    /// A patched collector freed `[start, start + len)`: nothing there is read before it is
    /// written again, so its pages are dropped (remote ones always, mapped ones when the budget
    /// is short: see `release`). The caller keeps the range untouched until this returns.
    /// Never blocks on the network.
    pub fn release(&self, start: usize, len: usize) -> usize {
        let mapped = self.mapped_for(start, true);
        let r = release::drop_range(&self.parts, start, len, mapped);
        let c = &self.parts.ctx.counters;
        c.pages_released
            .fetch_add(r.dropped as u64, Ordering::Relaxed);
        c.released_remote.fetch_add(r.remote, Ordering::Relaxed);
        c.released_left_mapped
            .fetch_add(r.left_mapped as u64, Ordering::Relaxed);
        c.released_protected
            .fetch_add(r.protected as u64, Ordering::Relaxed);
        r.dropped
    }

    /// The collection just ended (the caller is the JVMTI GarbageCollectionFinish callback,
    /// at the safepoint): `ranges` hold nothing live (see `gc_layout`), so their pages are
    /// dropped (remote ones always, mapped ones when the budget is short: see `release`) and
    /// zero-fill on reuse. Never blocks on the network.
    pub fn release_dead(&self, ranges: &[crate::gc_layout::DeadRange]) {
        let t = Instant::now();
        let c = &self.parts.ctx.counters;
        for r in ranges {
            let len = r.end.saturating_sub(r.start);
            let mapped = self.mapped_for(r.start, r.reason == crate::gc_layout::Reason::FreeRegion);
            let d = release::drop_range(&self.parts, r.start, len, mapped);
            let i = r.reason as usize;
            c.dead_pages[i].fetch_add(d.dropped as u64, Ordering::Relaxed);
            c.dead_remote[i].fetch_add(d.remote, Ordering::Relaxed);
            c.dead_mapped[i].fetch_add(d.mapped as u64, Ordering::Relaxed);
            c.dead_left_mapped[i].fetch_add(d.left_mapped as u64, Ordering::Relaxed);
            c.dead_protected[i].fetch_add(d.protected as u64, Ordering::Relaxed);
        }
        c.dead_collections.fetch_add(1, Ordering::Relaxed);
        c.dead_ns
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// What dropping the dead range at `start` does with its mapped pages: as the budget's
    /// room says ([`release::Room`]), except that a whole region (`region`) that was young
    /// when the pause under way started is left mapped write-protected when the budget is
    /// short ([`release::Mapped::Protect`]): G1 hands freed young regions out again as eden
    /// soon after, and discarding them cost the pauses time (1.4 s of Spark KMeans' at
    /// 25% of 1 GiB) and the reuse a zero fill per page.
    fn mapped_for(&self, start: usize, region: bool) -> release::Mapped {
        let mapped = self.room.mapped(&self.parts.ctx, &self.parts.budget);
        let young = || {
            self.parts.attribution.region_at(start) == Some(crate::gc_activity::RegionKind::Young)
        };
        if mapped == release::Mapped::Drop
            && self.parts.ctx.config.policy.keeps_freed_young()
            && region
            && young()
            && self.room.keeps_young(&self.parts.ctx)
        {
            release::Mapped::Protect
        } else {
            mapped
        }
    }

    /// The residency map: `npages` bytes, 1 = remote (a touch fetches the page from the
    /// store), 0 = anything a touch serves locally. Valid while the pager lives.
    pub fn residency_map(&self) -> *const u8 {
        self.parts.ctx.table.residency_ptr()
    }

    pub fn store_description(&self) -> String {
        self.parts.ctx.store.describe()
    }

    /// Where each memory server stands, when pages are replicated over several.
    pub fn replication(&self) -> Option<swap_backend::replica::ReplicationStats> {
        self.parts.ctx.store.replication()
    }

    /// What the end-to-end page checks found (`None`: checks off).
    pub fn integrity(&self) -> Option<swap_backend::checksum::IntegrityStats> {
        self.parts.ctx.store.integrity()
    }

    /// [`Pager::replication`] without the pages held per server: for every scrape.
    pub fn replication_counters(&self) -> Option<swap_backend::replica::ReplicationStats> {
        self.parts.ctx.store.replication_counters()
    }

    /// Whether reclaim batches its `MADV_DONTNEED` with one process_madvise call.
    pub fn uses_process_madvise(&self) -> bool {
        matches!(self.parts.ctx.madvise, os::Madvise::Process(_))
    }

    /// Merged latency histograms of all handler threads and the probe.
    pub fn latencies(&self) -> Latencies {
        let mut out = Latencies::new();
        for l in &self.parts.ctx.latencies {
            let l = l.lock().unwrap();
            let _ = out.all.add(&l.all);
            let _ = out.remote.add(&l.remote);
            let _ = out.thread_remote.add(&l.thread_remote);
            let _ = out.thread_local.add(&l.thread_local);
        }
        out
    }

    /// CPU time of the pager's threads so far, by role.
    pub fn cpu_times(&self) -> Vec<(Role, Duration)> {
        let threads = self.parts.ctx.threads.lock().unwrap().clone();
        Role::ALL
            .iter()
            .map(|&role| {
                let t = threads
                    .iter()
                    .filter(|(r, _)| *r == role)
                    .filter_map(|(_, tid)| memliner_cpu::cpu_time_of(*tid))
                    .sum();
                (role, t)
            })
            .collect()
    }

    /// Pages of the region the kernel reports resident right now (mincore), an independent
    /// check of the pager's own count (inactive pages are not in the heap).
    pub fn mincore_resident_pages(&self) -> usize {
        // In chunks: a vector of the whole heap would be two bytes a page of the agent's memory
        // (32 MiB at 16 GiB), at the moment the stats are written.
        const CHUNK: usize = 1 << 16;
        let spans = self.parts.ctx.spans.lock().unwrap().clone();
        let mut resident = 0;
        for s in spans {
            let pages = (s.end - s.start) / PAGE_SIZE;
            for first in (0..pages).step_by(CHUNK) {
                let n = CHUNK.min(pages - first);
                resident += os::mincore_resident(s.start + first * PAGE_SIZE, n)
                    .iter()
                    .filter(|r| **r)
                    .count();
            }
        }
        resident
    }
}

impl Drop for Pager {
    fn drop(&mut self) {
        let ctx = &self.parts.ctx;
        ctx.stop.store(true, Ordering::SeqCst);
        os::kick(&ctx.wakeup);
        self.parts.budget.wake_reclaimer();
        if let Some(p) = &self.parts.prefetch {
            p.wake_workers();
        }
        for t in self.threads.drain(..) {
            t.thread().unpark();
            let _ = t.join();
        }
        let _ = ctx.uffd.unregister(ctx.base, ctx.npages * PAGE_SIZE);
        if ctx.by_signal {
            signal::unregister(&self.parts);
        }
    }
}
