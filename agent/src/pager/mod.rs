//! The user-space pager: serves faults on a registered region from a local budget of pages,
//! evicting to a [`PageStore`] in the background so that a fault rarely waits for eviction.
//!
//! # Page states (`page_table`)
//! ```text
//! Untouched --first touch (zero fill)--> CleanZero (read) | Dirty (write)
//! Remote    --fetch------------------->  Clean (read)     | Dirty (write)
//! Clean/CleanZero --write (WP fault)---> Dirty
//! mapped  --deactivate (reclaimer)---->  InactiveClean | InactiveDirty   (bytes in a slot)
//! Inactive --touch (local fault)------>  mapped again, referenced
//! InactiveClean --evict--------------->  Remote (stored copy current) | Untouched (zeros)
//! InactiveDirty --evict--> Writeback --> Remote (written back) | Untouched (all zeros)
//! ```
//! Every transition goes through a `Claim` (a compare-and-swap to `Busy`), which owns the
//! budget charge and the residency byte and restores the old state if dropped unfinished.
//! Pages are mapped write-protected after a read fault, so the first write is seen (a WP
//! fault) and a page that was only read is dropped at eviction without a write-back.
//!
//! # Deactivation is race-free
//! 1. claim the victim (`Busy`); 2. write-protect it if dirty (writers now block in a WP
//!    fault); 3. copy it into a slot; 4. `MADV_DONTNEED`; 5. mark it inactive.
//!
//! A writer blocked in step 2 is woken when its WP fault is read after step 5 and re-faults as
//! MISSING, which maps the slot's bytes back. Readers during 2-4 read the unchanged page. The
//! write-back happens later, from the slot, with the page unmapped: no writer can race it.
//! `mprotect` is never used: HotSpot's SIGSEGV handler would see it.
//!
//! # Threads
//! Fault handlers (`fault`) serve faults and block in poll when idle; the reclaimer
//! (`reclaim`) keeps a reserve of free budget; prefetch workers (`prefetch_io`) fetch the
//! windows streams ask for; a probe (`probe`) measures fault latency as a faulting thread
//! sees it. None of them spins unless a core is idle (`swap_backend::spin`).
//!
//! # Rules the handler keeps
//! It never touches a page that is not local (it would wait on itself), runs with every
//! signal blocked, and stops the process with a fatal message rather than map wrong bytes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use swap_backend::{PageStore, PAGE_SIZE};

use crate::maps::Span;
use crate::model::{FaultDelivery, FaultKind, ThreadClass, ThreadClassifier};
use crate::policy::PagingPolicy;
use crate::uffd::{self, Uffd};

mod fault;
mod os;
mod page_table;
mod prefetch_io;
mod probe;
mod reclaim;
mod release;
mod remap;
mod signal;
mod sizing;

pub use reclaim::ReclaimCounters;

/// Counters kept by the pager; read at any time for stats.
#[derive(Debug, Default)]
pub struct PagerCounters {
    /// faults[class][kind]
    pub faults: [[AtomicU64; FaultKind::COUNT]; ThreadClass::COUNT],
    pub pages_read: AtomicU64,
    /// Of `pages_read`, pages read by prefetch workers.
    pub pages_prefetched: AtomicU64,
    pub pages_written: AtomicU64,
    /// Faults served by the faulting thread itself (`faults=signal`), and the time it spent
    /// in them (the agent's CPU on application threads).
    pub signal_faults: AtomicU64,
    pub signal_service_ns: AtomicU64,
    pub pages_freed_remote: AtomicU64,
    pub evicted_clean: AtomicU64,
    pub evicted_dirty: AtomicU64,
    pub evicted_zero: AtomicU64,
    pub zero_filled_ahead: AtomicU64,
    pub unmap_events: AtomicU64,
    /// Reclaim passes that found every charged page in flight (nothing to evict yet).
    pub reclaim_found_all_in_flight: AtomicU64,
    /// Cold pages made hot by an application touch.
    pub promoted: AtomicU64,
    /// Cold pages evicted (GC-read pages, and a finished pause's).
    pub evicted_cold: AtomicU64,
    /// Pages a stop-the-world pause brought in, made cold when it ended.
    pub demoted_after_pause: AtomicU64,
    /// Concurrent GC cycles seen in the concurrent GC threads' fault stream (a gap of more
    /// than [`CYCLE_GAP`] between their faults starts a new cycle).
    pub concurrent_cycles: AtomicU64,
    /// Faults by application threads while a concurrent cycle was active.
    pub app_faults_in_concurrent_cycle: AtomicU64,
    /// Remote faults of the concurrent GC threads while a patched JVM reported concurrent
    /// marking (its other concurrent work: refinement, remembered-set rebuild, evacuation,
    /// reference updating, is the rest of the class).
    pub gc_concurrent_remote_while_marking: AtomicU64,
    /// Pages a patched collector released (freed regions): dropped, so their reuse
    /// zero-fills locally.
    pub pages_released: AtomicU64,
    /// Of those, pages only the store held: fetches of garbage saved.
    pub released_remote: AtomicU64,
}

