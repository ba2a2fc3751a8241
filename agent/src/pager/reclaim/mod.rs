//! Reclaim: keeping free budget in reserve, off the fault path. The reclaimer owns the
//! replacement lists (`lists`: which pages to sample and evict), the slots that hold sampled
//! pages' bytes (`slots`) and the sampling window's size (`sizing`); it unmaps, writes back and
//! evicts. Faults tell it what they mapped (`admit`, `reactivated`, `referenced`).
//!
//! # Deactivation is race-free
//! 1. claim the victim (`Busy`); 2. write-protect it if dirty (writers now block in a WP
//!    fault); 3. copy it into a slot; 4. `MADV_DONTNEED` (one `process_madvise` for the batch:
//!    one TLB shootdown); 5. mark it inactive.
//!
//! A writer blocked in step 2 is woken when its WP fault is read after step 5 and re-faults as
//! MISSING, which maps the slot's bytes back. Readers during 2-4 read the unchanged page. A
//! page that was only read is mapped write-protected already, so step 2 costs nothing for it.
//!
//! # Eviction
//! An inactive page still untouched at the front of the inactive list is evicted: dropped if
//! the store's copy is current (or it is all zeros), else written back from its slot in a
//! pipelined batch (`Writeback`: a fault may still take it back meanwhile, and the slot is
//! freed once the write is done).
//!
//! # Watermarks
//! The reclaimer thread keeps `budget - charged` between the budget's low and high
//! watermarks: a charge that leaves fewer than `low` free wakes it, and it works until `high`
//! are free. A fault that finds the budget full reclaims itself ("direct reclaim", counted
//! like the kernel's allocstall).

pub(super) mod lists;
mod pressure;
mod sizing;
mod slots;

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use swap_backend::PAGE_SIZE;

use self::lists::{Admit, Lists, Refault, Try};
use self::pressure::Pressure;
use self::sizing::Sizer;
use self::slots::Slots;
use super::bits::AtomicBits;
use super::config::{Replacement, Window};
use super::context::Ctx;
use super::os;
use super::page_table::budget::Budget;
use super::page_table::{Claim, PageState};
use super::phases::Phases;
use crate::policy::Admission;

pub use self::lists::{Decisions, List, DISTANCE_BUCKETS};

/// What one reclaim step achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Evicted {
    Pages(usize),
    /// Nothing evictable: every local page is in flight elsewhere.
    NoVictim,
    /// An unread event is changing the mm: read events first.
    Again,
}

/// Which inactive pages an eviction takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Victims {
    /// The oldest, written back when dirty.
    Any,
    /// Only pages dropped without a write-back (clean or all zeros).
    Droppable,
}

/// Reclaim counters, read for stats.
#[derive(Debug, Default)]
pub struct ReclaimCounters {
    /// Pages unmapped into slots to sample their use.
    pub deactivated: AtomicU64,
    /// Of those, pages a pipe held across their discard (`splice`), no write-protect.
    pub deactivated_in_pipe: AtomicU64,
    /// Clean pages chosen for deactivation while the sampling window was closed: evicted at
    /// once (the store's copy is current), no slot.
    pub dropped_unsampled: AtomicU64,
    /// Write-protect calls deactivations made (one TLB shootdown each), one per run of dirty
    /// victims not held in a pipe.
    pub deactivation_write_protects: AtomicU64,
    /// Inactive pages touched and mapped back: the local faults sampling costs.
    pub reactivated: AtomicU64,
    /// Of those, pages taken back while their write-back was in flight.
    pub reactivated_in_writeback: AtomicU64,
    /// Faults that found the budget full and reclaimed themselves.
    pub direct_reclaims: AtomicU64,
    /// Of those, and of prefetch workers' own reclaims: pages made room with by dropping an
    /// inactive page that needed no write-back, or (the window closed) a clean or zero page
    /// dropped when chosen (see [`Reclaimer::direct`]).
    pub direct_dropped: AtomicU64,
    /// Passes of the reclaimer thread.
    pub background_passes: AtomicU64,
    /// Pages the reclaimer thread evicted (the rest were evicted by direct reclaim).
    pub background_evicted: AtomicU64,
    /// Prefetched pages evicted without a use seen (no fault, no write) since they came.
    pub prefetched_evicted_unused: AtomicU64,
    /// Pages evicted with a card the collector had yet to read (not held, or held out).
    pub evicted_pending_card: AtomicU64,
    /// Changes to the lists (a page mapped, a first write) that a fault or prefetch left to
    /// the lists' next holder rather than wait for them.
    pub deferred_list_changes: AtomicU64,
}

/// Says whether the page at an address holds a card the collector has yet to read: G1's dirty
/// cards, which a refinement thread or the next pause will scan, reading the page.
pub type CardCheck = Box<dyn Fn(usize) -> bool + Send + Sync>;

/// The collector's pending cards as the reclaimer sees them.
pub(super) struct Cards {
    pending: CardCheck,
    /// Pages with pending cards are held (`Try::Hold`); otherwise only counted.
    hold: bool,
}

impl Cards {
    fn pending(&self, addr: usize) -> bool {
        (self.pending)(addr)
    }
}

/// List lengths at one moment, for the timeline.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ListSample {
    /// Milliseconds since the pager started.
    pub ms: f64,
    pub cold: usize,
    pub probation: usize,
    pub active: usize,
    pub inactive: usize,
    pub writeback: usize,
    /// Charged pages not on a list (prefetch markers, pages in flight).
    pub other: usize,
}

/// How often the reclaimer refreshes the lists' lengths for `/metrics`.
const LATEST_EVERY: Duration = Duration::from_millis(250);

