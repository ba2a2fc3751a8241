//! Fault service: missing faults (zero fill, remote fetch, prefetch marker, reactivation of an
//! inactive page) and write-protect faults, served by the handler loop from userfaultfd events
//! (`faults=thread`) or by the faulting thread itself from its SIGBUS handler (`signal`).
//!
//! A fault claims its page; a handler that finds the page `Busy` (another thread is fetching,
//! deactivating or mapping it) retries that fault after its batch. Every kind of fault maps its
//! page the same way (`install`): map without waking, tell the reclaimer (holding the claim),
//! end the claim; the wakes of a batch are issued together (the wake dominated fault latency
//! on this kind of VM).

use std::cell::Cell;
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Instant;

use swap_backend::PAGE_SIZE;

use super::context::{Ctx, ZERO_PAGE, ZERO_RUN, ZERO_RUN_PAGES};
use super::os;
use super::page_table::budget::Charge;
use super::page_table::{Claim, PageState};
use super::parts::Parts;
use super::reclaim::Arrival;
use crate::gc_activity::GcActivity;
use crate::model::{FaultKind, ThreadClass, ThreadKind};
use crate::policy::Source;
use crate::uffd::{CopyOutcome, Event};

/// Pages of zeros or dead bytes a write fault unprotects after its own at most: the rest of a
/// 1 MiB region (G1's region size for heaps up to 2 GiB). Unprotecting costs a TLB shootdown
/// per call whatever its length, and the JVM fills a reused region front to back: with 31
/// (a zero fill's run) Spark KMeans at 25% of 1 GiB took 117k write faults, 6.5 s.
const UNPROTECT_AHEAD: usize = 255;

/// One page fault being served: the event (kept for a retry) and what was read from it.
#[derive(Clone, Copy)]
struct Fault {
    ev: Event,
    page: usize,
    write: bool,
    tid: u32,
    class: ThreadClass,
    /// What a concurrent GC thread does (a pause's work is told when the pause ends).
    activity: Option<GcActivity>,
    /// When the handler read the event (handler-side latency starts here).
    started: Instant,
}