/// Quiet time in the concurrent GC threads' faults that ends a concurrent cycle.
pub const CYCLE_GAP: Duration = Duration::from_millis(100);

/// Latency histograms (nanoseconds).
#[derive(Debug)]
pub struct Latencies {
    /// Handler-side, every fault: from reading the fault to mapping the page.
    pub all: Histogram<u64>,
    /// Handler-side, remote faults.
    pub remote: Histogram<u64>,
    /// As a faulting thread sees a remote fault (delivery, service and wake): the probe's.
    pub thread_remote: Histogram<u64>,
}

impl Latencies {
    fn new() -> Self {
        let h = || Histogram::new_with_bounds(1, 60_000_000_000, 2).unwrap();
        Latencies {
            all: h(),
            remote: h(),
            thread_remote: h(),
        }
    }
}

/// How the pager runs.
#[derive(Clone, Debug)]
pub struct PagerConfig {
    /// Most pages local at once (mapped, inactive or prefetch markers).
    pub budget_pages: usize,
    /// How faults are delivered (signal falls back to thread where the kernel or the
    /// architecture cannot).
    pub delivery: FaultDelivery,
    /// Fault-handler threads (with signal delivery one, for events only).
    pub handlers: usize,
    /// Untouched pages zero-filled behind a first-touch write (allocation runs forward).
    pub fill_ahead: usize,
    /// Pages per reclaim batch (deactivation, write-back).
    pub evict_batch: usize,
    /// Map pages write-protected after a read fault, so that a page that was only read is
    /// dropped at eviction without a write-back (one extra fault at its first write). Off:
    /// every evicted page that is not all zeros is written back.
    pub track_dirty: bool,
    /// Keep deactivated pages inactive (unmapped, bytes local) to see which are used before
    /// evicting them; off: plain FIFO with second chance for faulted pages.
    pub sampling: bool,
    /// Which streams faults train, where pages are admitted, which pages are tracked.
    pub policy: Arc<dyn PagingPolicy>,
    /// Largest prefetch window in pages; 0 turns prefetching off.
    pub prefetch_depth: usize,
    /// Prefetch worker threads.
    pub prefetch_workers: usize,
    /// Interval of the latency probe; `None` turns it off.
    pub probe_every: Option<Duration>,
}

impl Default for PagerConfig {
    fn default() -> Self {
        PagerConfig {
            budget_pages: 1024,
            delivery: FaultDelivery::Thread,
            handlers: 1,
            fill_ahead: 31,
            evict_batch: 64,
            track_dirty: true,
            sampling: false,
            policy: Arc::new(crate::policy::Baseline { prefetch: true }),
            prefetch_depth: 32,
            prefetch_workers: 1,
            probe_every: None,
        }
    }
}

/// Called when a page cannot be served correctly; must not return (the agent exits the JVM).
pub type FatalFn = fn(&str) -> !;

/// What one reclaim step achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Evicted {
    Pages(usize),
    /// Nothing evictable: every local page is in flight elsewhere.
    NoVictim,
    /// An unread event is changing the mm: read events first.
    Again,
}

/// The agent's own threads, for their CPU time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    FaultHandler,
    Reclaimer,
    Prefetcher,
    Probe,
}

impl Role {
    pub const ALL: [Role; 4] = [
        Role::FaultHandler,
        Role::Reclaimer,
        Role::Prefetcher,
        Role::Probe,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Role::FaultHandler => "fault_handlers",
            Role::Reclaimer => "reclaimer",
            Role::Prefetcher => "prefetch",
            Role::Probe => "probe",
        }
    }
}

