//! The user-space pager: serves faults on a registered region from a local budget of resident
//! pages, evicting to a [`PageStore`] when the budget is full.
//!
//! # Page states
//! ```text
//! Untouched --first touch (zero fill)--> CleanZero (read) | Dirty (write)
//! Remote    --fetch------------------->  Clean (read)     | Dirty (write)
//! Clean/CleanZero --write (WP fault)---> Dirty
//! any resident    --eviction---------->  Busy --> Remote (written back or still valid)
//!                                              --> Untouched (all-zero content)
//! ```
//! Pages are mapped write-protected after a read fault, so the first write is seen (a WP fault)
//! and a page that was only read is dropped at eviction without a write-back. A page whose
//! content is all zeros at eviction goes back to `Untouched` and costs no remote space.
//!
//! # Eviction is race-free
//! 1. claim the victim (`Busy`);
//! 2. write-protect it if dirty (writers now block in a WP fault);
//! 3. copy it out and write it back;
//! 4. `MADV_DONTNEED`;
//! 5. mark it `Remote`.
//!
//! A writer blocked in step 2 is woken when its WP fault is read after step 5 and re-faults as
//! MISSING, which fetches the written-back copy. Readers during 2-4 read the unchanged page;
//! readers after 4 fault as MISSING and are served once the page is `Remote`. `mprotect` is
//! never used: HotSpot's SIGSEGV handler would see it.
//!
//! # Races between handler threads
//! Each fault claims its page with a compare-and-swap to `Busy`; a handler that finds a page
//! `Busy` (another handler is fetching or evicting it) retries that fault after its batch.
//!
//! # Prefetching and admission
//! A remote fault trains the stream the policy names (see `policy` and `prefetch`); the
//! window it asks for is fetched by worker threads (`prefetch_io`), which claim pages
//! `Remote -> Busy`, read them in one batch, map all but one and keep the middle one
//! unmapped as the window's marker (`Cached`): a fault on it is served locally and is how a
//! prefetch hit is seen. Resident pages wait for eviction in two queues: `cold` (evicted
//! first, no second chance; the policy puts GC-read pages there) and `hot` (FIFO with second
//! chance, the chance given by a fault on the page).
//!
//! # Rules the handler keeps
//! It never touches a page that is not resident (it would wait on itself), runs with every
//! signal blocked, and stops the process with a fatal message rather than map wrong bytes.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hdrhistogram::Histogram;
use swap_backend::{PageStore, PAGE_SIZE};

use crate::policy::{Admission, PagingPolicy, Source};
use crate::uffd::{self, CopyOutcome, Event, Uffd};

mod prefetch_io;

/// Resident pages waiting for eviction.
#[derive(Debug, Default)]
struct Queues {
    /// Evicted first, in arrival order.
    cold: VecDeque<u32>,
    /// FIFO with second chance.
    hot: VecDeque<u32>,
}
/// How long a handler polls for the next fault before it sleeps.
const SPIN: std::time::Duration = std::time::Duration::from_micros(50);

const UNTOUCHED: u8 = 0;
const REMOTE: u8 = 1;
const CLEAN_ZERO: u8 = 2;
const CLEAN: u8 = 3;
const DIRTY: u8 = 4;
const BUSY: u8 = 5;
/// Remote, with a current copy kept locally as a prefetch marker (see `prefetch_io`).
const CACHED: u8 = 6;

fn is_resident(s: u8) -> bool {
    matches!(s, CLEAN_ZERO | CLEAN | DIRTY)
}

/// Who faulted, as the pager counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
    /// Anything else (native threads, threads not yet known).
    Other = 5,
}

impl ThreadClass {
    pub const ALL: [ThreadClass; 6] = [
        ThreadClass::Application,
        ThreadClass::Gc,
        ThreadClass::GcConcurrent,
        ThreadClass::Jit,
        ThreadClass::Vm,
        ThreadClass::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ThreadClass::Application => "application",
            ThreadClass::Gc => "gc",
            ThreadClass::GcConcurrent => "gc-concurrent",
            ThreadClass::Jit => "jit",
            ThreadClass::Vm => "vm",
            ThreadClass::Other => "other",
        }
    }

    pub fn is_gc(self) -> bool {
        matches!(self, ThreadClass::Gc | ThreadClass::GcConcurrent)
    }
}

/// Tells the pager which class a faulting thread belongs to.
pub trait ThreadClassifier: Send + Sync {
    /// Called on the fault path for threads not yet cached; may be slow (reads /proc).
    fn kind_of(&self, tid: u32) -> ThreadKind;
    /// Whether a stop-the-world GC pause is in progress (decides `GcWorker` faults).
    fn in_gc_pause(&self) -> bool {
        false
    }
}

/// A thread's role as far as can be told once and cached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadKind {
    Fixed(ThreadClass),
    /// A GC worker that runs both inside pauses and concurrently (Shenandoah, G1 workers).
    GcWorker,
    /// Not known yet (a Java thread may not have announced itself): ask again next time.
    Unknown,
}

/// Why a fault was served the way it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    Hit = 4,
}

pub const FAULT_KINDS: [FaultKind; 5] = [
    FaultKind::Zero,
    FaultKind::Remote,
    FaultKind::Write,
    FaultKind::Stale,
    FaultKind::Hit,
];

impl FaultKind {
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Zero => "zero",
            FaultKind::Remote => "remote",
            FaultKind::Write => "write",
            FaultKind::Stale => "stale",
            FaultKind::Hit => "prefetch_hit",
        }
    }
}

/// Counters kept by the pager; read at any time for stats.
#[derive(Debug, Default)]
pub struct PagerCounters {
    /// faults[class][kind]
    pub faults: [[AtomicU64; 5]; 6],
    pub pages_read: AtomicU64,
    /// Of `pages_read`, pages read by prefetch workers.
    pub pages_prefetched: AtomicU64,
    pub pages_written: AtomicU64,
    pub pages_freed_remote: AtomicU64,
    pub evicted_clean: AtomicU64,
    pub evicted_dirty: AtomicU64,
    pub evicted_zero: AtomicU64,
    pub zero_filled_ahead: AtomicU64,
    pub unmap_events: AtomicU64,
    pub budget_overruns: AtomicU64,
    /// Cold pages made hot by an application touch.
    pub promoted: AtomicU64,
    /// Pages evicted from the cold queue.
    pub evicted_cold: AtomicU64,
    /// Pages a stop-the-world pause brought in, made cold when it ended.
    pub demoted_after_pause: AtomicU64,
    /// Concurrent GC cycles seen in the concurrent GC threads' fault stream (a gap of more
    /// than [`CYCLE_GAP`] between their faults starts a new cycle).
    pub concurrent_cycles: AtomicU64,
    /// Faults by application threads while a concurrent cycle was active.
    pub app_faults_in_concurrent_cycle: AtomicU64,
}