/// A bounded timeline of list lengths: when full, every other sample goes and the interval
/// doubles, so a run of any length keeps at most `MAX` samples evenly spread.
#[derive(Debug)]
struct Timeline {
    samples: Vec<ListSample>,
    every: Duration,
    last: Option<Instant>,
}

impl Timeline {
    const MAX: usize = 256;
}

pub(super) struct Reclaimer {
    ctx: Arc<Ctx>,
    budget: Arc<Budget>,
    phases: Arc<Phases>,
    /// Taken through [`Reclaimer::lists`], which makes the changes deferred meanwhile first.
    lists: Mutex<Lists>,
    /// Changes the fault path made while the lists were busy (see `change`), in their order.
    deferred: ArrayQueue<Deferred>,
    slots: Slots,
    sizer: Sizer,
    pressure: Pressure,
    replacement: Replacement,
    /// A write-back of the page is in flight (the page itself may have been taken back).
    writing: AtomicBits,
    /// Prefetched and no use seen since.
    prefetched: AtomicBits,
    /// Adopted at registration and not deactivated since (after that the pager installs it):
    /// the kernel may map it shared (the zero page after a read), so a pipe must not hold it
    /// (`splice`). Set and cleared off the fault path.
    adopted: AtomicBits,
    /// Pages being written back (out of the lists, still charged).
    writeback: AtomicUsize,
    /// The count of deactivations (for the sizer's ages; each slot keeps the number of the
    /// deactivation that filled it).
    deactivations: AtomicU32,
    pub counters: ReclaimCounters,
    /// The collector's pending cards, once the agent can read them.
    cards: std::sync::OnceLock<Cards>,
    timeline: Mutex<Timeline>,
    /// The lists as the reclaimer last looked (at most [`LATEST_EVERY`] ago while it runs):
    /// what a scrape of `/metrics` reads, never the lists' own lock, which faults take.
    latest: Mutex<(Option<Instant>, ListSample)>,
    /// Whether the reclaimer is parked with its reserve full (see `settle`).
    idle: Mutex<bool>,
    idle_changed: Condvar,
}

/// A change to the lists left to their next holder.
#[derive(Clone, Copy, Debug)]
enum Deferred {
    /// Page `.0` was mapped (`admit`): how, and whether it was read back.
    Admit(usize, Admit, bool),
    /// Mapped page `.0` was written for the first time (`referenced`): whether the touch
    /// promotes a cold page.
    Referenced(usize, bool),
}

/// Changes that wait for the lists at most; past them a fault waits for the lock. A few
/// batches' worth: the lock is held for a batch at a time.
const DEFERRED_CHANGES: usize = 4096;

/// How a page that just became mapped came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Arrival {
    /// Fetched from the store for a fault: its shadow decides.
    Refault,
    /// Zero-filled for a fault, a prefetch marker's page, a dead page reused.
    Fault,
    /// Prefetched: probation, and counted if evicted unused.
    Prefetched,
    /// Zero-filled ahead of a write.
    Speculative,
    /// Touched before registration (adopted as it is).
    Adopted,
}

impl Reclaimer {
    pub fn new(
        ctx: Arc<Ctx>,
        budget: Arc<Budget>,
        phases: Arc<Phases>,
    ) -> std::io::Result<Reclaimer> {
        let config = &ctx.config;
        let (npages, pages) = (ctx.npages, budget.pages());
        let batch = config.evict_batch.max(1);
        let sampling = config.replacement == Replacement::Lru && budget.pages_can_run_short();
        // No window at first: the sizer opens one when sampling is seen to pay.
        let (min_target, max_target) = match (sampling, config.window) {
            (false, _) => (0, 0),
            (true, Window::Adaptive) => (0, pages / 2),
            (true, Window::Fixed(n)) => (n.min(pages / 2), n.min(pages / 2)),
        };
        Ok(Reclaimer {
            lists: Mutex::new(Lists::new(npages, pages)),
            deferred: ArrayQueue::new(DEFERRED_CHANGES),
            // Room for the largest list plus a batch in flight.
            slots: Slots::new(max_target + 4 * batch, npages, config.hold_in_pipe)?,
            sizer: Sizer::new(pages, batch, min_target, max_target),
            pressure: Pressure::new((pages / 16).max(batch)),
            replacement: config.replacement,
            writing: AtomicBits::new(npages),
            prefetched: AtomicBits::new(npages),
            adopted: AtomicBits::new(npages),
            writeback: AtomicUsize::new(0),
            deactivations: AtomicU32::new(0),
            counters: ReclaimCounters::default(),
            cards: Default::default(),
            timeline: Mutex::new(Timeline {
                samples: Vec::new(),
                every: Duration::from_millis(50),
                last: None,
            }),
            latest: Mutex::new((None, ListSample::default())),
            idle: Mutex::new(false),
            idle_changed: Condvar::new(),
            ctx,
            budget,
            phases,
        })
    }

    /// A heap range could not be kept from forked children (`error`): deactivations
    /// write-protect and copy from now on (`splice`).
    pub fn no_pipes(&self, error: &std::io::Error) {
        if self.slots.stop_holding() {
            crate::logging::log!(
                crate::options::LogLevel::Warn,
                "cannot keep the heap from forked children ({error}): evicting pages the slower \
                 way (a write-protect per run)"
            );
        }
    }

    /// Whether references can be sampled at all (a window may open).
    pub fn sampling(&self) -> bool {
        self.sizer.max() > 0
    }

    pub fn replacement(&self) -> Replacement {
        self.replacement
    }

    pub fn sizer(&self) -> &Sizer {
        &self.sizer
    }

    /// The chance that a page evicted now comes back (see `pressure`).
    pub fn pressure(&self) -> f64 {
        self.pressure.ratio()
    }