thread_local! {
    /// A thread serving its own faults (`faults=signal`): its kind, per pager.
    static KIND: Cell<(usize, Option<ThreadKind>)> = const { Cell::new((0, None)) };
    /// Its page buffer, kept from fault to fault: allocating and zeroing one for each was 0.9%
    /// of a paging run's cycles (kv, 1 GiB at 25%).
    static SIGNAL_BUF: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// How a page being mapped joins the reclaimer's lists.
#[derive(Clone, Copy)]
enum Joins {
    /// Admitted, as the policy said for `class` and `source`.
    Admitted {
        arrival: Arrival,
        class: ThreadClass,
        source: Source,
    },
    /// An inactive page mapped back from `slot`.
    Reactivated {
        slot: u32,
        in_writeback: bool,
        class: ThreadClass,
    },
}

/// How an `install` ended.
enum Installed<'c> {
    /// Mapped (or its range went away: left untouched); the claim is finished.
    Done,
    /// The mm is changing under an unread event: the claim is handed back for the caller
    /// to undo what it prepared, then drop; the fault is retried after events are read.
    Again(Claim<'c>),
}

/// One fault-handler thread, or a thread serving its own fault (`for_signal`).
pub(super) struct Handler<'a> {
    p: &'a Parts,
    index: usize,
    /// Serving the current thread's own fault from its SIGBUS handler: nobody waits to be
    /// woken, and a retry is the access faulting again.
    signal: bool,
    kinds: HashMap<u32, ThreadKind>,
    fetch_buf: Vec<u8>,
    /// Pages whose waiters are woken at the end of the batch.
    wakes: Vec<usize>,
    retry: Vec<Event>,
    /// Remote pages of the batch being handled, claimed, waiting for one read.
    fetches: Vec<(Claim<'a>, Fault)>,
}

impl<'a> Handler<'a> {
    pub(super) fn new(p: &'a Parts, index: usize) -> Self {
        Handler {
            p,
            index,
            signal: false,
            kinds: HashMap::new(),
            fetch_buf: Vec::new(),
            wakes: Vec::new(),
            retry: Vec::new(),
            fetches: Vec::new(),
        }
    }

    /// Serves the calling thread's own fault (from the SIGBUS handler), reading into the
    /// thread's own page buffer (`SIGNAL_BUF`), which `serve` hands back.
    pub(super) fn for_signal(p: &'a Parts) -> Self {
        Handler {
            signal: true,
            fetch_buf: SIGNAL_BUF.with(Cell::take),
            ..Handler::new(p, p.ctx.latencies.len() - 2)
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
        let tid = memliner_cpu::gettid();
        let ev = Event::Fault {
            addr,
            write,
            wp: present && write,
            tid,
        };
        self.handle(ev, started);
        self.flush_fetches();
        SIGNAL_BUF.with(|b| b.set(std::mem::take(&mut self.fetch_buf)));
        !self.retry.is_empty()
    }

    pub(super) fn run(mut self) {
        let ctx = &*self.p.ctx;
        let mut events = [Event::Other(0); 64];
        let mut fds = [
            libc::pollfd {
                fd: ctx.uffd.raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: ctx.wakeup.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        loop {
            // Never sleep with faults waiting for a retry; otherwise poll briefly while a
            // core is idle (a wake costs more than the next fault usually takes to come),
            // then sleep.
            let mut ready = if self.retry.is_empty() && !ctx.by_signal {
                let mut n = 0;
                memliner_cpu::spin::spin_until(|| {
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
                    Err(e) => ctx.die(&format!("fault handler cannot poll: {e}")),
                };
            }
            if ready > 0 && fds[1].revents != 0 {
                // On stop the eventfd is left readable so that every handler sees it.
                if ctx.stop.load(Ordering::SeqCst) {
                    return;
                }
                os::drain(&ctx.wakeup);
            }
            // New events first: an UNMAP event read here is what lets an EAGAIN'd retry below
            // succeed (the kernel refuses copies while an unread event changes the mm).
            let n = if ready > 0 && fds[0].revents != 0 {
                match ctx.uffd.read_events(&mut events) {
                    Ok(n) => n,
                    Err(e) => ctx.die(&format!("fault handler cannot read faults: {e}")),
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
                (p, k) if p == self.p as *const Parts as usize => k,
                _ => None,
            }
        } else {
            self.kinds.get(&tid).copied()
        }
    }

    fn cache_kind(&mut self, tid: u32, k: ThreadKind) {
        if self.signal {
            KIND.with(|c| c.set((self.p as *const Parts as usize, Some(k))));
        } else {
            self.kinds.insert(tid, k);
        }
    }

    /// What a concurrent marking thread faulting now does: the path a GC-hook patched JVM
    /// wrote to the thread's byte (readable only here, on the faulting thread itself: with
    /// `faults=thread` a handler thread cannot), else the remembered-set rebuild between G1's
    /// remark and cleanup, else marking.
    fn marking_activity(&self) -> GcActivity {
        if self.signal {
            if let Some(a) = crate::mark_path::current() {
                return a;
            }
        }
        if self.p.ctx.classifier.rebuilding_remsets() {
            GcActivity::RemsetRebuild
        } else {
            GcActivity::ConcurrentMark
        }
    }

    /// The class of thread `tid`, and what it does if it is a concurrent GC thread.
    fn class_of(&mut self, tid: u32) -> (ThreadClass, Option<GcActivity>) {
        let ctx = &*self.p.ctx;
        if tid == ctx.probe_tid.load(Ordering::Relaxed) {
            return (ThreadClass::Other, None);
        }
        let kind = match self.cached_kind(tid) {
            Some(k) => k,
            None => {
                let k = ctx.classifier.kind_of(tid);
                if k != ThreadKind::Unknown {
                    self.cache_kind(tid, k);
                }
                k
            }
        };
        let concurrent = (ThreadClass::GcConcurrent, Some(GcActivity::ConcurrentOther));
        match kind {
            ThreadKind::Fixed(ThreadClass::GcConcurrent) => concurrent,
            ThreadKind::Fixed(c) => (c, None),
            ThreadKind::GcConcurrent(GcActivity::ConcurrentMark) => {
                (ThreadClass::GcConcurrent, Some(self.marking_activity()))
            }
            ThreadKind::GcConcurrent(a) => (ThreadClass::GcConcurrent, Some(a)),
            ThreadKind::GcWorker if ctx.classifier.in_gc_pause() => (ThreadClass::Gc, None),
            ThreadKind::GcWorker => concurrent,
            // Serial collects on the VM thread (Serial at 25% of 1 GiB: 40% of the remote
            // faults, counted as the VM's and admitted like the application's before).
            ThreadKind::VmThread if ctx.classifier.in_gc_pause() => (ThreadClass::Gc, None),
            ThreadKind::VmThread => (ThreadClass::Vm, None),
            ThreadKind::Unknown => (ThreadClass::Other, None),
        }
    }

    fn count(&self, class: ThreadClass, kind: FaultKind) {
        self.p.ctx.count(class, kind, self.p.phases.marking());
    }

    fn record_latency(&self, started: Instant, remote: bool) -> u64 {
        let ns = self.p.ctx.record_latency(self.index, started, remote);
        if remote {
            self.p.reclaim.sizer().costs.remote_service(ns);
        }
        ns
    }

    fn flush_wakes(&mut self) {
        if self.signal {
            self.wakes.clear(); // the only waiter is this thread, which is running
        }
        self.p.ctx.wake(&mut self.wakes);
    }

    fn handle(&mut self, ev: Event, started: Instant) {
        match ev {
            Event::Fault {
                addr,
                write,
                wp,
                tid,
            } => {
                let Some(page) = self.p.ctx.page_of(addr) else {
                    return;
                };
                let (class, activity) = self.class_of(tid);
                self.p
                    .phases
                    .note_fault(class, activity, &self.p.ctx.counters);
                let f = Fault {
                    ev,
                    page,
                    write,
                    tid,
                    class,
                    activity,
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
                super::remap::unmapped(self.p, start, end);
            }
            Event::Other(_) => {}
        }
    }

    /// Charges a fault's page, reclaiming directly when the budget is full. `false`: no room
    /// now (the caller drops the claim and retries the fault after reading events).
    fn charge(&self, c: &mut Claim<'_>) -> bool {
        let budget = &self.p.budget;
        budget.charge(c, Charge::Demand)
            || (self.p.reclaim.direct(true) && budget.charge(c, Charge::Demand))
    }

    /// The one way a fault maps a page: `src` (a full page nobody writes meanwhile) at
    /// claimed page `c`, then the reclaimer hears of it while the claim is held, then the
    /// claim ends in `state`. The wake is batched.
    fn install(
        &mut self,
        c: Claim<'a>,
        src: &[u8],
        protect: bool,
        state: PageState,
        joins: Joins,
    ) -> Installed<'a> {
        let outcome = self.p.ctx.map(&c, src, protect);
        self.joined(c, outcome, state, joins)
    }

    /// Ends the claim of a page whose mapping ended with `outcome` (see `install`).
    fn joined(
        &mut self,
        c: Claim<'a>,
        outcome: CopyOutcome,
        state: PageState,
        joins: Joins,
    ) -> Installed<'a> {
        let p = c.page();
        match outcome {
            CopyOutcome::Again => return Installed::Again(c),
            CopyOutcome::Copied | CopyOutcome::Exists => {
                let policy = &self.p.ctx.config.policy;
                match joins {
                    Joins::Admitted {
                        arrival,
                        class,
                        source,
                    } => {
                        // GC reads are admitted by their region: a pause's by the region at
                        // its start, a concurrent thread's by the collection set the last
                        // pause left (Shenandoah's). Zero-filled pages are copy destinations,
                        // the application's whatever the region: no lookup on that path.
                        let addr = self.p.ctx.page_addr(p);
                        let region = match (class, source) {
                            (_, Source::ZeroFill) => None,
                            (ThreadClass::Gc, _) => self.p.attribution.region_at(addr),
                            (ThreadClass::GcConcurrent, _) => {
                                self.p.attribution.concurrent_region(addr)
                            }
                            _ => None,
                        };
                        let admission = policy.admission(class, source, region);
                        self.p.reclaim.admit(p, arrival, admission);
                    }
                    Joins::Reactivated {
                        slot,
                        in_writeback,
                        class,
                    } => {
                        let activate = policy.references(class);
                        if self.p.reclaim.reactivated(p, slot, in_writeback, activate) {
                            self.p.ctx.counters.promoted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                c.finish(state);
            }
            CopyOutcome::Gone => {
                // The range went away under us (unmapped): leave the page untouched; its
                // UNMAP event resets the rest.
                if let Joins::Reactivated { slot, .. } = joins {
                    self.p.reclaim.restore_slot(p, slot);
                }
                self.p.reclaim.forget(p, c.from());
                c.finish(PageState::Untouched);
            }
        }
        self.wakes.push(p);
        Installed::Done
    }

    fn missing_fault(&mut self, f: Fault) {
        let Fault {
            ev, page: p, class, ..
        } = f;
        match self.p.ctx.table.get(p) {
            PageState::Cached => self.marker_fault(f),
            PageState::InactiveClean | PageState::InactiveDirty | PageState::Writeback => {
                self.reactivate(f)
            }
            PageState::Untouched => self.zero_fault(f),
            PageState::Remote => self.remote_fault(f),
            s @ (PageState::CleanZero | PageState::Clean | PageState::Dirty) => {
                // Already mapped (a duplicate message), or discarded by the JVM behind our back
                // (then zeros are the right content).
                let Some(c) = self.p.ctx.table.claim(p, s) else {
                    return self.retry.push(ev);
                };
                let o = self.p.ctx.map(&c, &ZERO_PAGE.0, false);
                if o == CopyOutcome::Again {
                    drop(c);
                    return self.retry.push(ev);
                }
                self.wakes.push(p);
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
        let ctx = &*self.p.ctx;
        let Some(mut c) = ctx.table.claim(p, PageState::Untouched) else {
            return self.retry.push(ev);
        };
        if !self.charge(&mut c) {
            return self.retry.push(ev); // claim dropped: state restored
        }
        let ahead = if write {
            self.claim_ahead(p)
        } else {
            Vec::new()
        };
        // A write fault with pages claimed ahead maps the whole run in one ioctl; if that
        // fails part way, the pages are mapped one by one (a page already mapped then reports
        // `Exists`, which is fine).
        let run = 1 + ahead.len();
        let run_ok = !ahead.is_empty() && {
            // Pages p..p+run are claimed (claim_ahead stays inside p's span and the run).
            let zeros = &ZERO_RUN.0[..run * PAGE_SIZE];
            ctx.map_run(&c, &ahead, zeros, false) == CopyOutcome::Copied
        };
        // Map write-protected after a read so that the first write is seen, unless dirtiness
        // is not tracked (then every page counts as written).
        let protect = !write && ctx.tracks_dirty(class);
        let state = if protect {
            PageState::CleanZero
        } else {
            PageState::Dirty
        };
        let joins = |arrival| Joins::Admitted {
            arrival,
            class,
            source: Source::ZeroFill,
        };
        let done = if run_ok {
            self.joined(c, CopyOutcome::Copied, state, joins(Arrival::Fault))
        } else {
            self.install(c, &ZERO_PAGE.0, protect, state, joins(Arrival::Fault))
        };
        if let Installed::Again(c) = done {
            // The mm is changing under an unread event: give everything back (the claims
            // restore states and charges) and retry once the event is read.
            drop(ahead);
            drop(c);
            return self.retry.push(ev);
        }
        for q in ahead {
            let j = joins(Arrival::Speculative);
            let done = if run_ok {
                self.joined(q, CopyOutcome::Copied, PageState::Dirty, j)
            } else {
                self.install(q, &ZERO_PAGE.0, false, PageState::Dirty, j)
            };
            if let Installed::Again(q) = done {
                drop(q); // untouched again: a later touch fills it
            }
        }
        self.p.budget.note_peak();
        self.count(class, FaultKind::Zero);
        self.record_latency(started, false);
    }

    /// A remote page: claimed and charged now, read with the batch's other remote pages in
    /// one request (`flush_fetches`), so that faults arriving together share a round trip.
    fn remote_fault(&mut self, f: Fault) {
        if f.class == ThreadClass::Gc {
            // A pause reads old regions through cards: read its cards' pages ahead of it.
            let kind = self.p.attribution.region_at(self.p.ctx.page_addr(f.page));
            self.p
                .pause_reads
                .gc_fault(&self.p.for_pause_reads(), f.page, kind);
        }
        let Some(mut c) = self.p.ctx.table.claim(f.page, PageState::Remote) else {
            return self.retry.push(f.ev);
        };
        if !self.charge(&mut c) {
            return self.retry.push(f.ev); // claim dropped: state restored
        }
        self.fetches.push((c, f));
    }

    /// Reads the remote pages of this batch in one request and maps them.
    fn flush_fetches(&mut self) {
        if self.fetches.is_empty() {
            return;
        }
        let ctx: &'a Ctx = &self.p.ctx;
        let fetches = std::mem::take(&mut self.fetches);
        let ids: Vec<u64> = fetches.iter().map(|(_, f)| f.page as u64).collect();
        let mut buf = std::mem::take(&mut self.fetch_buf);
        buf.resize(ids.len() * PAGE_SIZE, 0);
        if let Err(e) = ctx.store.read_pages(&ids, &mut buf) {
            let p = ids[0] as usize;
            ctx.die(&format!(
                "cannot fetch heap page {p} ({:#x}) from {}: {e}",
                ctx.page_addr(p),
                ctx.store.describe_page(ids[0])
            ));
        }
        let mut served = Vec::with_capacity(fetches.len());
        for (i, (c, f)) in fetches.into_iter().enumerate() {
            // Map write-protected after a read so that the first write is seen.
            let protect = !f.write && ctx.tracks_dirty(f.class);
            let state = if protect {
                PageState::Clean
            } else {
                PageState::Dirty
            };
            let joins = Joins::Admitted {
                arrival: Arrival::Refault,
                class: f.class,
                source: Source::Demand,
            };
            let src = &buf[i * PAGE_SIZE..(i + 1) * PAGE_SIZE];
            if let Installed::Again(c) = self.install(c, src, protect, state, joins) {
                drop(c);
                self.retry.push(f.ev);
                continue;
            }
            // Counted once the read is used: a retried fault reads again.
            ctx.counters.pages_read.fetch_add(1, Ordering::Relaxed);
            self.count(f.class, FaultKind::Remote);
            let ns = self.record_latency(f.started, true);
            self.p.attribution.remote(f.class, f.activity, f.page, ns);
            served.push(f);
        }
        self.p.budget.note_peak();
        // Wake the faulting threads before their windows are even queued.
        self.flush_wakes();
        if let Some(pf) = &self.p.prefetch {
            for f in served {
                pf.after_fault(f.tid, f.class, f.page, false, Some(&mut buf));
            }
        }
        self.fetch_buf = buf;
    }

    /// Claims (and charges) up to `fill_ahead` untouched pages after `p` for zero fill, as
    /// far as the budget has room without reclaiming (they are speculative).
    fn claim_ahead(&self, p: usize) -> Vec<Claim<'a>> {
        let ctx = &*self.p.ctx;
        let mut out = Vec::new();
        let ahead = ctx.config.fill_ahead.min(ZERO_RUN_PAGES - 1);
        let end = (p + 1 + ahead).min(ctx.span_end(p));
        for q in p + 1..end {
            let Some(mut c) = ctx.table.claim(q, PageState::Untouched) else {
                break;
            };
            if !self.p.budget.charge(&mut c, Charge::FillAhead) {
                break; // dropped: untouched again
            }
            out.push(c);
        }
        ctx.counters
            .zero_filled_ahead
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        out
    }

    /// Claims up to [`UNPROTECT_AHEAD`] pages of zeros or dead bytes (`CleanZero`) right after
    /// `p`, within its span, for a write fault to unprotect with it.
    fn unprotect_ahead(&self, p: usize) -> Vec<Claim<'a>> {
        let ctx = &*self.p.ctx;
        let end = (p + 1 + UNPROTECT_AHEAD).min(ctx.span_end(p));
        let out: Vec<Claim<'a>> = (p + 1..end)
            .map_while(|q| ctx.table.claim(q, PageState::CleanZero))
            .collect();
        ctx.counters
            .unprotected_ahead
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
        let ctx: &'a Ctx = &self.p.ctx;
        let Some(c) = ctx.table.claim_if(p, PageState::is_inactive) else {
            return self.retry.push(ev);
        };
        let from = c.from();
        let Some(slot) = self.p.reclaim.take_slot(p) else {
            ctx.die(&format!("inactive heap page {p} has no local copy"));
        };
        let clean = from == PageState::InactiveClean;
        let protect = clean && !write && ctx.tracks_dirty(class);
        let state = match (protect, ctx.table.is_stored(p)) {
            (false, _) => PageState::Dirty,
            (true, true) => PageState::Clean,
            (true, false) => PageState::CleanZero,
        };
        // A page in write-back keeps its slot until the write is done: the reclaimer frees it.
        let joins = Joins::Reactivated {
            slot,
            in_writeback: from == PageState::Writeback,
            class,
        };
        let bytes = self.p.reclaim.slot_bytes(slot, &c);
        if let Installed::Again(c) = self.install(c, bytes, protect, state, joins) {
            self.p.reclaim.restore_slot(p, slot);
            drop(c);
            return self.retry.push(ev);
        }
        self.count(class, FaultKind::Reactivate);
        let ns = self.record_latency(started, false);
        self.p.reclaim.sizer().costs.local_service(ns);
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
            ..
        } = f;
        let ctx: &'a Ctx = &self.p.ctx;
        let parts: &'a Parts = self.p;
        let Some(pf) = parts.prefetch.as_deref() else {
            ctx.die(&format!(
                "heap page {p} is a prefetch marker without prefetching"
            ));
        };
        let Some(c) = ctx.table.claim(p, PageState::Cached) else {
            return self.retry.push(ev);
        };
        let Some(marker) = pf.take_marker(p) else {
            ctx.die(&format!("prefetch marker for heap page {p} is missing"));
        };
        let protect = !write && ctx.tracks_dirty(class);
        let state = if protect {
            PageState::Clean
        } else {
            PageState::Dirty
        };
        let joins = Joins::Admitted {
            arrival: Arrival::Fault,
            class,
            source: Source::Demand,
        };
        if let Installed::Again(c) = self.install(c, &marker.data, protect, state, joins) {
            pf.put_back_marker(p, marker);
            drop(c);
            return self.retry.push(ev);
        }
        pf.credit_hit(&marker, p);
        self.count(class, FaultKind::Hit);
        self.record_latency(started, false);
        self.flush_wakes();
        pf.after_fault(tid, class, p, true, None);
    }

    fn write_fault(&mut self, f: Fault) {
        let Fault {
            ev, page: p, class, ..
        } = f;
        let ctx = &*self.p.ctx;
        let s = ctx.table.get(p);
        match s {
            PageState::Clean | PageState::CleanZero | PageState::Dirty => {
                let Some(c) = ctx.table.claim(p, s) else {
                    return self.retry.push(ev);
                };
                // A write is a reference the lists see without unmapping the page; under
                // `memliner` a GC thread's write does not make a cold page hot. Told before the
                // unprotect wakes the writer, so that what it sees next counts this write.
                if s != PageState::Dirty && ctx.config.policy.references(class) {
                    self.p
                        .reclaim
                        .referenced(p, ctx.config.policy.promotes(class));
                }
                // A first write to a page of zeros or dead bytes (a freed region left mapped,
                // see `release`) is the JVM filling fresh space: the run of such pages after it
                // is unprotected with it, as a zero fill maps a run ahead.
                let ahead = if s == PageState::CleanZero {
                    self.unprotect_ahead(p)
                } else {
                    Vec::new()
                };
                let a = ctx.page_addr(p);
                let len = (1 + ahead.len()) * PAGE_SIZE;
                match ctx.uffd.write_protect(a, len, false, true) {
                    Ok(true) => {}
                    Ok(false) => {
                        drop(ahead);
                        drop(c);
                        return self.retry.push(ev);
                    }
                    Err(e) => ctx.die(&format!("cannot unprotect heap page {p} at {a:#x}: {e}")),
                }
                for q in ahead {
                    q.finish(PageState::Dirty);
                }
                c.finish(PageState::Dirty);
                if s != PageState::Dirty {
                    ctx.config.policy.note_written(class);
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
                self.wakes.push(p);
                self.count(class, FaultKind::Stale);
            }
        }
    }
}
