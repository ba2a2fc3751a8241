//! Reclaim: keeping free budget in reserve, off the fault path, with reference bits the pager
//! makes itself.
//!
//! # Two lists and a reserve
//! Mapped pages wait in the *active* FIFO (and, under `memliner`, GC-read pages in the *cold*
//! FIFO). User space cannot see a touch of a mapped page, so the reclaimer makes the
//! reference bit the hardware keeps to itself: it *deactivates* the oldest active pages —
//! write-protects the dirty ones, copies each into a slot of our own memory, discards it from
//! the heap — and queues them *inactive*. An inactive page still counts against the budget. A
//! touch is a cheap local fault (`FaultKind::Reactivate`): the handler maps the slot's bytes
//! back and the page is active again, referenced. Only a page still untouched when it reaches
//! the front of the inactive list is evicted: dropped if the store's copy is current, else
//! written back from its slot in a pipelined batch (`Writeback`; a fault may still take it
//! back meanwhile). This is how BSD on the VAX simulated the missing reference bit, and how
//! Linux's inactive list works with minor faults.
//!
//! Cold pages skip the wait: deactivated to the front of the inactive list, they are evicted
//! next unless the application touches them first (a touch promotes them).
//!
//! # Watermarks
//! The reclaimer thread keeps `budget - charged` between [`Reclaim::low`] and
//! [`Reclaim::high`] free pages: a fault that leaves fewer than `low` free wakes it, and it
//! works until `high` are free. A fault that finds the budget full reclaims itself ("direct
//! reclaim", counted like the kernel's allocstall).
//!
//! # How big the inactive list is
//! Its target starts at 1/4 of the budget and moves between one reclaim burst (the
//! watermarks' distance and two batches) and 1/2 of the budget, balanced epoch by epoch between the local faults sampling costs and the remote
//! faults it saves (`sizing`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

use swap_backend::PAGE_SIZE;

use super::os::{self, AnonMemory};
use super::page_table::{Claim, PageState};
use super::sizing::Sizer;
use super::{Evicted, Shared};
use crate::policy::Admission;

const NO_SLOT: u32 = u32::MAX;

/// Page-sized slots of our own memory that hold inactive pages' bytes.
struct Slots {
    mem: AnonMemory,
    free: Mutex<Vec<u32>>,
    /// The slot of each inactive page, [`NO_SLOT`] for others.
    of_page: Box<[AtomicU32]>,
}

impl Slots {
    fn new(capacity: usize, npages: usize) -> std::io::Result<Slots> {
        Ok(Slots {
            mem: AnonMemory::new(capacity * PAGE_SIZE)?,
            // Popped from the end: low slots are reused first, so the memory touched stays
            // as small as the list has ever been.
            free: Mutex::new((0..capacity as u32).rev().collect()),
            of_page: (0..npages).map(|_| AtomicU32::new(NO_SLOT)).collect(),
        })
    }

    fn alloc(&self, n: usize) -> Vec<u32> {
        let mut f = self.free.lock().unwrap();
        let k = n.min(f.len());
        let at = f.len() - k;
        f.split_off(at)
    }

    fn release(&self, slots: &[u32]) {
        if !slots.is_empty() {
            self.free.lock().unwrap().extend_from_slice(slots);
        }
    }

    fn ptr(&self, slot: u32) -> *mut u8 {
        self.mem.page(slot as usize)
    }

    fn get(&self, p: usize) -> u32 {
        self.of_page[p].load(Ordering::SeqCst)
    }

    fn set(&self, p: usize, slot: u32) {
        self.of_page[p].store(slot, Ordering::SeqCst);
    }

    fn take(&self, p: usize) -> Option<u32> {
        let s = self.of_page[p].swap(NO_SLOT, Ordering::SeqCst);
        (s != NO_SLOT).then_some(s)
    }
}