/// Quiet time in the concurrent GC threads' faults that ends a concurrent cycle.
pub const CYCLE_GAP: std::time::Duration = std::time::Duration::from_millis(100);

/// Latency histograms (nanoseconds), handler-side: from reading the fault to mapping the page.
#[derive(Debug)]
pub struct Latencies {
    pub all: Histogram<u64>,
    pub remote: Histogram<u64>,
}

impl Latencies {
    fn new() -> Self {
        Latencies {
            all: Histogram::new_with_bounds(1, 60_000_000_000, 2).unwrap(),
            remote: Histogram::new_with_bounds(1, 60_000_000_000, 2).unwrap(),
        }
    }
}

/// How the pager runs.
#[derive(Clone, Debug)]
pub struct PagerConfig {
    /// Most pages resident at once.
    pub budget_pages: usize,
    /// Fault-handler threads.
    pub handlers: usize,
    /// Untouched pages zero-filled behind a first-touch write (allocation runs forward).
    pub fill_ahead: usize,
    /// Victims per eviction batch.
    pub evict_batch: usize,
    /// Map pages write-protected after a read fault, so that a page that was only read is
    /// dropped at eviction without a write-back (one extra fault at its first write). Off:
    /// every evicted page that is not all zeros is written back.
    pub track_dirty: bool,
    /// Which streams faults train, where pages are admitted, which pages are tracked.
    pub policy: Arc<dyn PagingPolicy>,
    /// Largest prefetch window in pages; 0 turns prefetching off.
    pub prefetch_depth: usize,
    /// Prefetch worker threads.
    pub prefetch_workers: usize,
}

impl Default for PagerConfig {
    fn default() -> Self {
        PagerConfig {
            budget_pages: 1024,
            handlers: 1,
            fill_ahead: 31,
            evict_batch: 64,
            track_dirty: true,
            policy: Arc::new(crate::policy::Baseline { prefetch: true }),
            prefetch_depth: 32,
            prefetch_workers: 1,
        }
    }
}

/// Called when a page cannot be served correctly; must not return (the agent exits the JVM).
pub type FatalFn = fn(&str) -> !;

struct Shared {
    uffd: Uffd,
    base: usize,
    npages: usize,
    state: Box<[AtomicU8]>,
    /// One byte per page, 0 = resident: the GC hooks' view (see gc-hooks).
    residency: Box<[AtomicU8]>,
    /// The store holds a copy of the page (current if the page is Clean or Remote).
    stored: Box<[AtomicBool]>,
    /// Second-chance bit for the hot queue.
    referenced: Box<[AtomicBool]>,
    /// The page waits in the cold queue (cleared when an application touch promotes it).
    cold: Box<[AtomicBool]>,
    /// The registered (anonymous) parts of the region.
    spans: Mutex<Vec<Span>>,
    resident: AtomicUsize,
    peak_resident: AtomicUsize,
    config: PagerConfig,
    store: Box<dyn PageStore>,
    /// Resident pages in the order they came in.
    queue: Mutex<Queues>,
    /// Prefetch streams, workers and markers; `None` when prefetching is off.
    prefetch: Option<prefetch_io::Prefetch>,
    /// Pages admitted `ColdAfterPause` during the current stop-the-world pause.
    pause_pages: Mutex<Vec<u32>>,
    /// Pauses the JVM reported finished, and those whose pages were made cold.
    pauses_ended: AtomicU64,
    pauses_demoted: AtomicU64,
    /// Nanoseconds since `epoch` of the last concurrent GC thread fault.
    last_concurrent_fault: AtomicU64,
    epoch: Instant,
    classifier: Box<dyn ThreadClassifier>,
    counters: PagerCounters,
    latencies: Vec<Mutex<Latencies>>,
    fatal: FatalFn,
    stop: AtomicBool,
    wakeup: std::os::fd::OwnedFd,
    madvise: Madvise,
}

/// A running pager. Dropping it stops the handler threads and unregisters the region
/// (only for tests: a JVM's heap must stay paged until the process exits).
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

