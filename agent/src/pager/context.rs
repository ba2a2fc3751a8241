//! The context every part of the pager shares: the region and its page table, the userfaultfd,
//! the store, the OS calls, the counters and the configuration. It maps pages (the one place
//! that calls UFFDIO_COPY) and wakes their waiters; it decides nothing.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use swap_backend::{PageStore, PAGE_SIZE};

use super::config::{FatalFn, PagerConfig};
use super::counters::{Latencies, PagerCounters, Role};
use super::os;
use super::page_table::{Claim, PageTable};
use crate::maps::Span;
use crate::model::{FaultKind, ThreadClass, ThreadClassifier};
use crate::uffd::{CopyOutcome, Uffd};

#[repr(C, align(4096))]
pub(super) struct AlignedPage(pub [u8; PAGE_SIZE]);
/// A page of zeros to map from.
pub(super) static ZERO_PAGE: AlignedPage = AlignedPage([0; PAGE_SIZE]);

/// Most pages one zero fill maps (the faulting page and those filled ahead of it).
pub(super) const ZERO_RUN_PAGES: usize = 32;
#[repr(C, align(4096))]
pub(super) struct ZeroRun(pub [u8; ZERO_RUN_PAGES * PAGE_SIZE]);
/// Zeros for a fill-ahead run, shared by every thread: a thread serving its own fault has no
/// buffer that outlives the fault, and allocating 128 KiB of zeros for each (glibc's mmap
/// threshold: an mmap, 32 zero-page faults inside the copy and an munmap) cost more than the
/// run saved. Never written: its pages stay the kernel's zero page.
pub(super) static ZERO_RUN: ZeroRun = ZeroRun([0; ZERO_RUN_PAGES * PAGE_SIZE]);

pub(super) struct Ctx {
    pub uffd: Uffd,
    /// Faulting threads serve their own faults (see `signal`).
    pub by_signal: bool,
    pub base: usize,
    pub npages: usize,
    pub table: PageTable,
    /// The registered (anonymous) parts of the region.
    pub spans: Mutex<Vec<Span>>,
    pub config: PagerConfig,
    pub store: Box<dyn PageStore>,
    pub classifier: Box<dyn ThreadClassifier>,
    pub counters: PagerCounters,
    /// One per handler thread, one for faults served by signal, one for the probe.
    pub latencies: Vec<Mutex<Latencies>>,
    /// Our threads, by role, with their kernel ids (for CPU time).
    pub threads: Mutex<Vec<(Role, u32)>>,
    /// The probe thread's kernel id, 0 until it runs.
    pub probe_tid: AtomicU32,
    /// The heap page whose stored copy the probe's own page faults in (`faults=signal`).
    pub probe_source: AtomicUsize,
    pub fatal: FatalFn,
    pub stop: AtomicBool,
    /// Kicked to wake the handler threads from poll (on stop).
    pub wakeup: std::os::fd::OwnedFd,
    pub madvise: os::Madvise,
    /// Set once the heap was found locked (mlock/mlockall) and unlocked (`discard`).
    pub unlocked: AtomicBool,
    pub epoch: Instant,
}

impl Ctx {
    pub fn page_addr(&self, p: usize) -> usize {
        self.base + p * PAGE_SIZE
    }

    /// The page holding `addr`, if it is in the region.
    pub fn page_of(&self, addr: usize) -> Option<usize> {
        let off = addr.checked_sub(self.base)?;
        (off < self.npages * PAGE_SIZE).then_some(off / PAGE_SIZE)
    }

    pub fn die(&self, what: &str) -> ! {
        (self.fatal)(what)
    }

    /// Whether a page read in for `class` is mapped write-protected.
    pub fn tracks_dirty(&self, class: ThreadClass) -> bool {
        let t = self.config.track_dirty && self.config.policy.track_dirty(class);
        if t {
            self.config.policy.note_tracked(class);
        }
        t
    }

    /// Maps claimed page `c` from `src` (one page), without waking its waiters. A failure
    /// other than the documented outcomes stops the JVM: a page that cannot be mapped cannot
    /// be served.
    pub fn map(&self, c: &Claim<'_>, src: &[u8], write_protect: bool) -> CopyOutcome {
        self.map_run(c, &[], src, write_protect)
    }