#[derive(Debug, Default)]
struct Queues {
    /// Mapped pages the policy admitted cold: deactivated first.
    cold: VecDeque<u32>,
    /// Mapped pages, oldest first, with a second chance for referenced ones.
    active: VecDeque<u32>,
    /// Unmapped pages in slots, oldest first, each with the number of its deactivation (an
    /// entry left behind by a page reactivated and deactivated again since is stale).
    inactive: VecDeque<(u32, u32)>,
}

/// Reclaim counters, read for stats.
#[derive(Debug, Default)]
pub struct ReclaimCounters {
    /// Pages unmapped into slots to sample their use.
    pub deactivated: AtomicU64,
    /// Inactive pages touched and mapped back: the local faults sampling costs.
    pub reactivated: AtomicU64,
    /// Of those, pages taken back while their write-back was in flight.
    pub reactivated_in_writeback: AtomicU64,
    /// Remote faults on pages evicted fewer evictions ago than there were active pages.
    pub workingset_refaults: AtomicU64,
    /// Faults that found the budget full and reclaimed themselves.
    pub direct_reclaims: AtomicU64,
    /// Passes of the reclaimer thread.
    pub background_passes: AtomicU64,
    /// Pages the reclaimer thread evicted (the rest were evicted by direct reclaim).
    pub background_evicted: AtomicU64,
}

pub(super) struct Reclaim {
    queues: Mutex<Queues>,
    slots: Slots,
    /// Second-chance bit in the active list.
    referenced: Box<[AtomicBool]>,
    /// A write-back of the page is in flight (the page itself may have been taken back).
    writing: Box<[AtomicBool]>,
    /// The page waits in the cold queue (cleared when an application touch promotes it).
    cold: Box<[AtomicBool]>,
    pub low: usize,
    pub high: usize,
    /// Whether pages wait inactive at all (`reclaim=fifo` turns the sampling off).
    sampling: bool,
    inactive: AtomicUsize,
    /// Of the inactive pages, those being written back (on their way out).
    writeback: AtomicUsize,
    sizer: Sizer,
    /// Evictions so far: the clock refault distances are measured in.
    clock: AtomicU32,
    /// Per page, the number of its latest deactivation; and the count of deactivations.
    deactivation: Box<[AtomicU32]>,
    deactivations: AtomicU32,
    pub counters: ReclaimCounters,
    thread: OnceLock<std::thread::Thread>,
    /// Whether the reclaimer is parked with its reserve full (see `Pager::settle`).
    idle: Mutex<bool>,
    idle_changed: Condvar,
}

impl Reclaim {
    pub fn new(
        budget: usize,
        npages: usize,
        sampling: bool,
        batch: usize,
    ) -> std::io::Result<Reclaim> {
        // A reserve of 1/32 of the budget (at least 16 pages, at most 32 MiB), never more
        // than a quarter of a small budget. A budget that holds the whole region needs no
        // reserve: evicting would only bring pages back (all-local runs page nothing).
        let (low, high) = if budget >= npages {
            (0, 0)
        } else {
            let low = (budget / 32).clamp(16, 8192).min(budget / 4).max(1);
            (low, (low * 2).min(budget / 2).max(low))
        };
        let batch = batch.max(1);
        let max_target = if sampling { budget / 2 } else { 0 };
        // A reclaim pass evicts up to `high - low` pages and a batch more in one burst: a
        // shorter list would evict a page deactivated in the same pass before its owner ran.
        let min_target = high - low + 2 * batch;
        Ok(Reclaim {
            queues: Mutex::new(Queues::default()),
            // Room for the largest list plus a batch in flight.
            slots: Slots::new(max_target + 4 * batch, npages)?,
            referenced: (0..npages).map(|_| AtomicBool::new(false)).collect(),
            writing: (0..npages).map(|_| AtomicBool::new(false)).collect(),
            cold: (0..npages).map(|_| AtomicBool::new(false)).collect(),
            low,
            high,
            sampling,
            inactive: AtomicUsize::new(0),
            writeback: AtomicUsize::new(0),
            sizer: Sizer::new(budget, batch, min_target, max_target),
            clock: AtomicU32::new(1),
            deactivation: (0..npages).map(|_| AtomicU32::new(0)).collect(),
            deactivations: AtomicU32::new(0),
            counters: ReclaimCounters::default(),
            thread: OnceLock::new(),
            idle: Mutex::new(false),
            idle_changed: Condvar::new(),
        })
    }