/// One anonymous mapping inside the paged region, registered separately (the region may also
/// hold file-backed mappings, e.g. the CDS archive, which stay unmanaged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Pager {
    /// Starts the handler threads, then registers `spans` (all within `[base, base+len)`) and
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
        let uffd = Uffd::open(
            uffd::FEATURE_PAGEFAULT_FLAG_WP | uffd::FEATURE_THREAD_ID | uffd::FEATURE_EVENT_UNMAP,
        )?;
        // SAFETY: eventfd with constant flags; the fd is owned immediately.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: efd was just created and is owned by nobody else.
        let wakeup = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(efd) };
        let handlers = config.handlers.max(1);
        let shared = Arc::new(Shared {
            uffd,
            base,
            npages,
            state: (0..npages).map(|_| AtomicU8::new(UNTOUCHED)).collect(),
            residency: (0..npages).map(|_| AtomicU8::new(1)).collect(),
            stored: (0..npages).map(|_| AtomicBool::new(false)).collect(),
            referenced: (0..npages).map(|_| AtomicBool::new(false)).collect(),
            cold: (0..npages).map(|_| AtomicBool::new(false)).collect(),
            spans: Mutex::new(Vec::new()),
            resident: AtomicUsize::new(0),
            peak_resident: AtomicUsize::new(0),
            prefetch: (config.prefetch_depth > 0).then(|| prefetch_io::Prefetch::new(&config)),
            config,
            store,
            queue: Mutex::new(Queues::default()),
            pause_pages: Mutex::new(Vec::new()),
            pauses_ended: AtomicU64::new(0),
            pauses_demoted: AtomicU64::new(0),
            last_concurrent_fault: AtomicU64::new(0),
            epoch: Instant::now(),
            classifier,
            counters: PagerCounters::default(),
            latencies: (0..handlers)
                .map(|_| Mutex::new(Latencies::new()))
                .collect(),
            fatal,
            stop: AtomicBool::new(false),
            wakeup,
            madvise: Madvise::probe(),
        });
        // The handlers run before the first registration: a registered range with no handler
        // hangs whoever touches it.
        let mut threads = Vec::new();
        for i in 0..handlers {
            let s = shared.clone();
            threads.push(spawn_blocking_signals(
                format!("memliner-fault{i}"),
                move || {
                    // A dead handler would hang every thread that touches a paged-out page:
                    // turn a panic into a fatal stop instead.
                    let fatal = s.fatal;
                    let run = std::panic::AssertUnwindSafe(|| Handler::new(s, i).run());
                    if let Err(p) = std::panic::catch_unwind(run) {
                        let why = p
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| p.downcast_ref::<String>().cloned())
                            .unwrap_or_default();
                        fatal(&format!("fault handler {i} crashed: {why}"));
                    }
                },
            )?);
        }
        if let Some(prefetch) = &shared.prefetch {
            let mut workers = Vec::new();
            for i in 0..shared.config.prefetch_workers.max(1) {
                let s = shared.clone();
                let t = spawn_blocking_signals(format!("memliner-prefetch{i}"), move || {
                    let fatal = s.fatal;
                    let run = std::panic::AssertUnwindSafe(|| s.prefetch_worker());
                    if std::panic::catch_unwind(run).is_err() {
                        fatal(&format!("prefetch worker {i} crashed"));
                    }
                })?;
                workers.push(t.thread().clone());
                threads.push(t);
            }
            prefetch.set_workers(workers);
        }
        let pager = Pager { shared, threads };
        for span in spans {
            pager.shared.register_and_adopt(span.start, span.end)?;
        }
        // Adopted pages may exceed the budget: have a handler trim now.
        pager.shared.kick();
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

    pub fn resident_pages(&self) -> usize {
        self.shared.resident.load(Ordering::SeqCst)
    }

    pub fn peak_resident_pages(&self) -> usize {
        self.shared.peak_resident.load(Ordering::SeqCst)
    }

    pub fn counters(&self) -> &PagerCounters {
        &self.shared.counters
    }

    /// Prefetch counters, when prefetching is on.
    pub fn prefetch_counters(&self) -> Option<&crate::prefetch::PrefetchCounters> {
        self.shared.prefetch.as_ref().map(|p| &p.counters)
    }

    pub fn policy_name(&self) -> &'static str {
        self.shared.config.policy.name()
    }

    /// A stop-the-world GC pause has ended (JVMTI GarbageCollectionFinish): the pages its
    /// GC threads brought in become cold at the next eviction. Only an atomic increment, so
    /// it may be called from the GC's own callback.
    pub fn gc_pause_finished(&self) {
        self.shared.pauses_ended.fetch_add(1, Ordering::SeqCst);
    }

    /// The residency map: `npages` bytes, 0 = resident. Valid while the pager lives.
    pub fn residency_map(&self) -> *const u8 {
        self.shared.residency.as_ptr().cast()
    }

    pub fn store_description(&self) -> String {
        self.shared.store.describe()
    }

    /// Whether eviction batches its `MADV_DONTNEED` with one process_madvise call.
    pub fn uses_process_madvise(&self) -> bool {
        matches!(self.shared.madvise, Madvise::Process(_))
    }

    /// Merged latency histograms of all handler threads.
    pub fn latencies(&self) -> Latencies {
        let mut out = Latencies::new();
        for l in &self.shared.latencies {
            let l = l.lock().unwrap();
            let _ = out.all.add(&l.all);
            let _ = out.remote.add(&l.remote);
        }
        out
    }

    /// Pages of the region the kernel reports resident right now (mincore), an independent
    /// check of the pager's own count.
    pub fn mincore_resident_pages(&self) -> usize {
        let spans = self.shared.spans.lock().unwrap().clone();
        spans
            .iter()
            .map(|s| {
                mincore_resident(s.start, (s.end - s.start) / PAGE_SIZE)
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
        self.shared.kick();
        if let Some(p) = &self.shared.prefetch {
            p.wake_workers();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let _ = self
            .shared
            .uffd
            .unregister(self.shared.base, self.shared.npages * PAGE_SIZE);
    }
}

fn spawn_blocking_signals(
    name: String,
    f: impl FnOnce() + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    // Threads inherit the creator's mask: block everything around the spawn so that no signal
    // (HotSpot's SIGSEGV probes, SIGQUIT, ...) is ever delivered to a fault handler.
    // SAFETY: sigset manipulation on local values; pthread_sigmask only changes this thread.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let r = std::thread::Builder::new().name(name).spawn(f);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        r
    }
}

/// Which pages of `[base, base + npages pages)` are resident, by mincore.
fn mincore_resident(base: usize, npages: usize) -> Vec<bool> {
    let mut vec = vec![0u8; npages];
    // SAFETY: mincore only reads page tables; vec has one byte per page. Unmapped holes make it
    // fail with ENOMEM, in which case we fall back to per-page queries.
    let rc = unsafe { libc::mincore(base as *mut _, npages * PAGE_SIZE, vec.as_mut_ptr()) };
    if rc != 0 {
        for (i, v) in vec.iter_mut().enumerate() {
            // SAFETY: as above, one page at a time.
            let r =
                unsafe { libc::mincore((base + i * PAGE_SIZE) as *mut _, PAGE_SIZE, v as *mut u8) };
            if r != 0 {
                *v = 0;
            }
        }
    }
    vec.iter().map(|v| v & 1 == 1).collect()
}

/// How eviction discards pages: one process_madvise call for a whole batch where the kernel
/// allows MADV_DONTNEED there, else one madvise per run of pages.
enum Madvise {
    Process(std::os::fd::OwnedFd),
    PerRun,
}

impl std::fmt::Debug for Madvise {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Madvise::Process(_) => "process_madvise",
            Madvise::PerRun => "madvise",
        })
    }
}

impl Madvise {
    fn probe() -> Madvise {
        // SAFETY: pidfd_open on our own pid; the fd is owned right away.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) } as i32;
        if pidfd < 0 {
            return Madvise::PerRun;
        }
        // SAFETY: fresh fd owned by nobody else.
        let pidfd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(pidfd) };
        // Probe on a private page of our own.
        // SAFETY: anonymous private mapping we own and unmap below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Madvise::PerRun;
        }
        let iov = libc::iovec {
            iov_base: p,
            iov_len: PAGE_SIZE,
        };
        use std::os::fd::AsRawFd;
        // SAFETY: the iovec names our own mapping.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_process_madvise,
                pidfd.as_raw_fd(),
                &iov as *const libc::iovec,
                1usize,
                libc::MADV_DONTNEED,
                0u32,
            )
        };
        // SAFETY: unmapping the probe page we mapped.
        unsafe { libc::munmap(p, PAGE_SIZE) };
        if rc == PAGE_SIZE as i64 {
            Madvise::Process(pidfd)
        } else {
            Madvise::PerRun
        }
    }

    /// Discards `runs` (start address, length). Only called on pages the pager owns (`Busy`).
    fn dontneed(&self, runs: &[(usize, usize)]) -> std::io::Result<()> {
        if let Madvise::Process(pidfd) = self {
            use std::os::fd::AsRawFd;
            for chunk in runs.chunks(512) {
                let iov: Vec<libc::iovec> = chunk
                    .iter()
                    .map(|&(s, l)| libc::iovec {
                        iov_base: s as *mut _,
                        iov_len: l,
                    })
                    .collect();
                let want: usize = chunk.iter().map(|r| r.1).sum();
                // SAFETY: every iovec names Busy pages of the registered region.
                let rc = unsafe {
                    libc::syscall(
                        libc::SYS_process_madvise,
                        pidfd.as_raw_fd(),
                        iov.as_ptr(),
                        iov.len(),
                        libc::MADV_DONTNEED,
                        0u32,
                    )
                };
                if rc as usize != want {
                    return per_run(chunk);
                }
            }
            return Ok(());
        }
        per_run(runs)
    }
}