struct Shared {
    uffd: Uffd,
    /// Faulting threads serve their own faults (see `signal`).
    by_signal: bool,
    base: usize,
    npages: usize,
    table: page_table::PageTable,
    /// The registered (anonymous) parts of the region.
    spans: Mutex<Vec<Span>>,
    config: PagerConfig,
    store: Box<dyn PageStore>,
    reclaim: reclaim::Reclaim,
    /// Prefetch streams, workers and markers; `None` when prefetching is off.
    prefetch: Option<prefetch_io::Prefetch>,
    /// Pages admitted `ColdAfterPause` during the current stop-the-world pause.
    pause_pages: Mutex<Vec<u32>>,
    /// Pauses the JVM reported finished, and those whose pages were made cold.
    pauses_ended: AtomicU64,
    pauses_demoted: AtomicU64,
    /// Nanoseconds since `epoch` of the last concurrent GC thread fault.
    last_concurrent_fault: AtomicU64,
    /// A patched JVM reported concurrent marking under way (gc-hooks phase events).
    marking: AtomicBool,
    epoch: Instant,
    classifier: Box<dyn ThreadClassifier>,
    counters: PagerCounters,
    latencies: Vec<Mutex<Latencies>>,
    /// Our threads, by role, with their kernel ids (for CPU time).
    threads: Mutex<Vec<(Role, u32)>>,
    /// The probe thread's kernel id, 0 until it runs.
    probe_tid: std::sync::atomic::AtomicU32,
    /// The heap page whose stored copy the probe's own page faults in (`faults=signal`).
    probe_source: std::sync::atomic::AtomicUsize,
    fatal: FatalFn,
    stop: AtomicBool,
    wakeup: std::os::fd::OwnedFd,
    madvise: os::Madvise,
}

/// A running pager. Dropping it stops its threads and unregisters the region (only for
/// tests: a JVM's heap must stay paged until the process exits).
pub struct Pager {
    shared: Arc<Shared>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Pager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pager")
            .field("base", &format_args!("{:#x}", self.shared.base))
            .field("pages", &self.shared.npages)
            .field("budget", &self.shared.config.budget_pages)
            .finish()
    }
}