    fn set_idle(&self, idle: bool) {
        let mut i = self.idle.lock().unwrap();
        if *i != idle {
            *i = idle;
            self.idle_changed.notify_all();
        }
    }

    pub fn set_thread(&self, t: std::thread::Thread) {
        let _ = self.thread.set(t);
    }

    pub fn wake(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    pub fn inactive_pages(&self) -> usize {
        self.inactive.load(Ordering::Relaxed)
    }

    pub fn inactive_target(&self) -> usize {
        self.sizer.target()
    }

    pub fn sizer(&self) -> &Sizer {
        &self.sizer
    }

    pub fn sampling(&self) -> bool {
        self.sampling
    }

    pub fn is_cold(&self, p: usize) -> bool {
        self.cold[p].load(Ordering::Relaxed)
    }

    /// Makes a cold page hot (an application touch).
    pub fn promote(&self, p: usize) -> bool {
        self.cold[p].swap(false, Ordering::Relaxed)
    }

    pub fn set_referenced(&self, p: usize) {
        self.referenced[p].store(true, Ordering::Relaxed);
    }

    /// Queues a page that just became mapped, where the policy said. Faulted and prefetched
    /// pages come in unreferenced; only a reactivation (a touch seen while inactive) or a
    /// write fault sets the bit. (A second lap for every faulted page, as eviction on the
    /// fault path had, scrambled the order once reclaim ran in the background: the GC's
    /// pause pages outlived the application's, and scans pushed out the sampled hot set.)
    pub fn admit(&self, p: usize, admission: Admission, referenced: bool) {
        let cold = admission == Admission::Cold;
        self.cold[p].store(cold, Ordering::Relaxed);
        self.referenced[p].store(referenced && !cold, Ordering::Relaxed);
        let mut q = self.queues.lock().unwrap();
        if cold {
            q.cold.push_back(p as u32);
        } else {
            q.active.push_back(p as u32);
        }
    }

    /// Gives deactivation victims back (their claims restore their states) to the front of
    /// the queue they came from.
    fn requeue<'t>(&self, victims: impl IntoIterator<Item = (Claim<'t>, bool)>) {
        let mut q = self.queues.lock().unwrap();
        for (c, cold) in victims {
            let p = c.page() as u32;
            drop(c);
            if cold {
                q.cold.push_front(p);
            } else {
                q.active.push_front(p);
            }
        }
    }

    /// Queues pages cold (the pages of a finished pause); returns how many became cold.
    /// `state` reads a page's state. Mapped pages join the cold queue (deactivated first);
    /// pages already inactive move to the front of the inactive list, ahead of the
    /// application's pages deactivated before the pause ended.
    pub fn make_cold(&self, pages: &[u32], state: impl Fn(usize) -> PageState) -> u64 {
        let mut q = self.queues.lock().unwrap();
        let mut n = 0;
        for &p in pages {
            let i = p as usize;
            let s = state(i);
            if !(s.is_mapped() || s.is_inactive()) || self.cold[i].swap(true, Ordering::Relaxed) {
                continue;
            }
            n += 1;
            if s.is_mapped() {
                q.cold.push_back(p);
            } else {
                // A new deactivation number leaves the old entry stale. Under the queue lock
                // nobody deactivates or evicts it meanwhile; a page reactivated since `state`
                // was read is mapped again, which makes this entry stale too.
                let seq = self.deactivations.fetch_add(1, Ordering::Relaxed);
                self.deactivation[i].store(seq, Ordering::Relaxed);
                q.inactive.push_front((p, seq));
            }
        }
        n
    }

    /// A remote fault on a page evicted at `evicted_at` on the clock. Counted as a
    /// working-set refault when it was evicted fewer evictions ago than there are active
    /// pages. (Admitting such pages referenced, as a second chance, made the graph workload
    /// take 16% more remote faults than FIFO: it is not done.)
    pub fn refault(&self, evicted_at: u32, charged: usize) {
        if evicted_at == 0 || !self.sampling {
            return;
        }
        let distance = self.clock.load(Ordering::Relaxed).wrapping_sub(evicted_at) as usize;
        self.sizer.refault(distance as u64);
        let active = charged.saturating_sub(self.inactive_pages());
        if distance <= active {
            self.counters
                .workingset_refaults
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Inactive page `p` was touched and mapped back (the caller admits it again).
    pub fn reactivated(&self, p: usize, slot_freed: Option<u32>) {
        if let Some(s) = slot_freed {
            self.slots.release(&[s]);
        }
        let age = self
            .deactivations
            .load(Ordering::Relaxed)
            .wrapping_sub(self.deactivation[p].load(Ordering::Relaxed));
        self.sizer.reactivation(age as u64);
        self.inactive.fetch_sub(1, Ordering::Relaxed);
        self.counters.reactivated.fetch_add(1, Ordering::Relaxed);
    }

    /// The slot holding inactive page `p`'s bytes, taken by the caller (who holds `p`'s
    /// claim). `None` means a bug: an inactive page always has one.
    pub fn take_slot(&self, p: usize) -> Option<(u32, *const u8)> {
        self.slots
            .take(p)
            .map(|s| (s, self.slots.ptr(s) as *const u8))
    }

    /// Gives a slot back to page `p` (a reactivation that has to be retried).
    pub fn restore_slot(&self, p: usize, slot: u32) {
        self.slots.set(p, slot);
    }

    /// An inactive page went away (its range was unmapped): frees its slot.
    pub fn forget_inactive(&self, p: usize) {
        if let Some(s) = self.slots.take(p) {
            self.slots.release(&[s]);
        }
        self.inactive.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Shared {
    /// Free pages in the budget.
    pub(super) fn free_pages(&self) -> usize {
        self.config
            .budget_pages
            .saturating_sub(self.table.charged())
    }

    /// Charges a claimed page against the budget, reclaiming directly when the budget is
    /// full (counted), and wakes the reclaimer when the reserve runs low. The charge never
    /// exceeds the budget, however many handlers charge at once. `false`: no room could be
    /// made now (an unread event is changing the mm, or every charged page is in flight
    /// elsewhere); the caller drops its claims and retries the fault after reading events.
    pub(super) fn charge(&self, c: &mut Claim<'_>) -> bool {
        self.charge_reclaiming(c, true)
    }

    /// `charge` for a page no fault waits on (the prefetch worker's GC hints): its reclaim is
    /// not a direct-reclaim stall.
    pub(super) fn charge_off_fault_path(&self, c: &mut Claim<'_>) -> bool {
        self.charge_reclaiming(c, false)
    }

    fn charge_reclaiming(&self, c: &mut Claim<'_>, on_fault_path: bool) -> bool {
        let budget = self.config.budget_pages;
        let charged = c.try_charge(budget) || {
            if on_fault_path {
                self.reclaim
                    .counters
                    .direct_reclaims
                    .fetch_add(1, Ordering::Relaxed);
            }
            matches!(self.reclaim_until(1), Evicted::Pages(_)) && c.try_charge(budget)
        };
        if self.table.charged() + self.reclaim.low > budget {
            self.reclaim.wake();
        }
        charged
    }

    /// Fills the reserve up to the high watermark and waits until the reclaimer has parked.
    pub(super) fn settle(&self) {
        let r = &self.reclaim;
        while self.reclaim_until(r.high) == Evicted::Again {
            std::thread::yield_now();
        }
        let mut idle = r.idle.lock().unwrap();
        while !(*idle && self.free_pages() >= r.low) {
            r.wake();
            idle = r.idle_changed.wait(idle).unwrap();
        }
    }

    /// Evicts until `want_free` pages of the budget are free.
    pub(super) fn reclaim_until(&self, want_free: usize) -> Evicted {
        self.demote_pause_pages(false);
        let budget = self.config.budget_pages;
        let mut total = 0;
        loop {
            let over = (self.table.charged() + want_free).saturating_sub(budget);
            if over == 0 {
                return Evicted::Pages(total);
            }
            // Keep the inactive list one batch above its target, so that a page deactivated
            // now waits a target's worth of evictions for its touch before it is evicted.
            let batch = self.config.evict_batch.max(1);
            let target = self.reclaim.inactive_target();
            let waiting = |r: &Reclaim| {
                r.inactive_pages()
                    .saturating_sub(r.writeback.load(Ordering::Relaxed))
            };
            let have = waiting(&self.reclaim);
            let mut deactivated = 0;
            if have < target + batch {
                match self.deactivate((target + batch - have).min(batch)) {
                    Evicted::Pages(n) => deactivated = n,
                    Evicted::Again => return Evicted::Again,
                    Evicted::NoVictim => {}
                }
            }
            let excess = waiting(&self.reclaim).saturating_sub(target);
            let n = match (excess, deactivated) {
                (0, 0) => batch, // nothing more to deactivate: the oldest inactive go
                (0, _) => continue,
                (e, _) => e.min(batch),
            };
            match self.evict_inactive(n) {
                Evicted::Pages(n) => total += n,
                Evicted::Again => return Evicted::Again,
                Evicted::NoVictim if deactivated == 0 => {
                    // Everything charged is in flight elsewhere: the caller retries
                    // rather than spin here (counted).
                    self.counters
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
    pub(super) fn reclaimer(&self) {
        swap_backend::set_thread_lane(swap_backend::Lane::Reclaim);
        let r = &self.reclaim;
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            if self.free_pages() < r.low {
                r.set_idle(false);
                r.counters.background_passes.fetch_add(1, Ordering::Relaxed);
                let before = self.evicted_total();
                let outcome = self.reclaim_until(r.high);
                r.counters
                    .background_evicted
                    .fetch_add(self.evicted_total() - before, Ordering::Relaxed);
                if outcome == Evicted::Again || outcome == Evicted::NoVictim {
                    // An unread event blocks the mm (the handler reads it), or everything is
                    // in flight: try again shortly rather than spin.
                    std::thread::park_timeout(std::time::Duration::from_millis(1));
                }
            } else {
                r.set_idle(true);
                // Pauses end without a fault to notice: look at them now and then.
                std::thread::park_timeout(std::time::Duration::from_millis(50));
                self.demote_pause_pages(false);
            }
        }
    }

    fn evicted_total(&self) -> u64 {
        let c = &self.counters;
        c.evicted_clean.load(Ordering::Relaxed)
            + c.evicted_dirty.load(Ordering::Relaxed)
            + c.evicted_zero.load(Ordering::Relaxed)
    }

    /// Unmaps up to `want` mapped pages into slots: cold pages first (to the front of the
    /// inactive list), then the oldest active ones.
    fn deactivate(&self, want: usize) -> Evicted {
        let r = &self.reclaim;
        let mut victims: Vec<(Claim<'_>, bool)> = Vec::with_capacity(want);
        {
            let mut q = r.queues.lock().unwrap();
            let mut looked = 0;
            let limit = q.cold.len();
            while victims.len() < want && looked < limit {
                let Some(p) = q.cold.pop_front() else { break };
                looked += 1;
                let p = p as usize;
                if !r.cold[p].load(Ordering::Relaxed) {
                    q.active.push_back(p as u32); // promoted
                    continue;
                }
                match self.table.claim_if(p, PageState::is_mapped) {
                    Some(c) => victims.push((c, true)),
                    None if self.table.get(p) == PageState::Busy => q.cold.push_back(p as u32),
                    None => {} // stale entry
                }
            }
            let mut looked = 0;
            let limit = q.active.len() * 2 + 1;
            while victims.len() < want && looked < limit {
                let Some(p) = q.active.pop_front() else { break };
                looked += 1;
                let p = p as usize;
                if r.cold[p].load(Ordering::Relaxed) {
                    continue; // demoted: it waits in the cold queue
                }
                if !self.table.get(p).is_mapped() {
                    if self.table.get(p) == PageState::Busy {
                        q.active.push_back(p as u32);
                    }
                    continue; // stale entry
                }
                if r.referenced[p].swap(false, Ordering::Relaxed) {
                    q.active.push_back(p as u32);
                    continue;
                }
                match self.table.claim_if(p, PageState::is_mapped) {
                    Some(c) => victims.push((c, false)),
                    None => q.active.push_back(p as u32),
                }
            }
        }
        let mut slots = r.slots.alloc(victims.len());
        if slots.len() < victims.len() {
            // Out of slots (a list this long is already being written back): the rest stay.
            r.requeue(victims.drain(slots.len()..));
        }
        if victims.is_empty() {
            r.slots.release(&slots);
            return Evicted::NoVictim;
        }
        // Page order, so that the write-protect and discard runs coalesce.
        let mut order: Vec<usize> = (0..victims.len()).collect();
        order.sort_unstable_by_key(|&i| victims[i].0.page());
        let dirty: Vec<usize> = order
            .iter()
            .map(|&i| &victims[i].0)
            .filter(|c| c.from() == PageState::Dirty)
            .map(|c| c.page())
            .collect();
        // Dirty pages: write-protect (writers block from here on). Clean ones are mapped
        // write-protected already.
        for (s, l) in os::runs(self.base, &dirty) {
            match self.uffd.write_protect(s, l, true, false) {
                Ok(true) => {}
                Ok(false) => {
                    // An unread event is changing the mm: give the pages back (a page left
                    // protected but Dirty is unprotected by its next write fault).
                    r.slots.release(&slots);
                    r.requeue(victims);
                    return Evicted::Again;
                }
                Err(e) => self.die(&format!("cannot write-protect heap pages at {s:#x}: {e}")),
            }
        }
        let srcs: Vec<usize> = victims.iter().map(|v| self.page_addr(v.0.page())).collect();
        let dsts: Vec<*mut u8> = slots.iter().map(|&s| r.slots.ptr(s)).collect();
        // SAFETY: every destination is a slot allocated above, owned by this call; every
        // source is a claimed mapped page (Busy), so reading it cannot fault into our handler.
        let copied = unsafe { os::copy_out(&srcs, &dsts) };
        let pages: Vec<usize> = order.iter().map(|&i| victims[i].0.page()).collect();
        if let Err(e) = self.madvise.dontneed(&os::runs(self.base, &pages)) {
            self.die(&format!("cannot discard heap pages: {e}"));
        }
        let mut q = r.queues.lock().unwrap();
        let mut n = 0;
        let mut unused = Vec::new();
        let mut front = Vec::new();
        for (((c, cold), slot), ok) in victims.into_iter().zip(slots.drain(..)).zip(copied) {
            let p = c.page();
            if !ok {
                // The JVM unmapped the page under us (heap shrink); its UNMAP event resets
                // it. Nothing to keep.
                unused.push(slot);
                c.finish(PageState::Untouched);
                continue;
            }
            r.slots.set(p, slot);
            let seq = r.deactivations.fetch_add(1, Ordering::Relaxed);
            r.deactivation[p].store(seq, Ordering::Relaxed);
            let to = if c.from() == PageState::Dirty {
                PageState::InactiveDirty
            } else {
                PageState::InactiveClean
            };
            c.finish(to);
            n += 1;
            if cold {
                front.push((p as u32, seq));
            } else {
                q.inactive.push_back((p as u32, seq));
            }
        }
        // Cold pages go first, in their own order.
        for e in front.into_iter().rev() {
            q.inactive.push_front(e);
        }
        drop(q);
        r.slots.release(&unused);
        r.inactive.fetch_add(n, Ordering::Relaxed);
        r.counters
            .deactivated
            .fetch_add(n as u64, Ordering::Relaxed);
        Evicted::Pages(n)
    }

    /// Evicts up to `want` pages from the front of the inactive list.
    fn evict_inactive(&self, want: usize) -> Evicted {
        let r = &self.reclaim;
        let mut clean = Vec::new();
        let mut dirty = Vec::new();
        {
            let mut q = r.queues.lock().unwrap();
            let limit = q.inactive.len();
            let mut looked = 0;
            while clean.len() + dirty.len() < want && looked < limit {
                let Some((p, seq)) = q.inactive.pop_front() else {
                    break;
                };
                looked += 1;
                let p = p as usize;
                if r.deactivation[p].load(Ordering::Relaxed) != seq {
                    continue; // stale: reactivated and deactivated again since
                }
                match self.table.get(p) {
                    PageState::InactiveClean => {}
                    // Taken back during a write-back and deactivated again: its new bytes
                    // must not reach the store before the old ones (they would be
                    // overwritten). It waits for the first write.
                    PageState::InactiveDirty if r.writing[p].load(Ordering::SeqCst) => {
                        q.inactive.push_back((p as u32, seq));
                        continue;
                    }
                    PageState::InactiveDirty => {}
                    PageState::Busy => {
                        q.inactive.push_back((p as u32, seq));
                        continue;
                    }
                    _ => continue, // stale: reactivated, or being written back
                }
                if let Some(c) = self.table.claim_if(p, |s| {
                    matches!(s, PageState::InactiveClean | PageState::InactiveDirty)
                }) {
                    if c.from() == PageState::InactiveClean {
                        clean.push(c);
                    } else {
                        dirty.push(c);
                    }
                }
            }
        }
        if clean.is_empty() && dirty.is_empty() {
            return Evicted::NoVictim;
        }
        let n = clean.len() + dirty.len();
        let cold = clean
            .iter()
            .chain(&dirty)
            .filter(|c| r.cold[c.page()].load(Ordering::Relaxed))
            .count();
        self.counters
            .evicted_cold
            .fetch_add(cold as u64, Ordering::Relaxed);
        let clock = r.clock.fetch_add(n as u32, Ordering::Relaxed);
        r.sizer.evicted(n);
        // Clean: the store's copy is current (or the page is all zeros and never stored).
        let mut freed = Vec::with_capacity(clean.len());
        for c in clean {
            let p = c.page();
            if let Some(s) = r.slots.take(p) {
                freed.push(s);
            }
            self.table.set_evicted_at(p, clock);
            if self.table.is_stored(p) {
                self.counters.evicted_clean.fetch_add(1, Ordering::Relaxed);
                c.finish(PageState::Remote);
            } else {
                self.counters.evicted_zero.fetch_add(1, Ordering::Relaxed);
                c.finish(PageState::Untouched);
            }
        }
        r.slots.release(&freed);
        r.inactive.fetch_sub(freed.len(), Ordering::Relaxed);
        if !dirty.is_empty() {
            self.write_back(dirty, clock);
        }
        Evicted::Pages(n)
    }

    /// Writes inactive dirty pages back from their slots. While the write is in flight the
    /// pages are `Writeback`: a fault may take one back (the slot's bytes do not change), and
    /// the slot is freed here once nobody reads it.
    fn write_back(&self, claims: Vec<Claim<'_>>, clock: u32) {
        let r = &self.reclaim;
        let mut batch: Vec<(usize, u32)> = Vec::with_capacity(claims.len());
        let mut write_ids = Vec::with_capacity(claims.len());
        let mut write_buf = Vec::with_capacity(claims.len() * PAGE_SIZE);
        let mut to_free = Vec::new();
        let mut zero_slots = Vec::new();
        for c in claims {
            let p = c.page();
            let slot = r.slots.get(p);
            assert_ne!(slot, NO_SLOT, "inactive page {p} has no slot");
            // SAFETY: the slot belongs to page p, which this call has claimed; nobody writes
            // a slot while its page is inactive.
            let bytes = unsafe { std::slice::from_raw_parts(r.slots.ptr(slot), PAGE_SIZE) };
            self.table.set_evicted_at(p, clock);
            if bytes.iter().all(|b| *b == 0) {
                r.slots.take(p);
                zero_slots.push(slot);
                if self.table.set_stored(p, false) {
                    to_free.push(p as u64);
                }
                self.counters.evicted_zero.fetch_add(1, Ordering::Relaxed);
                c.finish(PageState::Untouched);
                continue;
            }
            write_ids.push(p as u64);
            write_buf.extend_from_slice(bytes);
            batch.push((p, slot));
            r.writing[p].store(true, Ordering::SeqCst);
            c.finish(PageState::Writeback);
        }
        r.slots.release(&zero_slots);
        r.inactive.fetch_sub(zero_slots.len(), Ordering::Relaxed);
        if !to_free.is_empty() && self.store.free_pages(&to_free).is_ok() {
            // Losing a free only wastes remote space; never fatal.
            self.counters
                .pages_freed_remote
                .fetch_add(to_free.len() as u64, Ordering::Relaxed);
        }
        if batch.is_empty() {
            return;
        }
        r.writeback.fetch_add(batch.len(), Ordering::Relaxed);
        if let Err(e) = self.store.write_pages(&write_ids, &write_buf) {
            self.die(&format!(
                "cannot write back {} heap pages starting at page {} ({:#x}) to {}: {e}",
                write_ids.len(),
                write_ids[0],
                self.page_addr(write_ids[0] as usize),
                self.store.describe_page(write_ids[0])
            ));
        }
        self.counters
            .pages_written
            .fetch_add(write_ids.len() as u64, Ordering::Relaxed);
        let mut done = Vec::with_capacity(batch.len());
        let mut evicted = 0;
        for (p, slot) in batch {
            self.table.set_stored(p, true);
            r.writing[p].store(false, Ordering::SeqCst);
            loop {
                match self.table.claim(p, PageState::Writeback) {
                    Some(c) if r.slots.get(p) == slot => {
                        r.slots.take(p);
                        c.finish(PageState::Remote);
                        evicted += 1;
                        break;
                    }
                    // Taken back by a fault and written out again since: not ours.
                    Some(c) => break drop(c),
                    // A fault holds the page and may be reading our slot: wait for it.
                    None if self.table.get(p) == PageState::Busy => std::thread::yield_now(),
                    // Taken back and mapped (or its range unmapped): the slot is ours.
                    None => break,
                }
            }
            done.push(slot);
        }
        r.writeback.fetch_sub(done.len(), Ordering::Relaxed);
        r.slots.release(&done);
        r.inactive.fetch_sub(evicted, Ordering::Relaxed);
        self.counters
            .evicted_dirty
            .fetch_add(evicted as u64, Ordering::Relaxed);
    }

    /// Makes the pages of finished pauses cold.
    pub(super) fn demote_pause_pages(&self, force: bool) {
        let ended = self.pauses_ended.load(Ordering::SeqCst);
        if !force && self.pauses_demoted.swap(ended, Ordering::SeqCst) == ended {
            return;
        }
        let pages = std::mem::take(&mut *self.pause_pages.lock().unwrap());
        // Inactive ones too: they are marked cold like the rest (an application touch then
        // promotes them) and already wait for eviction.
        let n = self.reclaim.make_cold(&pages, |p| self.table.get(p));
        self.counters
            .demoted_after_pause
            .fetch_add(n, Ordering::Relaxed);
    }

    /// Queues a page that just became mapped for reclaim, where the policy said.
    pub(super) fn admit(&self, p: usize, admission: Admission, referenced: bool) {
        self.reclaim.admit(p, admission, referenced);
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
}