fn per_run(runs: &[(usize, usize)]) -> std::io::Result<()> {
    for &(s, l) in runs {
        // SAFETY: the run covers Busy pages of the registered region that the pager has
        // written back (or whose stored copy is current); their content may be discarded.
        if unsafe { libc::madvise(s as *mut _, l, libc::MADV_DONTNEED) } != 0 {
            let e = std::io::Error::last_os_error();
            // ENOMEM: part of the run was unmapped under us (the mapped part is discarded
            // all the same); the UNMAP event, not yet read, resets those pages.
            if e.raw_os_error() != Some(libc::ENOMEM) {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// What one eviction batch achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Evicted {
    Pages(usize),
    /// Nothing evictable: every resident page is in flight elsewhere.
    NoVictim,
    /// An unread event is changing the mm: read events first.
    Again,
}

/// `spans` less the range `[lo, hi)`.
fn subtract(spans: &[Span], lo: usize, hi: usize) -> Vec<Span> {
    let mut out = Vec::new();
    for s in spans {
        if s.end <= lo || s.start >= hi {
            out.push(*s);
            continue;
        }
        if s.start < lo {
            out.push(Span {
                start: s.start,
                end: lo,
            });
        }
        if s.end > hi {
            out.push(Span {
                start: hi,
                end: s.end,
            });
        }
    }
    out
}

/// Coalesces sorted page indexes into (address, length) runs.
fn runs(base: usize, pages: &[usize]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for &p in pages {
        let a = base + p * PAGE_SIZE;
        match out.last_mut() {
            Some((s, l)) if *s + *l == a => *l += PAGE_SIZE,
            _ => out.push((a, PAGE_SIZE)),
        }
    }
    out
}

#[repr(C, align(4096))]
struct AlignedPage([u8; PAGE_SIZE]);
static ZERO_PAGE: AlignedPage = AlignedPage([0; PAGE_SIZE]);

impl Shared {
    fn kick(&self) {
        let one: u64 = 1;
        use std::os::fd::AsRawFd;
        // SAFETY: writes 8 bytes from a local to our eventfd.
        unsafe { libc::write(self.wakeup.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn page_addr(&self, p: usize) -> usize {
        self.base + p * PAGE_SIZE
    }

    fn die(&self, what: &str) -> ! {
        (self.fatal)(what)
    }

    fn register_and_adopt(&self, start: usize, end: usize) -> std::io::Result<()> {
        let start = start.max(self.base);
        let end = end.min(self.base + self.npages * PAGE_SIZE);
        if start >= end {
            return Ok(());
        }
        // Do not let the kernel back the region with huge pages: faults and eviction are per
        // 4 KiB page.
        // SAFETY: advice only; changes no contents.
        unsafe { libc::madvise(start as *mut _, end - start, libc::MADV_NOHUGEPAGE) };
        self.uffd.register(start, end - start)?;
        {
            let mut spans = self.spans.lock().unwrap();
            *spans = subtract(&spans, start, end);
            spans.push(Span { start, end });
        }
        // Pages touched before registration never fault: adopt them as dirty (the store has
        // no copy of them).
        let first = (start - self.base) / PAGE_SIZE;
        let resident = mincore_resident(start, (end - start) / PAGE_SIZE);
        let mut q = self.queue.lock().unwrap();
        for (i, r) in resident.into_iter().enumerate() {
            if r && self.state[first + i]
                .compare_exchange(UNTOUCHED, DIRTY, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                self.residency[first + i].store(0, Ordering::Release);
                self.resident.fetch_add(1, Ordering::SeqCst);
                q.hot.push_back((first + i) as u32);
            }
        }
        // No peak update here: pages the JVM touched before registration were not admitted
        // by the pager; the next trim brings them under budget.
        Ok(())
    }

    /// Reserves room for `n` more resident pages, evicting while over budget.
    /// `false`: no room could be made because an unread event is changing the mm; the
    /// reservation is withdrawn and the fault must be retried after reading events.
    fn reserve(&self, n: usize) -> bool {
        self.resident.fetch_add(n, Ordering::SeqCst);
        if self.trim() {
            true
        } else {
            self.resident.fetch_sub(n, Ordering::SeqCst);
            false
        }
    }

    /// Evicts until the budget holds. `false` if eviction must wait for events to be read.
    fn trim(&self) -> bool {
        while self.resident.load(Ordering::SeqCst) > self.config.budget_pages {
            match self.evict_batch() {
                Evicted::Pages(_) => {}
                Evicted::Again => return false,
                Evicted::NoVictim => {
                    // Everything resident is in flight in other handlers: tolerate the
                    // overrun rather than spin (counted, and bounded by handlers x batch).
                    self.counters
                        .budget_overruns
                        .fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
        }
        true
    }

    /// Whether a page read in for `class` is mapped write-protected.
    fn tracks_dirty(&self, class: ThreadClass) -> bool {
        let t = self.config.track_dirty && self.config.policy.track_dirty(class);
        if t {
            self.config.policy.note_tracked(class);
        }
        t
    }

    /// Queues a page that just became resident for eviction, where the policy said.
    fn admit(&self, p: usize, admission: Admission, referenced: bool) {
        let cold = admission == Admission::Cold;
        self.cold[p].store(cold, Ordering::Relaxed);
        self.referenced[p].store(referenced && !cold, Ordering::Relaxed);
        {
            let mut q = self.queue.lock().unwrap();
            if cold {
                q.cold.push_back(p as u32);
            } else {
                q.hot.push_back(p as u32);
            }
        }
        if admission == Admission::ColdAfterPause {
            let mut pp = self.pause_pages.lock().unwrap();
            pp.push(p as u32);
            // A pause that never ends (no JVMTI events, a runaway full GC): do not hold more
            // than a budget's worth of pages hot for it.
            if pp.len() > self.config.budget_pages {
                drop(pp);
                self.demote_pause_pages(true);
            }
        }
    }

    fn note_resident(&self) {
        let r = self.resident.load(Ordering::SeqCst);
        self.peak_resident.fetch_max(r, Ordering::Relaxed);
    }

    /// Makes the pages of finished pauses cold.
    fn demote_pause_pages(&self, force: bool) {
        let ended = self.pauses_ended.load(Ordering::SeqCst);
        if !force && self.pauses_demoted.swap(ended, Ordering::SeqCst) == ended {
            return;
        }
        let pages = std::mem::take(&mut *self.pause_pages.lock().unwrap());
        let mut q = self.queue.lock().unwrap();
        let mut n = 0;
        for p in pages {
            let p = p as usize;
            if is_resident(self.state[p].load(Ordering::SeqCst))
                && !self.cold[p].swap(true, Ordering::Relaxed)
            {
                q.cold.push_back(p as u32);
                n += 1;
            }
        }
        self.counters
            .demoted_after_pause
            .fetch_add(n, Ordering::Relaxed);
    }

    /// Picks up to one batch of victims and evicts them.
    fn evict_batch(&self) -> Evicted {
        self.demote_pause_pages(false);
        // Evict a whole batch even when one page would do: the write-back, the write-protect
        // and the discard are then paid once per batch, and the next faults find room.
        let want = self.config.evict_batch.max(1);
        let mut victims: Vec<(usize, u8)> = Vec::with_capacity(want);
        {
            let mut q = self.queue.lock().unwrap();
            // Cold pages first, in arrival order, without a second chance.
            let mut looked = 0;
            let limit = q.cold.len();
            while victims.len() < want && looked < limit {
                let Some(p) = q.cold.pop_front() else { break };
                looked += 1;
                let p = p as usize;
                let s = self.state[p].load(Ordering::SeqCst);
                if !is_resident(s) {
                    continue; // stale entry
                }
                if !self.cold[p].load(Ordering::Relaxed) {
                    q.hot.push_back(p as u32); // promoted
                    continue;
                }
                if self.state[p]
                    .compare_exchange(s, BUSY, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    self.counters.evicted_cold.fetch_add(1, Ordering::Relaxed);
                    victims.push((p, s));
                } else {
                    q.cold.push_back(p as u32);
                }
            }
            let mut looked = 0;
            let limit = q.hot.len() * 2 + 1;
            while victims.len() < want && looked < limit {
                let Some(p) = q.hot.pop_front() else { break };
                looked += 1;
                let p = p as usize;
                let s = self.state[p].load(Ordering::SeqCst);
                if !is_resident(s) {
                    continue; // stale entry
                }
                if self.cold[p].load(Ordering::Relaxed) {
                    continue; // demoted: it waits in the cold queue
                }
                if self.referenced[p].swap(false, Ordering::Relaxed) {
                    q.hot.push_back(p as u32);
                    continue;
                }
                if self.state[p]
                    .compare_exchange(s, BUSY, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    victims.push((p, s));
                } else {
                    q.hot.push_back(p as u32);
                }
            }
        }
        if victims.is_empty() {
            return Evicted::NoVictim;
        }
        victims.sort_unstable();

        // Dirty victims: write-protect (writers block from here on), copy out.
        let dirty: Vec<usize> = victims
            .iter()
            .filter(|v| v.1 == DIRTY)
            .map(|v| v.0)
            .collect();
        for (s, l) in runs(self.base, &dirty) {
            match self.uffd.write_protect(s, l, true, false) {
                Ok(true) => {}
                Ok(false) => {
                    // An unread event is changing the mm: put the victims back (a page left
                    // protected but Dirty is unprotected by its next write fault) and let the
                    // handler read events first.
                    let mut q = self.queue.lock().unwrap();
                    for &(p, st) in &victims {
                        self.state[p].store(st, Ordering::SeqCst);
                        if self.cold[p].load(Ordering::Relaxed) {
                            q.cold.push_back(p as u32);
                        } else {
                            q.hot.push_back(p as u32);
                        }
                    }
                    return Evicted::Again;
                }
                Err(e) => self.die(&format!("cannot write-protect heap pages at {s:#x}: {e}")),
            }
        }
        let mut copies = vec![0u8; dirty.len() * PAGE_SIZE];
        let copied = self.copy_out(&dirty, &mut copies);
        let mut write_ids = Vec::with_capacity(dirty.len());
        let mut write_buf = Vec::with_capacity(dirty.len() * PAGE_SIZE);
        let mut to_free = Vec::new();
        let mut new_state = Vec::with_capacity(victims.len());
        let mut next_dirty = 0;
        for &(p, s) in &victims {
            let ns = match s {
                DIRTY => {
                    let i = next_dirty;
                    next_dirty += 1;
                    let src = &copies[i * PAGE_SIZE..(i + 1) * PAGE_SIZE];
                    if !copied[i] {
                        // The JVM unmapped the page under us (heap shrink); its UNMAP event
                        // resets it. Nothing to keep.
                        UNTOUCHED
                    } else if src.iter().all(|b| *b == 0) {
                        if self.stored[p].swap(false, Ordering::Relaxed) {
                            to_free.push(p as u64);
                        }
                        self.counters.evicted_zero.fetch_add(1, Ordering::Relaxed);
                        UNTOUCHED
                    } else {
                        write_ids.push(p as u64);
                        write_buf.extend_from_slice(src);
                        self.counters.evicted_dirty.fetch_add(1, Ordering::Relaxed);
                        REMOTE
                    }
                }
                CLEAN => {
                    self.counters.evicted_clean.fetch_add(1, Ordering::Relaxed);
                    REMOTE
                }
                _ => {
                    self.counters.evicted_zero.fetch_add(1, Ordering::Relaxed);
                    UNTOUCHED
                }
            };
            new_state.push(ns);
        }
        if !write_ids.is_empty() {
            if let Err(e) = self.store.write_pages(&write_ids, &write_buf) {
                self.die(&format!(
                    "cannot write back {} heap pages starting at page {} ({:#x}) to {}: {e}",
                    write_ids.len(),
                    write_ids[0],
                    self.page_addr(write_ids[0] as usize),
                    self.store.describe_page(write_ids[0])
                ));
            }
            for &id in &write_ids {
                self.stored[id as usize].store(true, Ordering::Relaxed);
            }
            self.counters
                .pages_written
                .fetch_add(write_ids.len() as u64, Ordering::Relaxed);
        }
        if !to_free.is_empty() {
            // Losing a free only wastes remote space; never fatal.
            if self.store.free_pages(&to_free).is_ok() {
                self.counters
                    .pages_freed_remote
                    .fetch_add(to_free.len() as u64, Ordering::Relaxed);
            }
        }
        let all: Vec<usize> = victims.iter().map(|v| v.0).collect();
        if let Err(e) = self.madvise.dontneed(&runs(self.base, &all)) {
            self.die(&format!("cannot discard evicted heap pages: {e}"));
        }
        for (&(p, _), ns) in victims.iter().zip(new_state) {
            self.residency[p].store(1, Ordering::Release);
            self.state[p].store(ns, Ordering::SeqCst);
        }
        self.resident.fetch_sub(victims.len(), Ordering::SeqCst);
        Evicted::Pages(victims.len())
    }

    /// Copies the given resident pages out with process_vm_readv on ourselves, so that a page
    /// the JVM unmapped concurrently (heap shrink) reads as a failure instead of a SIGSEGV in
    /// the handler. Returns which pages were copied.
    fn copy_out(&self, pages: &[usize], out: &mut [u8]) -> Vec<bool> {
        let mut ok = vec![false; pages.len()];
        let mut i = 0;
        while i < pages.len() {
            let n = (pages.len() - i).min(512);
            let local: Vec<libc::iovec> = (i..i + n)
                .map(|k| libc::iovec {
                    iov_base: out[k * PAGE_SIZE..].as_mut_ptr().cast(),
                    iov_len: PAGE_SIZE,
                })
                .collect();
            let remote: Vec<libc::iovec> = pages[i..i + n]
                .iter()
                .map(|&p| libc::iovec {
                    iov_base: self.page_addr(p) as *mut _,
                    iov_len: PAGE_SIZE,
                })
                .collect();
            // SAFETY: local iovecs cover `out`; remote ones name our own heap pages, which the
            // kernel reads with fault checks (an unmapped page fails, it does not crash us).
            let got = unsafe {
                libc::process_vm_readv(
                    libc::getpid(),
                    local.as_ptr(),
                    n as _,
                    remote.as_ptr(),
                    n as _,
                    0,
                )
            };
            let whole = if got > 0 { got as usize / PAGE_SIZE } else { 0 };
            for flag in &mut ok[i..i + whole] {
                *flag = true;
            }
            // Skip the page that failed (if any) and go on after it.
            i += whole + usize::from(whole < n);
        }
        ok
    }

    /// Forgets pages of an unmapped range, then registers what is mapped there now.
    fn unmapped(&self, start: usize, end: usize) {
        let lo = start.max(self.base);
        let hi = end.min(self.base + self.npages * PAGE_SIZE);
        if lo >= hi {
            return;
        }
        self.counters.unmap_events.fetch_add(1, Ordering::Relaxed);
        let (first, last) = (
            (lo - self.base) / PAGE_SIZE,
            (hi - self.base).div_ceil(PAGE_SIZE),
        );
        let mut to_free = Vec::new();
        for p in first..last {
            // Wait out a handler that has the page in flight.
            let s = loop {
                let s = self.state[p].load(Ordering::SeqCst);
                if s != BUSY {
                    break s;
                }
                std::thread::yield_now();
            };
            if self.state[p]
                .compare_exchange(s, UNTOUCHED, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                continue;
            }
            if is_resident(s) {
                self.resident.fetch_sub(1, Ordering::SeqCst);
            }
            if s == CACHED {
                self.drop_marker_data(p);
                self.resident.fetch_sub(1, Ordering::SeqCst);
            }
            self.residency[p].store(1, Ordering::Release);
            if self.stored[p].swap(false, Ordering::Relaxed) {
                to_free.push(p as u64);
            }
        }
        let _ = self.store.free_pages(&to_free);
        // The range was mapped anew (HotSpot commits and uncommits with mmap MAP_FIXED): page
        // the anonymous mappings there now. A plain munmap leaves nothing to register.
        {
            let mut spans = self.spans.lock().unwrap();
            *spans = subtract(&spans, lo, hi);
        }
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        for span in crate::heap::anonymous_spans(&crate::heap::parse_maps(&maps), lo, hi - lo) {
            if let Err(e) = self.register_and_adopt(span.start, span.end) {
                crate::log!(
                    crate::options::LogLevel::Warn,
                    "cannot page the remapped heap range {:#x}-{:#x}: {e}; it stays local",
                    span.start,
                    span.end
                );
            }
        }
        // Pages touched between the remap and the registration were adopted: evict now, on
        // this handler thread, rather than at the next fault.
        self.trim();
    }
}

/// One fault-handler thread.
struct Handler {
    s: Arc<Shared>,
    index: usize,
    kinds: HashMap<u32, ThreadKind>,
    fetch_buf: Vec<u8>,
    zeros: Vec<u8>,
    wakes: Vec<usize>,
    retry: Vec<Event>,
}

impl Handler {
    fn new(s: Arc<Shared>, index: usize) -> Self {
        Handler {
            s,
            index,
            kinds: HashMap::new(),
            fetch_buf: vec![0; PAGE_SIZE],
            zeros: Vec::new(),
            wakes: Vec::new(),
            retry: Vec::new(),
        }
    }

    fn run(mut self) {
        let mut events = [Event::Other(0); 64];
        use std::os::fd::AsRawFd;
        let mut fds = [
            libc::pollfd {
                fd: self.s.uffd.raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.s.wakeup.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let mut idle_since = Instant::now();
        loop {
            // Spin briefly after serving faults before sleeping: the next fault usually follows
            // within microseconds, and waking a sleeping thread costs more than that on VMs.
            // Never sleep with faults waiting for a retry.
            let spin = !self.retry.is_empty() || idle_since.elapsed() < SPIN;
            // SAFETY: polls two fds we own, with a stack array of pollfds.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, if spin { 0 } else { -1 }) };
            if rc < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                self.s.die(&format!("fault handler cannot poll: {e}"));
            }
            if rc > 0 && fds[1].revents != 0 {
                // On stop the eventfd is left readable so that every handler sees it.
                if self.s.stop.load(Ordering::SeqCst) {
                    return;
                }
                let mut v = 0u64;
                // SAFETY: reads the 8-byte eventfd counter into a local.
                unsafe { libc::read(fds[1].fd, (&mut v as *mut u64).cast(), 8) };
                self.s.trim();
            }
            // New events first: an UNMAP event read here is what lets an EAGAIN'd retry below
            // succeed (the kernel refuses copies while an unread event changes the mm).
            let n = if rc > 0 && fds[0].revents != 0 {
                match self.s.uffd.read_events(&mut events) {
                    Ok(n) => n,
                    Err(e) => self
                        .s
                        .die(&format!("fault handler cannot read faults: {e}")),
                }
            } else {
                0
            };
            if n == 0 && self.retry.is_empty() {
                std::hint::spin_loop();
                continue;
            }
            let started = Instant::now();
            idle_since = started;
            let retries = std::mem::take(&mut self.retry);
            for ev in events[..n].iter().copied().chain(retries) {
                self.handle(ev, started);
            }
            self.flush_wakes();
            if !self.retry.is_empty() {
                std::thread::yield_now();
            }
        }
    }

    fn class_of(&mut self, tid: u32) -> ThreadClass {
        let kind = match self.kinds.get(&tid) {
            Some(k) => *k,
            None => {
                let k = self.s.classifier.kind_of(tid);
                if k != ThreadKind::Unknown {
                    self.kinds.insert(tid, k);
                }
                k
            }
        };
        match kind {
            ThreadKind::Fixed(c) => c,
            ThreadKind::GcWorker => {
                if self.s.classifier.in_gc_pause() {
                    ThreadClass::Gc
                } else {
                    ThreadClass::GcConcurrent
                }
            }
            ThreadKind::Unknown => ThreadClass::Other,
        }
    }

    /// Follows concurrent GC cycles through the concurrent GC threads' own faults.
    fn note_phase(&self, class: ThreadClass) {
        let now = self.s.epoch.elapsed().as_nanos() as u64;
        match class {
            ThreadClass::GcConcurrent => {
                let last = self.s.last_concurrent_fault.swap(now, Ordering::Relaxed);
                if last == 0 || now.saturating_sub(last) > CYCLE_GAP.as_nanos() as u64 {
                    self.s
                        .counters
                        .concurrent_cycles
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
            ThreadClass::Application => {
                let last = self.s.last_concurrent_fault.load(Ordering::Relaxed);
                if last != 0 && now.saturating_sub(last) <= CYCLE_GAP.as_nanos() as u64 {
                    self.s
                        .counters
                        .app_faults_in_concurrent_cycle
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
            _ => {}
        }
    }

    fn count(&self, class: ThreadClass, kind: FaultKind) {
        self.s.counters.faults[class as usize][kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn record_latency(&self, started: Instant, remote: bool) {
        let ns = started.elapsed().as_nanos() as u64;
        let mut l = self.s.latencies[self.index].lock().unwrap();
        let _ = l.all.record(ns.max(1));
        if remote {
            let _ = l.remote.record(ns.max(1));
        }
    }

    fn flush_wakes(&mut self) {
        if self.wakes.is_empty() {
            return;
        }
        self.wakes.sort_unstable();
        self.wakes.dedup();
        let pages: Vec<usize> = self
            .wakes
            .drain(..)
            .map(|a| (a - self.s.base) / PAGE_SIZE)
            .collect();
        for (start, len) in runs(self.s.base, &pages) {
            if let Err(e) = self.s.uffd.wake(start, len) {
                self.s
                    .die(&format!("cannot wake threads waiting at {start:#x}: {e}"));
            }
        }
    }

    fn handle(&mut self, ev: Event, started: Instant) {
        match ev {
            Event::Fault {
                addr,
                write,
                wp,
                tid,
            } => {
                if addr < self.s.base || addr >= self.s.base + self.s.npages * PAGE_SIZE {
                    return;
                }
                let p = (addr - self.s.base) / PAGE_SIZE;
                let class = self.class_of(tid);
                self.note_phase(class);
                if wp {
                    self.write_fault(ev, p, class);
                } else {
                    self.missing_fault(ev, p, write, tid, class, started);
                }
            }
            Event::Unmap { start, end } => {
                self.flush_wakes();
                self.s.unmapped(start, end);
            }
            Event::Other(_) => {}
        }
    }

    /// Maps `src` at page `p` (which this handler owns), without waking; the wake is batched.
    fn install(&mut self, p: usize, src: *const u8, write_protect: bool) -> CopyOutcome {
        let addr = self.s.page_addr(p);
        // SAFETY: src is a full page (the zero page or our fetch buffer); page p is in the
        // registered region and Busy, so nobody else maps it.
        match unsafe { self.s.uffd.copy(addr, src, PAGE_SIZE, write_protect, false) } {
            Ok(o) => o,
            Err(e) => self
                .s
                .die(&format!("cannot map heap page {p} at {addr:#x}: {e}")),
        }
    }

    /// Maps `count` zero pages from page `p` on (all owned by this handler), writable.
    fn install_run(&mut self, p: usize, count: usize) -> CopyOutcome {
        if self.zeros.len() < count * PAGE_SIZE {
            self.zeros = vec![0; count * PAGE_SIZE];
        }
        let addr = self.s.page_addr(p);
        // SAFETY: `zeros` holds `count` pages; pages p..p+count are registered (claim_ahead
        // stays inside p's span) and Busy, so nobody else maps them.
        match unsafe {
            self.s
                .uffd
                .copy(addr, self.zeros.as_ptr(), count * PAGE_SIZE, false, false)
        } {
            Ok(o) => o,
            Err(_) => CopyOutcome::Gone,
        }
    }

    fn missing_fault(
        &mut self,
        ev: Event,
        p: usize,
        write: bool,
        tid: u32,
        class: ThreadClass,
        started: Instant,
    ) {
        let s = self.s.state[p].load(Ordering::SeqCst);
        match s {
            CACHED => self.marker_fault(ev, p, write, tid, class, started),
            UNTOUCHED | REMOTE => {
                if self.s.state[p]
                    .compare_exchange(s, BUSY, Ordering::SeqCst, Ordering::SeqCst)
                    .is_err()
                {
                    return self.retry.push(ev);
                }
                let ahead = if s == UNTOUCHED && write {
                    self.claim_ahead(p)
                } else {
                    Vec::new()
                };
                if !self.s.reserve(1 + ahead.len()) {
                    self.s.state[p].store(s, Ordering::SeqCst);
                    for &q in &ahead {
                        self.s.state[q].store(UNTOUCHED, Ordering::SeqCst);
                    }
                    return self.retry.push(ev);
                }
                let (src, kind) = if s == UNTOUCHED {
                    (ZERO_PAGE.0.as_ptr(), FaultKind::Zero)
                } else {
                    if let Err(e) = self.s.store.read_pages(&[p as u64], &mut self.fetch_buf) {
                        self.s.die(&format!(
                            "cannot fetch heap page {p} ({:#x}) from {}: {e}",
                            self.s.page_addr(p),
                            self.s.store.describe_page(p as u64)
                        ));
                    }
                    self.s.counters.pages_read.fetch_add(1, Ordering::Relaxed);
                    (self.fetch_buf.as_ptr(), FaultKind::Remote)
                };
                // A write fault with pages claimed ahead maps the whole run in one ioctl; if
                // that fails part way, the pages are mapped one by one (a page already mapped
                // then reports `Exists`, which is fine).
                let run_ok = !ahead.is_empty()
                    && self.install_run(p, 1 + ahead.len()) == CopyOutcome::Copied;
                // Map write-protected after a read so that the first write is seen, unless
                // dirtiness is not tracked (then every page counts as written).
                let protect = !write && self.s.tracks_dirty(class);
                let outcome = if run_ok {
                    CopyOutcome::Copied
                } else {
                    self.install(p, src, protect)
                };
                if outcome == CopyOutcome::Again {
                    // The mm is changing under an unread event: give everything back and retry
                    // once the event is read.
                    self.s.state[p].store(s, Ordering::SeqCst);
                    for &q in &ahead {
                        self.s.state[q].store(UNTOUCHED, Ordering::SeqCst);
                    }
                    self.s.resident.fetch_sub(1 + ahead.len(), Ordering::SeqCst);
                    return self.retry.push(ev);
                }
                let source = if s == UNTOUCHED {
                    Source::ZeroFill
                } else {
                    Source::Demand
                };
                let admission = self.s.config.policy.admission(class, source);
                self.finish_install(
                    p,
                    outcome,
                    if !protect {
                        DIRTY
                    } else if s == UNTOUCHED {
                        CLEAN_ZERO
                    } else {
                        CLEAN
                    },
                    admission,
                );
                for q in ahead {
                    let o = if run_ok {
                        CopyOutcome::Copied
                    } else {
                        self.install(q, ZERO_PAGE.0.as_ptr(), false)
                    };
                    self.finish_install(q, o, DIRTY, admission);
                }
                self.s.note_resident();
                self.count(class, kind);
                self.record_latency(started, kind == FaultKind::Remote);
                if kind == FaultKind::Remote {
                    // Wake the faulting thread before the window is even queued.
                    self.flush_wakes();
                    self.s.prefetch_after(tid, class, p, false);
                }
            }
            CLEAN_ZERO | CLEAN | DIRTY => {
                // Already mapped (a duplicate message), or discarded by the JVM behind our back
                // (then zeros are the right content).
                if self.s.state[p]
                    .compare_exchange(s, BUSY, Ordering::SeqCst, Ordering::SeqCst)
                    .is_err()
                {
                    return self.retry.push(ev);
                }
                let o = self.install(p, ZERO_PAGE.0.as_ptr(), false);
                if o == CopyOutcome::Again {
                    self.s.state[p].store(s, Ordering::SeqCst);
                    return self.retry.push(ev);
                }
                let ns = if o == CopyOutcome::Copied { DIRTY } else { s };
                self.s.state[p].store(ns, Ordering::SeqCst);
                self.wakes.push(self.s.page_addr(p));
                self.count(class, FaultKind::Stale);
            }
            _ => self.retry.push(ev),
        }
    }

    /// Claims up to `fill_ahead` untouched pages after `p` for zero fill.
    fn claim_ahead(&self, p: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let addr = self.s.page_addr(p);
        let span_end = self
            .s
            .spans
            .lock()
            .unwrap()
            .iter()
            .find(|sp| sp.start <= addr && addr < sp.end)
            .map_or(p + 1, |sp| (sp.end - self.s.base) / PAGE_SIZE);
        for q in p + 1..(p + 1 + self.s.config.fill_ahead).min(span_end) {
            if self.s.state[q]
                .compare_exchange(UNTOUCHED, BUSY, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                break;
            }
            out.push(q);
        }
        self.s
            .counters
            .zero_filled_ahead
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        out
    }

    /// A fault on a prefetched marker: served from the local copy, counted as a hit of its
    /// window, and the faulting thread's stream asks for the next window.
    fn marker_fault(
        &mut self,
        ev: Event,
        p: usize,
        write: bool,
        tid: u32,
        class: ThreadClass,
        started: Instant,
    ) {
        if self.s.state[p]
            .compare_exchange(CACHED, BUSY, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return self.retry.push(ev);
        }
        let prefetch = self.s.prefetch.as_ref();
        let Some(marker) = prefetch.and_then(|pf| pf.take_marker(p)) else {
            self.s
                .die(&format!("prefetch marker for heap page {p} is missing"));
        };
        let protect = !write && self.s.tracks_dirty(class);
        let outcome = self.install(p, marker.data.as_ptr(), protect);
        if outcome == CopyOutcome::Again {
            self.s.prefetch.as_ref().unwrap().put_back_marker(p, marker);
            self.s.state[p].store(CACHED, Ordering::SeqCst);
            return self.retry.push(ev);
        }
        let admission = self.s.config.policy.admission(class, Source::Demand);
        self.finish_install(p, outcome, if protect { CLEAN } else { DIRTY }, admission);
        self.s.prefetch.as_ref().unwrap().credit_hit(&marker);
        self.count(class, FaultKind::Hit);
        self.record_latency(started, false);
        self.flush_wakes();
        self.s.prefetch_after(tid, class, p, true);
    }

    fn finish_install(&mut self, p: usize, outcome: CopyOutcome, state: u8, admission: Admission) {
        match outcome {
            CopyOutcome::Copied | CopyOutcome::Exists => {
                self.s.residency[p].store(0, Ordering::Release);
                self.s.state[p].store(state, Ordering::SeqCst);
                self.s.admit(p, admission, true);
            }
            _ => {
                // The range went away under us (unmapped, or `Again` for a fill-ahead page):
                // leave the page untouched; an UNMAP event resets the rest.
                self.s.resident.fetch_sub(1, Ordering::SeqCst);
                self.s.state[p].store(UNTOUCHED, Ordering::SeqCst);
            }
        }
        self.wakes.push(self.s.page_addr(p));
    }

    fn write_fault(&mut self, ev: Event, p: usize, class: ThreadClass) {
        let s = self.s.state[p].load(Ordering::SeqCst);
        match s {
            CLEAN | CLEAN_ZERO | DIRTY => {
                if s != DIRTY
                    && self.s.state[p]
                        .compare_exchange(s, DIRTY, Ordering::SeqCst, Ordering::SeqCst)
                        .is_err()
                {
                    return self.retry.push(ev);
                }
                // Promote before the unprotect wakes the writer (harmless if it is retried).
                if self.s.cold[p].load(Ordering::Relaxed) && self.s.config.policy.promotes(class) {
                    self.s.cold[p].store(false, Ordering::Relaxed);
                    self.s.counters.promoted.fetch_add(1, Ordering::Relaxed);
                }
                let a = self.s.page_addr(p);
                match self.s.uffd.write_protect(a, PAGE_SIZE, false, true) {
                    Ok(true) => {}
                    Ok(false) => {
                        self.s.state[p].store(s, Ordering::SeqCst);
                        return self.retry.push(ev);
                    }
                    Err(e) => self
                        .s
                        .die(&format!("cannot unprotect heap page {p} at {a:#x}: {e}")),
                }
                self.s.referenced[p].store(true, Ordering::Relaxed);
                if s != DIRTY {
                    self.s.config.policy.note_written(class);
                }
                self.count(
                    class,
                    if s == DIRTY {
                        FaultKind::Stale
                    } else {
                        FaultKind::Write
                    },
                );
            }
            BUSY => self.retry.push(ev),
            _ => {
                // Evicted while the writer waited: wake it; it re-faults as MISSING.
                self.wakes.push(self.s.page_addr(p));
                self.count(class, FaultKind::Stale);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subtracting_ranges_from_spans() {
        let spans = [
            Span { start: 0, end: 100 },
            Span {
                start: 200,
                end: 300,
            },
        ];
        assert_eq!(
            subtract(&spans, 50, 250),
            vec![
                Span { start: 0, end: 50 },
                Span {
                    start: 250,
                    end: 300
                }
            ]
        );
        assert_eq!(subtract(&spans, 0, 400), vec![]);
        assert_eq!(subtract(&spans, 120, 180), spans.to_vec());
        assert_eq!(
            subtract(&spans, 10, 20),
            vec![
                Span { start: 0, end: 10 },
                Span {
                    start: 20,
                    end: 100
                },
                Span {
                    start: 200,
                    end: 300
                }
            ]
        );
    }

    #[test]
    fn runs_coalesce_neighbours() {
        assert_eq!(
            runs(0x1000, &[0, 1, 2, 5, 6, 9]),
            vec![
                (0x1000, 3 * PAGE_SIZE),
                (0x1000 + 5 * PAGE_SIZE, 2 * PAGE_SIZE),
                (0x1000 + 9 * PAGE_SIZE, PAGE_SIZE)
            ]
        );
    }
}
