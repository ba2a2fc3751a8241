//! Fault service: missing faults (zero fill, remote fetch, prefetch marker, reactivation of an
//! inactive page) and write-protect faults, served by the handler loop from userfaultfd events
//! (`faults=thread`) or by the faulting thread itself from its SIGBUS handler (`signal`).
//!
//! A fault claims its page; a handler that finds the page `Busy` (another thread is fetching,
//! deactivating or mapping it) retries that fault after its batch. Copies map pages without
//! waking; the wakes of a batch are issued together (the wake dominated fault latency on this
//! kind of VM).

use std::cell::Cell;
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Instant;

use swap_backend::PAGE_SIZE;

use super::page_table::{Claim, PageState};
use super::{os, Shared, CYCLE_GAP, ZERO_PAGE};
use crate::model::{FaultKind, ThreadClass, ThreadKind};
use crate::policy::Source;
use crate::uffd::{CopyOutcome, Event};

/// One page fault being served: the event (kept for a retry) and what was read from it.
#[derive(Clone, Copy)]
struct Fault {
    ev: Event,
    page: usize,
    write: bool,
    tid: u32,
    class: ThreadClass,
    /// When the handler read the event (handler-side latency starts here).
    started: Instant,
}

thread_local! {
    /// A thread serving its own faults (`faults=signal`): its kind, per pager.
    static KIND: Cell<(usize, Option<ThreadKind>)> = const { Cell::new((0, None)) };
}

/// One fault-handler thread, or a thread serving its own fault (`for_signal`).
pub(super) struct Handler<'a> {
    s: &'a Shared,
    index: usize,
    /// Serving the current thread's own fault from its SIGBUS handler: nobody waits to be
    /// woken, and a retry is the access faulting again.
    signal: bool,
    kinds: HashMap<u32, ThreadKind>,
    fetch_buf: Vec<u8>,
    zeros: Vec<u8>,
    wakes: Vec<usize>,
    retry: Vec<Event>,
    /// Remote pages of the batch being handled, claimed, waiting for one read.
    fetches: Vec<(Claim<'a>, Fault)>,
}

impl<'a> Handler<'a> {
    pub(super) fn new(s: &'a Shared, index: usize) -> Self {
        Handler {
            s,
            index,
            signal: false,
            kinds: HashMap::new(),
            fetch_buf: Vec::new(),
            zeros: Vec::new(),
            wakes: Vec::new(),
            retry: Vec::new(),
            fetches: Vec::new(),
        }
    }

    /// Serves the calling thread's own fault (from the SIGBUS handler). Allocates nothing
    /// until a fault needs a buffer.
    pub(super) fn for_signal(s: &'a Shared) -> Self {
        Handler {
            signal: true,
            ..Handler::new(s, s.latencies.len() - 2)
        }
    }

    /// Serves the calling thread's fault at `addr`: `present` when the page was mapped (a
    /// write to a write-protected page), else missing. `true`: retry (the access faults
    /// again once whoever holds the page is done).
    pub(super) fn serve(
        mut self,
        addr: usize,
        write: bool,
        present: bool,
        started: Instant,
    ) -> bool {
        let tid = swap_backend::cpu::gettid();
        let ev = Event::Fault {
            addr,
            write,
            wp: present && write,
            tid,
        };
        self.handle(ev, started);
        self.flush_fetches();
        !self.retry.is_empty()
    }

    pub(super) fn run(mut self) {
        let mut events = [Event::Other(0); 64];
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
        loop {
            // Never sleep with faults waiting for a retry; otherwise poll briefly while a
            // core is idle (a wake costs more than the next fault usually takes to come),
            // then sleep.
            let mut ready = if self.retry.is_empty() && !self.s.serves_by_signal() {
                let mut n = 0;
                swap_backend::spin::spin_until(|| {
                    // An error is reported by the blocking poll below.
                    n = os::poll(&mut fds, 0).unwrap_or(0);
                    n > 0
                });
                n
            } else {
                0
            };
            if ready == 0 {
                let timeout = if self.retry.is_empty() { -1 } else { 0 };
                ready = match os::poll(&mut fds, timeout) {
                    Ok(n) => n,
                    Err(e) => self.s.die(&format!("fault handler cannot poll: {e}")),
                };
            }
            if ready > 0 && fds[1].revents != 0 {
                // On stop the eventfd is left readable so that every handler sees it.
                if self.s.stop.load(Ordering::SeqCst) {
                    return;
                }
                os::drain(&self.s.wakeup);
            }
            // New events first: an UNMAP event read here is what lets an EAGAIN'd retry below
            // succeed (the kernel refuses copies while an unread event changes the mm).
            let n = if ready > 0 && fds[0].revents != 0 {
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
                continue;
            }
            let started = Instant::now();
            let retries = std::mem::take(&mut self.retry);
            for ev in events[..n].iter().copied().chain(retries) {
                self.handle(ev, started);
            }
            self.flush_fetches();
            self.flush_wakes();
            if !self.retry.is_empty() {
                std::thread::yield_now();
            }
        }
    }