    /// Pages waiting inactive (unmapped, bytes in slots), write-backs included.
    pub fn inactive_pages(&self) -> usize {
        self.lists().len(List::Inactive) + self.writeback.load(Ordering::Relaxed)
    }

    pub fn inactive_target(&self) -> usize {
        self.sizer.target()
    }

    /// The lengths of the lists now.
    pub fn sample(&self) -> ListSample {
        let l = self.lists();
        let writeback = self.writeback.load(Ordering::Relaxed);
        let on_lists: usize = [
            List::Cold,
            List::Probation,
            List::Active,
            List::Inactive,
            List::Paused,
        ]
        .iter()
        .map(|&x| l.len(x))
        .sum();
        ListSample {
            ms: self.ctx.epoch.elapsed().as_secs_f64() * 1e3,
            cold: l.len(List::Cold),
            probation: l.len(List::Probation),
            // A pause's held pages came from the active list and probation, mostly active.
            active: l.len(List::Active) + l.len(List::Paused),
            inactive: l.len(List::Inactive),
            writeback,
            other: self.budget.charged().saturating_sub(on_lists + writeback),
        }
    }

    /// The decisions made so far.
    pub fn decisions(&self) -> Decisions {
        self.lists().decisions
    }

    /// The list lengths over the run, and a last sample now.
    pub fn timeline(&self) -> Vec<ListSample> {
        let mut v = self.timeline.lock().unwrap().samples.clone();
        v.push(self.sample());
        v
    }

    /// The lists' lengths as the reclaimer last sampled them (see `latest`).
    pub fn latest_sample(&self) -> ListSample {
        self.latest.lock().unwrap().1
    }

    fn note_timeline(&self) {
        let due = self
            .latest
            .lock()
            .unwrap()
            .0
            .is_none_or(|l| l.elapsed() >= LATEST_EVERY);
        if due {
            let s = self.sample();
            *self.latest.lock().unwrap() = (Some(Instant::now()), s);
        }
        let mut t = self.timeline.lock().unwrap();
        if t.last.is_some_and(|l| l.elapsed() < t.every) {
            return;
        }
        t.last = Some(Instant::now());
        drop(t);
        let s = self.sample();
        let mut t = self.timeline.lock().unwrap();
        t.samples.push(s);
        if t.samples.len() >= Timeline::MAX {
            let kept: Vec<ListSample> = t.samples.iter().step_by(2).copied().collect();
            t.samples = kept;
            t.every *= 2;
        }
    }

    /// Queues page `p`, just mapped by its claim holder, where the lists and the policy's
    /// `admission` say (held and cold-after-pause pages are cold once the pause under way
    /// ends).
    pub fn admit(&self, p: usize, arrival: Arrival, admission: Admission) {
        let how = match (admission, arrival) {
            (Admission::Cold, _) => Admit::Cold,
            (Admission::ColdUnlessReread, _) => Admit::ColdUnlessReread,
            (Admission::HeldForPause, _) => Admit::Held,
            (_, Arrival::Refault | Arrival::Fault) => Admit::Normal,
            (_, Arrival::Prefetched | Arrival::Speculative | Arrival::Adopted) => {
                Admit::Speculative
            }
        };
        let pause = matches!(
            admission,
            Admission::ColdAfterPause | Admission::HeldForPause
        );
        // Without working-set detection (FIFO) every page starts on probation.
        let refault = arrival == Arrival::Refault && self.replacement == Replacement::Lru;
        self.prefetched.put(p, arrival == Arrival::Prefetched);
        if arrival == Arrival::Adopted {
            // Cleared when the page is deactivated (the pager installs it from then on): no
            // work on the fault path.
            self.adopted.set(p, true, Ordering::Relaxed);
        }
        self.change(Deferred::Admit(p, how, refault));
        if pause && self.phases.pause_page(p) {
            // A pause that never ends (no JVMTI events, a runaway full GC): do not hold more
            // than a budget's worth of pages hot for it.
            self.demote_pause_pages(true);
        }
    }

    /// Makes a change the fault path (or a prefetch) asks for. The fault path never waits for
    /// the lists: the reclaimer holds them for a batch at a time, and with few cores it may be
    /// preempted holding them (milliseconds). A busy lock leaves the change to its next
    /// holder; until then a page just mapped is on no list, which only keeps it from being
    /// chosen for eviction, and a first write is not yet seen as a reference.
    fn change(&self, d: Deferred) {
        match self.lists.try_lock() {
            Ok(mut l) => {
                self.apply_deferred(&mut l);
                self.apply(&mut l, d);
            }
            Err(TryLockError::WouldBlock) => match self.deferred.push(d) {
                Ok(()) => {
                    self.counters
                        .deferred_list_changes
                        .fetch_add(1, Ordering::Relaxed);
                }
                Err(d) => self.apply(&mut self.lists(), d),
            },
            Err(TryLockError::Poisoned(e)) => panic!("the replacement lists: {e}"),
        }
    }