    /// Maps the run of claimed pages `first`, `rest...` (neighbours, in order) from `src` in
    /// one ioctl, without waking their waiters. A run that fails part way reports `Gone`: the
    /// caller maps its pages one by one.
    pub fn map_run(
        &self,
        first: &Claim<'_>,
        rest: &[Claim<'_>],
        src: &[u8],
        write_protect: bool,
    ) -> CopyOutcome {
        let p = first.page();
        assert!(
            src.len() == (1 + rest.len()) * PAGE_SIZE
                && rest.iter().enumerate().all(|(i, c)| c.page() == p + 1 + i),
            "a run of {} claimed pages from heap page {p} mapped from {} bytes",
            1 + rest.len(),
            src.len()
        );
        let addr = self.page_addr(p);
        match os::copy_in(&self.uffd, addr, src, write_protect) {
            Ok(o) => o,
            Err(_) if !rest.is_empty() => CopyOutcome::Gone,
            Err(e) => self.die(&format!("cannot map heap page {p} at {addr:#x}: {e}")),
        }
    }

    /// Discards the contents of `runs` (start, length) of claimed pages: `MADV_DONTNEED`.
    ///
    /// A locked mapping refuses it (EINVAL): a service that pins its memory against swap
    /// (Cassandra calls `mlockall(MCL_CURRENT)` at start; Elasticsearch's `memory_lock`) locks
    /// the heap too, and a locked heap cannot have far memory. The first refusal unlocks the
    /// whole region at once (one range: unlocking run by run would split the mapping into as many
    /// areas, up to vm.max_map_count), says so once, and tries again; the rest of the process
    /// stays locked. (Under `MCL_FUTURE` the heap's later mappings come locked: each is
    /// unlocked the same way.)
    pub fn discard(&self, runs: &[(usize, usize)]) -> std::io::Result<()> {
        match self.madvise.dontneed(runs) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                os::munlock(self.base, self.npages * PAGE_SIZE)?;
                if !self.unlocked.swap(true, Ordering::Relaxed) {
                    crate::logging::log!(
                        crate::options::LogLevel::Warn,
                        "the JVM locked its memory (mlock/mlockall, as Cassandra does at start): \
                         the heap is unlocked so that its pages can live on the memory server; the \
                         rest of the process stays locked"
                    );
                }
                self.madvise.dontneed(runs)
            }
            r => r,
        }
    }

    /// Wakes the threads waiting on `pages` (sorted or not), one ioctl per run.
    pub fn wake(&self, pages: &mut Vec<usize>) {
        if pages.is_empty() {
            return;
        }
        pages.sort_unstable();
        pages.dedup();
        for (start, len) in os::runs(self.base, pages) {
            if let Err(e) = self.uffd.wake(start, len) {
                self.die(&format!("cannot wake threads waiting at {start:#x}: {e}"));
            }
        }
        pages.clear();
    }

    /// The first page after the registered span holding page `p` (`p + 1` if none does).
    pub fn span_end(&self, p: usize) -> usize {
        let addr = self.page_addr(p);
        self.spans
            .lock()
            .unwrap()
            .iter()
            .find(|sp| sp.start <= addr && addr < sp.end)
            .map_or(p + 1, |sp| (sp.end - self.base) / PAGE_SIZE)
    }

    /// A fault served by its own thread took `ns`.
    pub fn note_signal_fault(&self, ns: u64) {
        self.counters.signal_faults.fetch_add(1, Ordering::Relaxed);
        self.counters
            .signal_service_ns
            .fetch_add(ns, Ordering::Relaxed);
    }

    /// Counts a fault of `kind` by `class`.
    pub fn count(&self, class: ThreadClass, kind: FaultKind, marking: bool) {
        self.counters.faults[class as usize][kind as usize].fetch_add(1, Ordering::Relaxed);
        if class == ThreadClass::GcConcurrent && kind == FaultKind::Remote && marking {
            self.counters
                .gc_concurrent_remote_while_marking
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records a fault's handler-side service time in histogram set `index`; returns it (ns).
    pub fn record_latency(&self, index: usize, started: Instant, remote: bool) -> u64 {
        let ns = started.elapsed().as_nanos() as u64;
        self.counters.fault_latency[usize::from(remote)].record(ns.max(1));
        let mut l = self.latencies[index].lock().unwrap();
        let _ = l.all.record(ns.max(1));
        if remote {
            let _ = l.remote.record(ns.max(1));
        }
        ns
    }
}