    /// A handler thread caches the kinds of the threads it served; a thread serving its own
    /// fault caches its own, per pager.
    fn cached_kind(&self, tid: u32) -> Option<ThreadKind> {
        if self.signal {
            match KIND.with(Cell::get) {
                (p, k) if p == self.s as *const Shared as usize => k,
                _ => None,
            }
        } else {
            self.kinds.get(&tid).copied()
        }
    }

    fn cache_kind(&mut self, tid: u32, k: ThreadKind) {
        if self.signal {
            KIND.with(|c| c.set((self.s as *const Shared as usize, Some(k))));
        } else {
            self.kinds.insert(tid, k);
        }
    }

    fn class_of(&mut self, tid: u32) -> ThreadClass {
        if tid == self.s.probe_tid.load(Ordering::Relaxed) {
            return ThreadClass::Other;
        }
        let kind = match self.cached_kind(tid) {
            Some(k) => k,
            None => {
                let k = self.s.classifier.kind_of(tid);
                if k != ThreadKind::Unknown {
                    self.cache_kind(tid, k);
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
        if class == ThreadClass::GcConcurrent
            && kind == FaultKind::Remote
            && self.s.marking.load(Ordering::Relaxed)
        {
            self.s
                .counters
                .gc_concurrent_remote_while_marking
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records a fault's handler-side service time; returns it (ns).
    fn record_latency(&self, started: Instant, remote: bool) -> u64 {
        let ns = started.elapsed().as_nanos() as u64;
        if remote {
            self.s.reclaim.sizer().costs.remote_service(ns);
        }
        let mut l = self.s.latencies[self.index].lock().unwrap();
        let _ = l.all.record(ns.max(1));
        if remote {
            let _ = l.remote.record(ns.max(1));
        }
        ns
    }

    fn flush_wakes(&mut self) {
        if self.signal {
            self.wakes.clear(); // the only waiter is this thread, which is running
        }
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
        for (start, len) in os::runs(self.s.base, &pages) {
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
                let class = self.class_of(tid);
                self.note_phase(class);
                let f = Fault {
                    ev,
                    page: (addr - self.s.base) / PAGE_SIZE,
                    write,
                    tid,
                    class,
                    started,
                };
                if wp {
                    self.write_fault(f);
                } else {
                    self.missing_fault(f);
                }
            }
            Event::Unmap { start, end } => {
                // The fetches claimed so far first: the unmap waits for claimed pages.
                self.flush_fetches();
                self.flush_wakes();
                self.s.unmapped(start, end);
            }
            Event::Other(_) => {}
        }
    }

    /// Maps `src` at page `p` (which this handler has claimed), without waking; the wake is
    /// batched.
    fn install(&mut self, p: usize, src: *const u8, write_protect: bool) -> CopyOutcome {
        let addr = self.s.page_addr(p);
        // SAFETY: src is a full page (the zero page, our fetch buffer, a marker or a slot,
        // which nobody writes while the page is claimed); page p is in the registered region
        // and claimed, so nobody else maps it.
        match unsafe { self.s.uffd.copy(addr, src, PAGE_SIZE, write_protect, false) } {
            Ok(o) => o,
            Err(e) => self
                .s
                .die(&format!("cannot map heap page {p} at {addr:#x}: {e}")),
        }
    }

    /// Maps `count` zero pages from page `p` on (all claimed by this handler), writable.
    fn install_run(&mut self, p: usize, count: usize) -> CopyOutcome {
        if self.zeros.len() < count * PAGE_SIZE {
            self.zeros = vec![0; count * PAGE_SIZE];
        }
        let addr = self.s.page_addr(p);
        // SAFETY: `zeros` holds `count` pages; pages p..p+count are registered (claim_ahead
        // stays inside p's span) and claimed, so nobody else maps them.
        match unsafe {
            self.s
                .uffd
                .copy(addr, self.zeros.as_ptr(), count * PAGE_SIZE, false, false)
        } {
            Ok(o) => o,
            Err(_) => CopyOutcome::Gone,
        }
    }

    /// Ends the claim of a page just mapped (or not, if its range went away).
    fn finish_install(&mut self, c: Claim<'_>, outcome: CopyOutcome, state: PageState) -> bool {
        let p = c.page();
        self.wakes.push(self.s.page_addr(p));
        match outcome {
            CopyOutcome::Copied | CopyOutcome::Exists => {
                c.finish(state);
                true
            }
            _ => {
                // The range went away under us (unmapped, or `Again` for a fill-ahead page):
                // leave the page untouched; an UNMAP event resets the rest.
                c.finish(PageState::Untouched);
                false
            }
        }
    }

    fn missing_fault(&mut self, f: Fault) {
        let Fault {
            ev, page: p, class, ..
        } = f;
        match self.s.table.get(p) {
            PageState::Cached => self.marker_fault(f),
            PageState::InactiveClean | PageState::InactiveDirty | PageState::Writeback => {
                self.reactivate(f)
            }
            PageState::Untouched => self.zero_fault(f),
            PageState::Remote => self.remote_fault(f),
            s @ (PageState::CleanZero | PageState::Clean | PageState::Dirty) => {
                // Already mapped (a duplicate message), or discarded by the JVM behind our back
                // (then zeros are the right content).
                let Some(c) = self.s.table.claim(p, s) else {
                    return self.retry.push(ev);
                };
                let o = self.install(p, ZERO_PAGE.0.as_ptr(), false);
                if o == CopyOutcome::Again {
                    drop(c);
                    return self.retry.push(ev);
                }
                self.wakes.push(self.s.page_addr(p));
                c.finish(if o == CopyOutcome::Copied {
                    PageState::Dirty
                } else {
                    s
                });
                self.count(class, FaultKind::Stale);
            }
            PageState::Busy => self.retry.push(ev),
        }
    }

    /// A first touch: zero-filled here, with a run of untouched pages ahead for a write.
    fn zero_fault(&mut self, f: Fault) {
        let Fault {
            ev,
            page: p,
            write,
            class,
            started,
            ..
        } = f;
        let Some(mut c) = self.s.table.claim(p, PageState::Untouched) else {
            return self.retry.push(ev);
        };
        if !self.s.charge(&mut c) {
            return self.retry.push(ev); // claim dropped: state restored
        }
        let mut ahead = if write {
            self.claim_ahead(p)
        } else {
            Vec::new()
        };
        // A write fault with pages claimed ahead maps the whole run in one ioctl; if that
        // fails part way, the pages are mapped one by one (a page already mapped then reports
        // `Exists`, which is fine).
        let run_ok =
            !ahead.is_empty() && self.install_run(p, 1 + ahead.len()) == CopyOutcome::Copied;
        // Map write-protected after a read so that the first write is seen, unless dirtiness
        // is not tracked (then every page counts as written).
        let protect = !write && self.s.tracks_dirty(class);
        let outcome = if run_ok {
            CopyOutcome::Copied
        } else {
            self.install(p, ZERO_PAGE.0.as_ptr(), protect)
        };
        if outcome == CopyOutcome::Again {
            // The mm is changing under an unread event: give everything back (the claims
            // restore states and charges) and retry once the event is read.
            drop(ahead);
            drop(c);
            return self.retry.push(ev);
        }
        let admission = self.s.config.policy.admission(class, Source::ZeroFill);
        let state = if protect {
            PageState::CleanZero
        } else {
            PageState::Dirty
        };
        if self.finish_install(c, outcome, state) {
            self.s.admit(p, admission, false);
        }
        for q in ahead.drain(..) {
            let qp = q.page();
            let o = if run_ok {
                CopyOutcome::Copied
            } else {
                self.install(qp, ZERO_PAGE.0.as_ptr(), false)
            };
            if self.finish_install(q, o, PageState::Dirty) {
                self.s.admit(qp, admission, false);
            }
        }
        self.s.table.note_peak();
        self.count(class, FaultKind::Zero);
        self.record_latency(started, false);
    }

    /// A remote page: claimed and charged now, read with the batch's other remote pages in
    /// one request (`flush_fetches`), so that faults arriving together share a round trip.
    fn remote_fault(&mut self, f: Fault) {
        let Some(mut c) = self.s.table.claim(f.page, PageState::Remote) else {
            return self.retry.push(f.ev);
        };
        if !self.s.charge(&mut c) {
            return self.retry.push(f.ev); // claim dropped: state restored
        }
        self.fetches.push((c, f));
    }

    /// Reads the remote pages of this batch in one request and maps them.
    fn flush_fetches(&mut self) {
        if self.fetches.is_empty() {
            return;
        }
        let fetches = std::mem::take(&mut self.fetches);
        let ids: Vec<u64> = fetches.iter().map(|(_, f)| f.page as u64).collect();
        self.fetch_buf.resize(ids.len() * PAGE_SIZE, 0);
        if let Err(e) = self.s.store.read_pages(&ids, &mut self.fetch_buf) {
            let p = ids[0] as usize;
            self.s.die(&format!(
                "cannot fetch heap page {p} ({:#x}) from {}: {e}",
                self.s.page_addr(p),
                self.s.store.describe_page(ids[0])
            ));
        }
        let mut served = Vec::with_capacity(fetches.len());
        for (i, (c, f)) in fetches.into_iter().enumerate() {
            let p = f.page;
            // Map write-protected after a read so that the first write is seen.
            let protect = !f.write && self.s.tracks_dirty(f.class);
            let src = self.fetch_buf[i * PAGE_SIZE..].as_ptr();
            let outcome = self.install(p, src, protect);
            if outcome == CopyOutcome::Again {
                drop(c);
                self.retry.push(f.ev);
                continue;
            }
            // Counted once the read is used: a retried fault reads again.
            self.s.counters.pages_read.fetch_add(1, Ordering::Relaxed);
            // Feeds the inactive list's sizing and the working-set count.
            self.s
                .reclaim
                .refault(self.s.table.evicted_at(p), self.s.table.charged());
            let admission = self.s.config.policy.admission(f.class, Source::Demand);
            let state = if protect {
                PageState::Clean
            } else {
                PageState::Dirty
            };
            if self.finish_install(c, outcome, state) {
                self.s.admit(p, admission, false);
            }
            self.count(f.class, FaultKind::Remote);
            self.record_latency(f.started, true);
            served.push(f);
        }
        self.s.table.note_peak();
        // Wake the faulting threads before their windows are even queued.
        self.flush_wakes();
        for f in served {
            self.s.prefetch_after(f.tid, f.class, f.page, false);
        }
    }

    /// Claims (and charges) up to `fill_ahead` untouched pages after `p` for zero fill, as
    /// far as the budget has room without reclaiming (they are speculative).
    fn claim_ahead(&self, p: usize) -> Vec<Claim<'a>> {
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
            let Some(mut c) = self.s.table.claim(q, PageState::Untouched) else {
                break;
            };
            if !c.try_charge(self.s.config.budget_pages) {
                break; // dropped: untouched again
            }
            out.push(c);
        }
        self.s
            .counters
            .zero_filled_ahead
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        out
    }

    /// A touch of an inactive page: its bytes come back from its slot, no network.
    fn reactivate(&mut self, f: Fault) {
        let Fault {
            ev,
            page: p,
            write,
            class,
            started,
            ..
        } = f;
        let Some(c) = self.s.table.claim_if(p, PageState::is_inactive) else {
            return self.retry.push(ev);
        };
        let from = c.from();
        let Some((slot, bytes)) = self.s.reclaim.take_slot(p) else {
            self.s
                .die(&format!("inactive heap page {p} has no local copy"));
        };
        let clean = from == PageState::InactiveClean;
        let protect = clean && !write && self.s.tracks_dirty(class);
        let outcome = self.install(p, bytes, protect);
        if outcome == CopyOutcome::Again {
            self.s.reclaim.restore_slot(p, slot);
            drop(c);
            return self.retry.push(ev);
        }
        let state = match (protect, self.s.table.is_stored(p)) {
            (false, _) => PageState::Dirty,
            (true, true) => PageState::Clean,
            (true, false) => PageState::CleanZero,
        };
        // A page in write-back keeps its slot until the write is done: the reclaimer frees it.
        let freed = (from != PageState::Writeback).then_some(slot);
        if freed.is_none() {
            self.s
                .reclaim
                .counters
                .reactivated_in_writeback
                .fetch_add(1, Ordering::Relaxed);
        }
        self.s.reclaim.reactivated(p, freed);
        let admission = self.s.config.policy.admission(class, Source::Demand);
        if self.s.config.policy.promotes(class) && self.s.reclaim.promote(p) {
            self.s.counters.promoted.fetch_add(1, Ordering::Relaxed);
        }
        if self.finish_install(c, outcome, state) {
            self.s.admit(p, admission, true);
        }
        self.count(class, FaultKind::Reactivate);
        let ns = self.record_latency(started, false);
        self.s.reclaim.sizer().costs.local_service(ns);
    }

    /// A fault on a prefetched marker: served from the local copy, counted as a hit of its
    /// window, and the faulting thread's stream asks for the next window.
    fn marker_fault(&mut self, f: Fault) {
        let Fault {
            ev,
            page: p,
            write,
            tid,
            class,
            started,
        } = f;
        let Some(c) = self.s.table.claim(p, PageState::Cached) else {
            return self.retry.push(ev);
        };
        let prefetch = self.s.prefetch.as_ref();
        let Some(marker) = prefetch.and_then(|pf| pf.take_marker(p)) else {
            self.s
                .die(&format!("prefetch marker for heap page {p} is missing"));
        };
        let protect = !write && self.s.tracks_dirty(class);
        let outcome = self.install(p, marker.data.as_ptr(), protect);
        if outcome == CopyOutcome::Again {
            self.s.prefetch.as_ref().unwrap().put_back_marker(p, marker);
            drop(c);
            return self.retry.push(ev);
        }
        let admission = self.s.config.policy.admission(class, Source::Demand);
        let state = if protect {
            PageState::Clean
        } else {
            PageState::Dirty
        };
        if self.finish_install(c, outcome, state) {
            self.s.admit(p, admission, true);
        }
        self.s.prefetch.as_ref().unwrap().credit_hit(&marker);
        self.count(class, FaultKind::Hit);
        self.record_latency(started, false);
        self.flush_wakes();
        self.s.prefetch_after(tid, class, p, true);
    }

    fn write_fault(&mut self, f: Fault) {
        let Fault {
            ev, page: p, class, ..
        } = f;
        let s = self.s.table.get(p);
        match s {
            PageState::Clean | PageState::CleanZero | PageState::Dirty => {
                let Some(c) = self.s.table.claim(p, s) else {
                    return self.retry.push(ev);
                };
                // Promote before the unprotect wakes the writer.
                if self.s.reclaim.is_cold(p)
                    && self.s.config.policy.promotes(class)
                    && self.s.reclaim.promote(p)
                {
                    self.s.counters.promoted.fetch_add(1, Ordering::Relaxed);
                }
                let a = self.s.page_addr(p);
                match self.s.uffd.write_protect(a, PAGE_SIZE, false, true) {
                    Ok(true) => {}
                    Ok(false) => {
                        drop(c);
                        return self.retry.push(ev);
                    }
                    Err(e) => self
                        .s
                        .die(&format!("cannot unprotect heap page {p} at {a:#x}: {e}")),
                }
                c.finish(PageState::Dirty);
                self.s.reclaim.set_referenced(p);
                if s != PageState::Dirty {
                    self.s.config.policy.note_written(class);
                }
                self.count(
                    class,
                    if s == PageState::Dirty {
                        FaultKind::Stale
                    } else {
                        FaultKind::Write
                    },
                );
            }
            PageState::Busy => self.retry.push(ev),
            _ => {
                // Deactivated or evicted while the writer waited: wake it; it re-faults as
                // MISSING.
                self.wakes.push(self.s.page_addr(p));
                self.count(class, FaultKind::Stale);
            }
        }
    }
}