    /// The lists, with the changes deferred meanwhile made first, in their order: whatever
    /// the holder does sees every page mapped and written before it took the lock.
    fn lists(&self) -> MutexGuard<'_, Lists> {
        let mut l = self.lists.lock().unwrap();
        self.apply_deferred(&mut l);
        l
    }

    /// The lists, held (see `Pager::hold_lists`).
    pub fn hold_lists(&self) -> MutexGuard<'_, Lists> {
        self.lists()
    }

    fn apply_deferred(&self, l: &mut Lists) {
        while let Some(d) = self.deferred.pop() {
            self.apply(l, d);
        }
    }

    fn apply(&self, l: &mut Lists, d: Deferred) {
        match d {
            Deferred::Admit(p, how, refault) => {
                if let Refault::Workingset { distance } | Refault::Distant { distance } =
                    l.admit(p, how, refault)
                {
                    self.sizer.refault(distance);
                    self.pressure.refaulted();
                }
            }
            Deferred::Referenced(p, promote) => {
                let was_cold = l.list_of(p) == List::Cold;
                if promote || !was_cold {
                    l.referenced(p);
                }
                if was_cold && promote {
                    self.ctx.counters.promoted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Milliseconds since the pager started, for holds.
    fn now_ms(&self) -> u32 {
        self.ctx.epoch.elapsed().as_millis() as u32
    }

    /// Whether page `p` is to be held: it holds a card the collector has yet to read, and
    /// holding is on.
    fn holds(&self, p: usize) -> bool {
        self.cards
            .get()
            .is_some_and(|c| c.hold && c.pending(self.ctx.page_addr(p)))
    }

    /// How to tell pages whose cards the collector has yet to read; `hold`: keep them for up to
    /// [`lists::MAX_HOLD_MS`] longer on their lists (else they are only counted).
    /// The first call wins.
    pub fn set_cards(&self, pending: CardCheck, hold: bool) {
        let _ = self.cards.set(Cards { pending, hold });
    }

    /// A pause is about to read mapped pages `pages` (the cards it will scan): a reference
    /// each, so that the pause's own faults push out other pages than these. Pages no longer
    /// on a mapped list are left alone (an inactive one comes back from its slot).
    pub fn will_read(&self, pages: &[usize]) {
        let mut l = self.lists();
        for &p in pages {
            if matches!(l.list_of(p), List::Probation | List::Active | List::Cold) {
                l.referenced(p);
            }
        }
    }

    /// The pause under way will read `pages` (its young regions' when it starts, `starts`;
    /// later, the collection set a patched G1 names): the mapped ones are held until it ends
    /// (see [`Lists::hold_for_pause`]) and the inactive ones go to the back of the inactive
    /// list. When a pause starts, the pages of those before it go back first, whether or not
    /// their ends were seen. Returns how many were held.
    pub fn hold_for_pause(&self, pages: impl Iterator<Item = usize>, starts: bool) -> usize {
        if starts {
            self.demote_pause_pages(false);
        }
        let mut l = self.lists();
        if starts {
            l.pause_ended();
        }
        let mut n = 0;
        for p in pages {
            match l.list_of(p) {
                List::Inactive => l.keep_until_read(p),
                _ => n += usize::from(l.hold_for_pause(p)),
            }
        }
        n
    }

    /// A refinement pass is about to read `pages` (the cards it has just cleaned, which
    /// `card_hold` no longer sees): the inactive ones, which `card_hold` kept at the front of
    /// the inactive list while their cards were dirty and which would leave next, go to its
    /// back. Mapped ones are left alone (unmapped, a page still has the inactive list to
    /// wait on), and remote ones too. The lock is taken only when one is inactive.
    pub fn will_refine(&self, pages: &[u32]) {
        let inactive: Vec<usize> = pages
            .iter()
            .map(|&p| p as usize)
            .filter(|&p| {
                matches!(
                    self.ctx.table.get(p),
                    PageState::InactiveClean | PageState::InactiveDirty
                )
            })
            .collect();
        if inactive.is_empty() {
            return;
        }
        let mut l = self.lists();
        for p in inactive {
            l.keep_until_read(p);
        }
    }

    /// Mapped page `p` was written for the first time since it was mapped write-protected
    /// (its claim holder calls): a reference the lists see without unmapping it. `promote`:
    /// the writer's touch counts (an application write of a cold page makes it hot; counted as
    /// promoted).
    pub fn referenced(&self, p: usize, promote: bool) {
        self.prefetched.put(p, false);
        self.change(Deferred::Referenced(p, promote));
    }

    /// The slot holding inactive page `p`'s bytes, taken by its claim holder. `None` means a
    /// bug: an inactive page always has one.
    pub fn take_slot(&self, p: usize) -> Option<u32> {
        self.slots.take(p)
    }

    /// The bytes in `slot`, held by the page `holder` claims (a reactivation maps them back).
    pub fn slot_bytes(&self, slot: u32, holder: &Claim<'_>) -> &[u8] {
        self.slots.bytes(slot, holder)
    }

    /// Gives a slot back to page `p` (a reactivation that has to be retried).
    pub fn restore_slot(&self, p: usize, slot: u32) {
        self.slots.set(p, slot);
    }

    /// Inactive page `p` was touched and is being mapped back from `slot` (its claim holder
    /// calls). `in_writeback`: its write-back is in flight (the write-back frees the slot).
    /// `activate`: the touch counts for the lists (the policy's say). Returns whether a cold
    /// page was promoted.
    pub fn reactivated(&self, p: usize, slot: u32, in_writeback: bool, activate: bool) -> bool {
        // Read before the slot can go back (here, or by the write-back in flight).
        let age = self
            .deactivations
            .load(Ordering::Relaxed)
            .wrapping_sub(self.slots.deactivation(slot));
        if in_writeback {
            self.counters
                .reactivated_in_writeback
                .fetch_add(1, Ordering::Relaxed);
        } else {
            self.slots.release(&[slot]);
        }
        self.sizer.reactivation(age as u64);
        self.counters.reactivated.fetch_add(1, Ordering::Relaxed);
        self.prefetched.put(p, false);
        let mut l = self.lists();
        if in_writeback {
            // Out of the lists since its eviction began: no longer counted as written back.
            self.writeback.fetch_sub(1, Ordering::Relaxed);
        }
        l.remove(p);
        l.reactivated(p, activate) && activate
    }

    /// Page `p` (claimed by the caller) is being dropped: its slot is freed and it leaves the
    /// lists without a shadow. `from` is the state it was claimed in: a page taken in
    /// write-back keeps its slot until the write is done (the write-back frees it, as for a
    /// page a fault takes back), and no longer counts as written back.
    pub fn forget(&self, p: usize, from: PageState) {
        if from == PageState::Writeback {
            self.slots.take(p);
            self.writeback.fetch_sub(1, Ordering::Relaxed);
        } else if from.is_inactive() {
            if let Some(s) = self.slots.take(p) {
                self.slots.release(&[s]);
            }
        }
        self.lists().forget(p);
    }

    /// A fault that found the budget full reclaims one page itself (counted). `false`: no room
    /// could be made now (an unread event, or every page in flight): the fault is retried.
    ///
    /// It first looks near the inactive front for a page it can drop: one whose bytes need no
    /// write-back (the store's copy is current, or all zeros). That costs no I/O and no TLB
    /// shootdown, where a write-back makes the fault wait on the store and a deactivation pays
    /// an IPI for every dirty page it write-protects (7-11 µs on this VM); the reclaimer
    /// thread (woken by the charge that failed) does those. Only when none is near the front
    /// does the fault reclaim as the reclaimer would.
    pub fn direct(&self, on_fault_path: bool) -> bool {
        if on_fault_path {
            self.counters
                .direct_reclaims
                .fetch_add(1, Ordering::Relaxed);
        }
        if let Evicted::Pages(1..) = self.evict(1, Victims::Droppable) {
            self.counters.direct_dropped.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        // While the window is closed the inactive list holds no clean page (they are dropped
        // when chosen, see `deactivate`): the room comes from that drop, if any.
        let mut dropped = 0;
        let made = matches!(self.make_room_dropping(1, &mut dropped), Evicted::Pages(_));
        if dropped > 0 {
            self.counters.direct_dropped.fetch_add(1, Ordering::Relaxed);
        }
        made
    }

    fn set_idle(&self, idle: bool) {
        let mut i = self.idle.lock().unwrap();
        if *i != idle {
            *i = idle;
            self.idle_changed.notify_all();
        }
    }

    /// Fills the reserve up to the high watermark and waits until the reclaimer has parked.
    pub fn settle(&self) {
        while self.make_room(self.budget.high) == Evicted::Again {
            std::thread::yield_now();
        }
        let mut idle = self.idle.lock().unwrap();
        while !(*idle && self.budget.free() >= self.budget.low) {
            self.budget.wake_reclaimer();
            idle = self.idle_changed.wait(idle).unwrap();
        }
    }

    /// Evicts until `want_free` pages of the budget are free.
    pub fn make_room(&self, want_free: usize) -> Evicted {
        self.make_room_dropping(want_free, &mut 0)
    }

    /// `make_room`, adding to `dropped` the pages its deactivations evicted at once (clean or
    /// all zeros: no slot, no write-back).
    fn make_room_dropping(&self, want_free: usize, dropped: &mut usize) -> Evicted {
        self.demote_pause_pages(false);
        let pages = self.budget.pages();
        let batch = self.ctx.config.evict_batch.max(1);
        let mut total = 0;
        loop {
            let over = (self.budget.charged() + want_free).saturating_sub(pages);
            if over == 0 {
                return Evicted::Pages(total);
            }
            // Keep the inactive list up to one batch above its target, so that a page
            // deactivated now waits a target's worth of evictions for its touch before it is
            // evicted. Refilled half a batch or more at a time: a deactivation costs a TLB
            // shootdown for its discard whatever its size (and one per run of dirty pages it
            // write-protects), and topping the list up page by page, as every direct reclaim
            // of one page did, cost one per page (graph at 25% of 256 MiB: 164k deactivations
            // of 5.8 pages on average; 19k of 47 refilled this way, shootdowns 0.77x, wall
            // 0.90x paired).
            let target = self.sizer.target();
            let waiting = || self.lists().len(List::Inactive);
            let have = waiting();
            let deficit = (target + batch).saturating_sub(have);
            let mut deactivated = 0;
            if deficit >= batch.div_ceil(2) {
                match self.deactivate(deficit.min(batch), dropped) {
                    Evicted::Pages(n) => deactivated = n,
                    Evicted::Again => return Evicted::Again,
                    Evicted::NoVictim => {}
                }
            }
            let excess = waiting().saturating_sub(target);
            let n = match (excess, deactivated) {
                (0, 0) => batch, // nothing more to deactivate: the oldest inactive go
                (0, _) => continue,
                (e, _) => e.min(batch).min(over.max(1)),
            };
            match self.evict(n, Victims::Any) {
                Evicted::Pages(n) => total += n,
                Evicted::Again => return Evicted::Again,
                Evicted::NoVictim if deactivated == 0 => {
                    // Everything charged is in flight elsewhere: the caller retries rather
                    // than spin here (counted).
                    self.ctx
                        .counters
                        .reclaim_found_all_in_flight
                        .fetch_add(1, Ordering::Relaxed);
                    return if total > 0 {
                        Evicted::Pages(total)
                    } else {
                        Evicted::NoVictim
                    };
                }
                Evicted::NoVictim => {}
            }
        }
    }

    /// The reclaimer thread: sleeps until the reserve runs low, then works until it is full.
    pub fn run(&self) {
        swap_backend::set_thread_lane(swap_backend::Lane::Reclaim);
        loop {
            if self.ctx.stop.load(Ordering::SeqCst) {
                return;
            }
            self.note_timeline();
            if self.budget.free() < self.budget.low {
                self.set_idle(false);
                self.counters
                    .background_passes
                    .fetch_add(1, Ordering::Relaxed);
                let before = self.ctx.counters.evicted();
                let outcome = self.make_room(self.budget.high);
                self.counters
                    .background_evicted
                    .fetch_add(self.ctx.counters.evicted() - before, Ordering::Relaxed);
                if outcome == Evicted::Again || outcome == Evicted::NoVictim {
                    // An unread event blocks the mm (the handler reads it), or everything is
                    // in flight: try again shortly rather than spin.
                    std::thread::park_timeout(Duration::from_millis(1));
                }
            } else {
                self.set_idle(true);
                // Pauses end without a fault to notice: look at them now and then.
                std::thread::park_timeout(Duration::from_millis(50));
                self.demote_pause_pages(false);
            }
        }
    }

    /// Makes the pages of finished pauses cold (all held pages with `force`).
    pub fn demote_pause_pages(&self, force: bool) {
        let Some(pages) = self.phases.take_ended(force) else {
            return;
        };
        let mut l = self.lists();
        l.pause_ended();
        let n = pages.iter().filter(|&&p| l.make_cold(p as usize)).count();
        drop(l);
        self.ctx
            .counters
            .demoted_after_pause
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Unmaps up to `want` mapped pages into slots, as the lists choose (adding to `dropped`
    /// those it evicts at once instead).
    fn deactivate(&self, want: usize, dropped_now: &mut usize) -> Evicted {
        let table = &self.ctx.table;
        let mut claims: Vec<Option<Claim<'_>>> = Vec::with_capacity(want);
        let now_ms = self.now_ms();
        let taken = {
            let mut l = self.lists();
            let slots_free = want; // slots are checked below; the lists' order decides first
            l.take_for_deactivation(slots_free, now_ms, |p, may_hold| {
                if may_hold && self.holds(p) {
                    return Try::Hold;
                }
                match table.claim_if(p, PageState::is_mapped) {
                    Some(c) => {
                        claims.push(Some(c));
                        Try::Taken
                    }
                    None if table.get(p) == PageState::Busy => Try::Busy,
                    None => Try::Stale,
                }
            })
        };
        let victims: Vec<(Claim<'_>, bool)> = taken
            .iter()
            .zip(claims.iter_mut())
            .map(|(&(_, cold), c)| (c.take().unwrap(), cold))
            .collect();
        // Zeros or dead bytes (`CleanZero`, write-protected: a writer waits for the claim)
        // need no slot: discarded, the next touch zero-fills, which is all a slot would give.
        let (zeros, mut victims): (Vec<_>, Vec<_>) = victims
            .into_iter()
            .partition(|(c, _)| c.from() == PageState::CleanZero);
        let mut dropped = self.drop_zeros(zeros);
        // Without a sampling window (its target 0: in process a page sampled and touched
        // again costs about the remote read it saves), a clean page would only wait a batch
        // of evictions in its slot for a touch that rarely comes (0.4-0.6% of deactivations
        // on kv and graph at 25% of 1 GiB), its bytes pinned and copied out of a pipe though
        // the store has them: dropped at once instead, as its eviction would.
        if self.sizer.target() == 0 {
            let clean;
            (clean, victims) = victims
                .into_iter()
                .partition(|(c, _)| c.from() == PageState::Clean);
            dropped += self.drop_clean(clean);
        }
        *dropped_now += dropped;
        let only_dropped = || match dropped {
            0 => Evicted::NoVictim,
            n => Evicted::Pages(n),
        };
        if victims.is_empty() {
            return only_dropped();
        }
        let mut slots = self.slots.alloc(victims.len());
        if slots.len() < victims.len() {
            // Out of slots (a list this long is already being written back): the rest stay.
            self.give_back(victims.drain(slots.len()..));
        }
        if victims.is_empty() {
            self.slots.release(&slots);
            return only_dropped();
        }
        let started = Instant::now();
        // The pages a pipe may hold first (see `splice`): all but adopted ones.
        let (mut victims, adopted): (Vec<_>, Vec<_>) = victims
            .into_iter()
            .partition(|v| !self.adopted.get(v.0.page(), Ordering::Relaxed));
        let may_hold = victims.len();
        victims.extend(adopted);
        let srcs: Vec<usize> = victims
            .iter()
            .map(|v| self.ctx.page_addr(v.0.page()))
            .collect();
        // Held from here on: a write lands in the page the pipe holds until the discard
        // below unmaps it; after that it faults and waits for the claim.
        let held = self.slots.hold(&srcs[..may_hold]);
        let k = held.as_ref().map_or(0, |h| h.pages());
        // The others (none where pipes work, but adopted pages): write-protect the dirty
        // ones (writers block from here on), in page order so that runs coalesce. Clean
        // ones are mapped write-protected already.
        let mut dirty: Vec<usize> = victims[k..]
            .iter()
            .filter(|v| v.0.from() == PageState::Dirty)
            .map(|v| v.0.page())
            .collect();
        dirty.sort_unstable();
        for (s, l) in os::runs(self.ctx.base, &dirty) {
            self.counters
                .deactivation_write_protects
                .fetch_add(1, Ordering::Relaxed);
            match self.ctx.uffd.write_protect(s, l, true, false) {
                Ok(true) => {}
                Ok(false) => {
                    // An unread event is changing the mm: give the pages back (a page left
                    // protected but Dirty is unprotected by its next write fault).
                    drop(held);
                    self.slots.release(&slots);
                    self.give_back(victims);
                    return Evicted::Again;
                }
                Err(e) => self
                    .ctx
                    .die(&format!("cannot write-protect heap pages at {s:#x}: {e}")),
            }
        }
        let holders: Vec<&Claim<'_>> = victims[k..].iter().map(|v| &v.0).collect();
        // The slots were allocated above for this call; every source is a claimed mapped page
        // (Busy), so reading it cannot fault into our handler.
        let mut copied = vec![true; k];
        copied.extend(self.slots.fill_from(&srcs[k..], &slots[k..], &holders));
        let mut pages: Vec<usize> = victims.iter().map(|v| v.0.page()).collect();
        pages.sort_unstable();
        if let Err(e) = self.ctx.discard(&os::runs(self.ctx.base, &pages)) {
            self.ctx.die(&format!("cannot discard heap pages: {e}"));
        }
        // Unmapped now: whatever maps them next is a page the pager installs itself.
        for v in &victims[may_hold..] {
            self.adopted.set(v.0.page(), false, Ordering::Relaxed);
        }
        if let Some(h) = held {
            if let Err(e) = self.slots.fill_held(h, &slots[..k]) {
                // Their bytes are nowhere else now.
                self.ctx.die(&format!(
                    "cannot copy {k} discarded heap pages out of their pipe: {e}"
                ));
            }
            self.counters
                .deactivated_in_pipe
                .fetch_add(k as u64, Ordering::Relaxed);
        }
        let mut n = 0;
        let mut unused = Vec::new();
        let mut l = self.lists();
        for (((c, cold), slot), ok) in victims.into_iter().zip(slots.drain(..)).zip(copied) {
            let p = c.page();
            if !ok {
                // The JVM unmapped the page under us (heap shrink); its UNMAP event resets
                // it. Nothing to keep.
                unused.push(slot);
                l.forget(p);
                c.finish(PageState::Untouched);
                continue;
            }
            let seq = self.deactivations.fetch_add(1, Ordering::Relaxed);
            self.slots.fill(p, slot, seq);
            l.deactivated(p, cold);
            let to = if c.from() == PageState::Dirty {
                PageState::InactiveDirty
            } else {
                PageState::InactiveClean
            };
            c.finish(to);
            n += 1;
        }
        drop(l);
        self.slots.release(&unused);
        self.counters
            .deactivated
            .fetch_add(n as u64, Ordering::Relaxed);
        if n > 0 {
            self.sizer
                .costs
                .deactivate(started.elapsed().as_nanos() as u64 / n as u64);
        }
        Evicted::Pages(n + dropped)
    }

    /// What every eviction tells the sizer, the pressure gauge and the counters: `pages` left,
    /// `cold` of them cold, and which of them were prefetched and never used.
    fn note_evicted(&self, pages: impl Iterator<Item = usize>, cold: usize) {
        let mut n = 0;
        let mut unused = 0;
        for p in pages {
            n += 1;
            unused += usize::from(self.prefetched.put(p, false));
        }
        self.ctx
            .counters
            .evicted_cold
            .fetch_add(cold as u64, Ordering::Relaxed);
        self.sizer.evicted(n);
        self.pressure.evicted(n);
        self.counters
            .prefetched_evicted_unused
            .fetch_add(unused as u64, Ordering::Relaxed);
    }

    /// Discards claimed mapped pages (one call for their runs); returns their numbers, sorted.
    fn discard_claimed(&self, claimed: &[(Claim<'_>, bool)]) -> Vec<usize> {
        let mut pages: Vec<usize> = claimed.iter().map(|(c, _)| c.page()).collect();
        pages.sort_unstable();
        if let Err(e) = self.ctx.discard(&os::runs(self.ctx.base, &pages)) {
            self.ctx.die(&format!("cannot discard heap pages: {e}"));
        }
        pages
    }

    /// Evicts claimed `CleanZero` pages at once: discarded and left untouched, no slot, no
    /// write-back. Returns how many.
    fn drop_zeros(&self, zeros: Vec<(Claim<'_>, bool)>) -> usize {
        if zeros.is_empty() {
            return 0;
        }
        let pages = self.discard_claimed(&zeros);
        let mut l = self.lists();
        for &p in &pages {
            l.forget(p);
        }
        drop(l);
        let n = zeros.len();
        for (c, _) in zeros {
            c.finish(PageState::Untouched);
        }
        self.ctx
            .counters
            .evicted_zero
            .fetch_add(n as u64, Ordering::Relaxed);
        n
    }

    /// Evicts claimed `Clean` pages at once (the store's copy is current): discarded, no slot,
    /// no write-back, a shadow left as by `evict`. Returns how many.
    fn drop_clean(&self, clean: Vec<(Claim<'_>, bool)>) -> usize {
        if clean.is_empty() {
            return 0;
        }
        let pages = self.discard_claimed(&clean);
        let n = clean.len();
        let mut l = self.lists();
        for &p in &pages {
            l.evicted(p);
        }
        drop(l);
        self.note_evicted(pages.iter().copied(), clean.iter().filter(|v| v.1).count());
        self.ctx
            .counters
            .evicted_clean
            .fetch_add(n as u64, Ordering::Relaxed);
        self.counters
            .dropped_unsampled
            .fetch_add(n as u64, Ordering::Relaxed);
        for (c, _) in clean {
            debug_assert!(self.ctx.table.is_stored(c.page()));
            c.finish(PageState::Remote);
        }
        n
    }

    /// Gives deactivation victims back to the front of the lists they came from (their claims
    /// restore their states).
    fn give_back<'t>(&self, victims: impl IntoIterator<Item = (Claim<'t>, bool)>) {
        let mut l = self.lists();
        for (c, cold) in victims {
            l.give_back(c.page(), cold);
            drop(c);
        }
    }

    /// Evicts up to `want` pages of the kind asked for from the front of the inactive list.
    fn evict(&self, want: usize, victims: Victims) -> Evicted {
        let table = &self.ctx.table;
        let mut clean = Vec::new();
        let mut dirty = Vec::new();
        let now_ms = self.now_ms();
        let cold = {
            let mut l = self.lists();
            let taken = l.take_for_eviction(want, now_ms, |p, may_hold| match table.get(p) {
                // Taken back during a write-back and deactivated again: its new bytes must
                // not reach the store before the old ones (they would be overwritten). It
                // waits for the first write.
                PageState::InactiveDirty if self.writing.get(p, Ordering::SeqCst) => Try::Busy,
                PageState::Busy => Try::Busy,
                PageState::InactiveDirty if victims == Victims::Droppable => Try::Pass,
                PageState::InactiveClean | PageState::InactiveDirty => {
                    let card = self
                        .cards
                        .get()
                        .filter(|c| c.pending(self.ctx.page_addr(p)));
                    if may_hold && card.is_some_and(|c| c.hold) {
                        return Try::Hold;
                    }
                    match table.claim_if(p, |s| {
                        matches!(s, PageState::InactiveClean | PageState::InactiveDirty)
                    }) {
                        Some(c) => {
                            if card.is_some() {
                                self.counters
                                    .evicted_pending_card
                                    .fetch_add(1, Ordering::Relaxed);
                            }
                            if c.from() == PageState::InactiveClean {
                                clean.push(c);
                            } else {
                                dirty.push(c);
                            }
                            Try::Taken
                        }
                        None => Try::Busy,
                    }
                }
                _ => Try::Stale,
            });
            taken.iter().filter(|(_, cold)| *cold).count()
        };
        if clean.is_empty() && dirty.is_empty() {
            return Evicted::NoVictim;
        }
        let n = clean.len() + dirty.len();
        self.note_evicted(clean.iter().chain(&dirty).map(|c| c.page()), cold);
        // Clean: the store's copy is current (or the page is all zeros and never stored).
        let mut freed = Vec::with_capacity(clean.len());
        for c in clean {
            let p = c.page();
            if let Some(s) = self.slots.take(p) {
                freed.push(s);
            }
            if table.is_stored(p) {
                self.ctx
                    .counters
                    .evicted_clean
                    .fetch_add(1, Ordering::Relaxed);
                c.finish(PageState::Remote);
            } else {
                self.ctx
                    .counters
                    .evicted_zero
                    .fetch_add(1, Ordering::Relaxed);
                c.finish(PageState::Untouched);
            }
        }
        self.slots.release(&freed);
        if !dirty.is_empty() {
            self.write_back(dirty);
        }
        Evicted::Pages(n)
    }

    /// Writes inactive dirty pages back from their slots. While the write is in flight the
    /// pages are `Writeback`: a fault may take one back (the slot's bytes do not change), and
    /// the slot is freed here once nobody reads it.
    fn write_back(&self, claims: Vec<Claim<'_>>) {
        let table = &self.ctx.table;
        let counters = &self.ctx.counters;
        let mut batch: Vec<(usize, u32)> = Vec::with_capacity(claims.len());
        let mut write_ids = Vec::with_capacity(claims.len());
        let mut write_buf = Vec::with_capacity(claims.len() * PAGE_SIZE);
        let mut to_free = Vec::new();
        let mut zero_slots = Vec::new();
        for c in claims {
            let p = c.page();
            let slot = self
                .slots
                .of(p)
                .unwrap_or_else(|| self.ctx.die(&format!("inactive heap page {p} has no slot")));
            // The slot belongs to page p, which this call has claimed.
            let bytes = self.slots.bytes(slot, &c);
            if bytes.iter().all(|b| *b == 0) {
                self.slots.take(p);
                zero_slots.push(slot);
                if table.set_stored(p, false) {
                    to_free.push(p as u64);
                }
                counters.evicted_zero.fetch_add(1, Ordering::Relaxed);
                c.finish(PageState::Untouched);
                continue;
            }
            write_ids.push(p as u64);
            write_buf.extend_from_slice(bytes);
            batch.push((p, slot));
            self.writing.set(p, true, Ordering::SeqCst);
            c.finish(PageState::Writeback);
        }
        self.slots.release(&zero_slots);
        if !to_free.is_empty() && self.ctx.store.free_pages(&to_free).is_ok() {
            // Losing a free only wastes remote space; never fatal.
            counters
                .pages_freed_remote
                .fetch_add(to_free.len() as u64, Ordering::Relaxed);
        }
        if batch.is_empty() {
            return;
        }
        self.writeback.fetch_add(batch.len(), Ordering::Relaxed);
        if let Err(e) = self.ctx.store.write_pages(&write_ids, &write_buf) {
            self.ctx.die(&format!(
                "cannot write back {} heap pages starting at page {} ({:#x}) to {}: {e}",
                write_ids.len(),
                write_ids[0],
                self.ctx.page_addr(write_ids[0] as usize),
                self.ctx.store.describe_page(write_ids[0])
            ));
        }
        counters
            .pages_written
            .fetch_add(write_ids.len() as u64, Ordering::Relaxed);
        let mut done = Vec::with_capacity(batch.len());
        let mut evicted = 0;
        for (p, slot) in batch {
            self.writing.set(p, false, Ordering::SeqCst);
            loop {
                match table.claim(p, PageState::Writeback) {
                    Some(c) if self.slots.of(p) == Some(slot) => {
                        // Only a page still ours is marked stored: one dropped meanwhile
                        // (its region freed) must zero-fill, never come back as these bytes.
                        table.set_stored(p, true);
                        self.slots.take(p);
                        self.writeback.fetch_sub(1, Ordering::Relaxed);
                        c.finish(PageState::Remote);
                        evicted += 1;
                        break;
                    }
                    // Taken back by a fault and written out again since: not ours.
                    Some(c) => break drop(c),
                    // A fault holds the page and may be reading our slot: wait for it.
                    None if table.get(p) == PageState::Busy => std::thread::yield_now(),
                    // Taken back and mapped, dropped as dead or its range unmapped: the
                    // slot is ours. A page taken back is dirty: its next eviction writes it.
                    None => break,
                }
            }
            done.push(slot);
        }
        self.slots.release(&done);
        counters
            .evicted_dirty
            .fetch_add(evicted as u64, Ordering::Relaxed);
    }
}