/// Starts one of our threads: every signal blocked, its id recorded, a panic turned into a
/// fatal stop (a dead handler would hang every thread that touches a paged-out page).
fn spawn(
    shared: &Arc<Shared>,
    role: Role,
    index: usize,
    body: impl FnOnce(&Shared) + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let s = shared.clone();
    let (name, what) = match role {
        Role::FaultHandler => (format!("memliner-fault{index}"), "fault handler"),
        Role::Reclaimer => ("memliner-reclaim".into(), "reclaimer"),
        Role::Prefetcher => (format!("memliner-prefetch{index}"), "prefetch worker"),
        Role::Probe => ("memliner-probe".into(), "latency probe"),
    };
    os::spawn_blocking_signals(name, move || {
        s.threads
            .lock()
            .unwrap()
            .push((role, swap_backend::cpu::gettid()));
        let fatal = s.fatal;
        let run = std::panic::AssertUnwindSafe(|| body(&s));
        if let Err(p) = std::panic::catch_unwind(run) {
            let why = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
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
        let shared = Arc::new(Shared {
            uffd,
            by_signal,
            base,
            npages,
            table: page_table::PageTable::new(npages),
            spans: Mutex::new(Vec::new()),
            reclaim: reclaim::Reclaim::new(
                config.budget_pages,
                npages,
                config.sampling,
                config.evict_batch,
            )?,
            prefetch: (config.prefetch_depth > 0).then(|| prefetch_io::Prefetch::new(&config)),
            config,
            store,
            pause_pages: Mutex::new(Vec::new()),
            pauses_ended: AtomicU64::new(0),
            pauses_demoted: AtomicU64::new(0),
            last_concurrent_fault: AtomicU64::new(0),
            marking: AtomicBool::new(false),
            epoch: Instant::now(),
            classifier,
            counters: PagerCounters::default(),
            // One per handler thread, one for faults served by signal, one for the probe.
            latencies: (0..handlers + 2)
                .map(|_| Mutex::new(Latencies::new()))
                .collect(),
            threads: Mutex::new(Vec::new()),
            probe_tid: std::sync::atomic::AtomicU32::new(0),
            probe_source: std::sync::atomic::AtomicUsize::new(0),
            fatal,
            stop: AtomicBool::new(false),
            wakeup: os::eventfd()?,
            madvise: os::Madvise::probe(),
        });
        if by_signal {
            // Before the first registration (from then on a fault raises SIGBUS) and before
            // the probe names its page.
            signal::register(&shared)?;
        }
        // The handlers run before the first registration: a registered range with no handler
        // hangs whoever touches it.
        let mut threads = Vec::new();
        for i in 0..handlers {
            threads.push(spawn(&shared, Role::FaultHandler, i, move |s| {
                fault::Handler::new(s, i).run()
            })?);
        }
        let t = spawn(&shared, Role::Reclaimer, 0, |s| s.reclaimer())?;
        shared.reclaim.set_thread(t.thread().clone());
        threads.push(t);
        if let Some(prefetch) = &shared.prefetch {
            let mut workers = Vec::new();
            for i in 0..shared.config.prefetch_workers.max(1) {
                let t = spawn(&shared, Role::Prefetcher, i, |s| s.prefetch_worker())?;
                workers.push(t.thread().clone());
                threads.push(t);
            }
            prefetch.set_workers(workers);
        }
        if let Some(every) = shared.config.probe_every {
            let t = spawn(&shared, Role::Probe, 0, move |s| s.probe(every))?;
            threads.push(t);
        }
        let pager = Pager { shared, threads };
        for span in spans {
            pager.shared.register_and_adopt(span.start, span.end)?;
        }
        // Adopted pages may exceed the budget: have the reclaimer trim now.
        pager.shared.reclaim.wake();
        Ok(pager)
    }

    pub fn base(&self) -> usize {
        self.shared.base
    }

    pub fn npages(&self) -> usize {
        self.shared.npages
    }

    pub fn budget_pages(&self) -> usize {
        self.shared.config.budget_pages
    }

    /// Pages charged against the budget: mapped, inactive, prefetch markers, in flight.
    pub fn resident_pages(&self) -> usize {
        self.shared.table.charged()
    }

    pub fn peak_resident_pages(&self) -> usize {
        self.shared.table.peak()
    }

    /// How often the inactive list's target grew and shrank, and the (local, remote) fault
    /// costs in ns it was balanced with.
    pub fn inactive_sizing(&self) -> (u64, u64, (u64, u64)) {
        let s = self.shared.reclaim.sizer();
        (
            s.grown.load(Ordering::Relaxed),
            s.shrunk.load(Ordering::Relaxed),
            s.costs.estimate(),
        )
    }

    /// Pages waiting inactive (unmapped, bytes local), and the list's current target.
    pub fn inactive_pages(&self) -> (usize, usize) {
        let r = &self.shared.reclaim;
        (r.inactive_pages(), r.inactive_target())
    }

    /// Free pages the reclaimer keeps in reserve: (low, high) watermarks.
    pub fn watermarks(&self) -> (usize, usize) {
        (self.shared.reclaim.low, self.shared.reclaim.high)
    }

    /// How faults are delivered (after any fallback).
    pub fn delivery(&self) -> FaultDelivery {
        if self.shared.by_signal {
            FaultDelivery::Signal
        } else {
            FaultDelivery::Thread
        }
    }

    pub fn sampling(&self) -> bool {
        self.shared.reclaim.sampling()
    }

    pub fn counters(&self) -> &PagerCounters {
        &self.shared.counters
    }

    pub fn reclaim_counters(&self) -> &ReclaimCounters {
        &self.shared.reclaim.counters
    }

    /// Prefetch counters, when prefetching is on.
    pub fn prefetch_counters(&self) -> Option<&crate::prefetch::PrefetchCounters> {
        self.shared.prefetch.as_ref().map(|p| &p.counters)
    }

    pub fn policy_name(&self) -> &'static str {
        self.shared.config.policy.name()
    }

    /// Waits until the reclaimer has filled its reserve of free budget and sleeps (for tests
    /// that need reclaim not to run at a given moment).
    pub fn settle(&self) {
        self.shared.settle()
    }

    /// A stop-the-world GC pause has ended (JVMTI GarbageCollectionFinish): the pages its
    /// GC threads brought in become cold at the next reclaim. Only an atomic increment, so
    /// it may be called from the GC's own callback.
    pub fn gc_pause_finished(&self) {
        self.shared.pauses_ended.fetch_add(1, Ordering::SeqCst);
    }

    /// A patched collector started (true) or finished (false) concurrent marking (gc-hooks):
    /// the concurrent GC threads' remote faults are counted apart meanwhile.
    pub fn set_marking(&self, on: bool) {
        self.shared.marking.store(on, Ordering::Relaxed);
    }

    /// A patched collector will trace objects at `addrs` soon (gc-hooks): their remote pages
    /// are fetched in the background. Addresses outside the heap are ignored. Never blocks.
    pub fn hint(&self, addrs: &[usize]) {
        let (base, npages) = (self.shared.base, self.shared.npages);
        let mut pages: Vec<u32> = addrs
            .iter()
            .filter_map(|&a| a.checked_sub(base).map(|off| off / PAGE_SIZE))
            .filter(|&p| p < npages)
            .map(|p| p as u32)
            .collect();
        self.shared.prefetch_hint(&mut pages);
    }

    /// A patched collector freed `[start, start + len)`: nothing there is read before it is
    /// written again, so its pages are dropped (local and remote). The caller keeps the
    /// range untouched until this returns. Never blocks on the network.
    pub fn release(&self, start: usize, len: usize) -> usize {
        self.shared.release(start, len)
    }

    /// The residency map: `npages` bytes, 1 = remote (a touch fetches the page from the
    /// store), 0 = anything a touch serves locally. Valid while the pager lives.
    pub fn residency_map(&self) -> *const u8 {
        self.shared.table.residency_ptr()
    }

    pub fn store_description(&self) -> String {
        self.shared.store.describe()
    }

    /// Where each memory server stands, when pages are replicated over several.
    pub fn replication(&self) -> Option<swap_backend::replica::ReplicationStats> {
        self.shared.store.replication()
    }

    /// Whether reclaim batches its `MADV_DONTNEED` with one process_madvise call.
    pub fn uses_process_madvise(&self) -> bool {
        matches!(self.shared.madvise, os::Madvise::Process(_))
    }

    /// Merged latency histograms of all handler threads and the probe.
    pub fn latencies(&self) -> Latencies {
        let mut out = Latencies::new();
        for l in &self.shared.latencies {
            let l = l.lock().unwrap();
            let _ = out.all.add(&l.all);
            let _ = out.remote.add(&l.remote);
            let _ = out.thread_remote.add(&l.thread_remote);
        }
        out
    }

    /// CPU time of the pager's threads so far, by role.
    pub fn cpu_times(&self) -> Vec<(Role, Duration)> {
        let threads = self.shared.threads.lock().unwrap().clone();
        Role::ALL
            .iter()
            .map(|&role| {
                let t = threads
                    .iter()
                    .filter(|(r, _)| *r == role)
                    .filter_map(|(_, tid)| swap_backend::cpu::cpu_time_of(*tid))
                    .sum();
                (role, t)
            })
            .collect()
    }

    /// Pages of the region the kernel reports resident right now (mincore), an independent
    /// check of the pager's own count (inactive pages are not in the heap).
    pub fn mincore_resident_pages(&self) -> usize {
        let spans = self.shared.spans.lock().unwrap().clone();
        spans
            .iter()
            .map(|s| {
                os::mincore_resident(s.start, (s.end - s.start) / PAGE_SIZE)
                    .iter()
                    .filter(|r| **r)
                    .count()
            })
            .sum()
    }
}

impl Drop for Pager {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        os::kick(&self.shared.wakeup);
        self.shared.reclaim.wake();
        if let Some(p) = &self.shared.prefetch {
            p.wake_workers();
        }
        for t in self.threads.drain(..) {
            t.thread().unpark();
            let _ = t.join();
        }
        let _ = self
            .shared
            .uffd
            .unregister(self.shared.base, self.shared.npages * PAGE_SIZE);
        if self.shared.by_signal {
            signal::unregister(&self.shared);
        }
    }
}

#[repr(C, align(4096))]
struct AlignedPage([u8; PAGE_SIZE]);
static ZERO_PAGE: AlignedPage = AlignedPage([0; PAGE_SIZE]);

impl Shared {
    fn serves_by_signal(&self) -> bool {
        self.by_signal
    }

    /// A fault served by its own thread took `ns`.
    fn note_signal_fault(&self, ns: u64) {
        self.counters.signal_faults.fetch_add(1, Ordering::Relaxed);
        self.counters
            .signal_service_ns
            .fetch_add(ns, Ordering::Relaxed);
    }

    fn page_addr(&self, p: usize) -> usize {
        self.base + p * PAGE_SIZE
    }

    fn die(&self, what: &str) -> ! {
        (self.fatal)(what)
    }

    /// Whether a page read in for `class` is mapped write-protected.
    fn tracks_dirty(&self, class: ThreadClass) -> bool {
        let t = self.config.track_dirty && self.config.policy.track_dirty(class);
        if t {
            self.config.policy.note_tracked(class);
        }
        t
    }
}
