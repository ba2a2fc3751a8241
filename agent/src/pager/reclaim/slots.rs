//! Page-sized slots of our own memory that hold inactive pages' bytes while the pages are
//! unmapped from the heap, and which page holds which slot.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use super::super::os::SlotMemory;
use super::super::page_table::Claim;
use super::super::splice::{Held, Pipes};

const NO_SLOT: u32 = u32::MAX;

pub(super) struct Slots {
    mem: SlotMemory,
    /// Pipes that hold pages across their discard (`splice`); `None` where off or refused.
    pipes: Option<Pipes>,
    /// Pipes were turned off after start (a heap range could not be kept from forks).
    pipes_off: std::sync::atomic::AtomicBool,
    free: Mutex<Vec<u32>>,
    /// The slot of each inactive page, [`NO_SLOT`] for others.
    of_page: Box<[AtomicU32]>,
    /// By slot, the number of the deactivation that filled it (the sizer's ages): a slot's
    /// worth, not a page's, since only an inactive page has an age to tell.
    deactivation: Box<[AtomicU32]>,
}

impl Slots {
    /// `pipes`: hold pages in pipes where the kernel allows (`splice`).
    pub fn new(capacity: usize, npages: usize, pipes: bool) -> std::io::Result<Slots> {
        Ok(Slots {
            mem: SlotMemory::new(capacity)?,
            pipes: if pipes { Pipes::probe() } else { None },
            pipes_off: Default::default(),
            // Popped from the end: low slots are reused first, so the memory touched stays
            // as small as the list has ever been.
            free: Mutex::new((0..capacity as u32).rev().collect()),
            of_page: (0..npages).map(|_| AtomicU32::new(NO_SLOT)).collect(),
            deactivation: (0..capacity.max(1)).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    /// Up to `n` free slots.
    pub fn alloc(&self, n: usize) -> Vec<u32> {
        let mut f = self.free.lock().unwrap();
        let k = n.min(f.len());
        let at = f.len() - k;
        f.split_off(at)
    }

    pub fn release(&self, slots: &[u32]) {
        if !slots.is_empty() {
            self.free.lock().unwrap().extend_from_slice(slots);
        }
    }

    /// The bytes in `slot`, held by the page `holder` claims.
    pub fn bytes(&self, slot: u32, holder: &Claim<'_>) -> &[u8] {
        self.mem.bytes(slot, holder)
    }

    /// Copies the claimed mapped pages at `srcs` into the fresh `slots`; which were copied.
    pub fn fill_from(&self, srcs: &[usize], slots: &[u32], holders: &[&Claim<'_>]) -> Vec<bool> {
        self.mem.fill(srcs, slots, holders)
    }

    /// Holds the claimed mapped pages at `srcs` in a pipe, in order, so that they can be
    /// discarded before they are copied (`fill_held`); `None` where pipes are off.
    pub fn hold(&self, srcs: &[usize]) -> Option<Held<'_>> {
        if self.pipes_off.load(Ordering::Relaxed) {
            return None;
        }
        self.pipes.as_ref().map(|p| p.hold(srcs))
    }

    /// No page is held in a pipe from now on; `false` if none was.
    pub fn stop_holding(&self) -> bool {
        self.pipes.is_some() && !self.pipes_off.swap(true, Ordering::SeqCst)
    }

    /// Copies the pages `held` holds, the `i`-th into `slots[i]` (fresh slots, one per held
    /// page, each allocated to the page the caller claims).
    pub fn fill_held(&self, held: Held<'_>, slots: &[u32]) -> std::io::Result<()> {
        let dsts: Vec<*mut u8> = slots.iter().map(|&s| self.mem.page_ptr(s)).collect();
        held.copy_out(&dsts)
    }

    /// The slot page `p` holds, if any.
    pub fn of(&self, p: usize) -> Option<u32> {
        let s = self.of_page[p].load(Ordering::SeqCst);
        (s != NO_SLOT).then_some(s)
    }

    /// Page `p`, deactivated as number `seq`, now holds `slot`.
    pub fn fill(&self, p: usize, slot: u32, seq: u32) {
        self.deactivation[slot as usize].store(seq, Ordering::Relaxed);
        self.set(p, slot);
    }

    /// The number of the deactivation that filled `slot`.
    pub fn deactivation(&self, slot: u32) -> u32 {
        self.deactivation[slot as usize].load(Ordering::Relaxed)
    }

    pub fn set(&self, p: usize, slot: u32) {
        self.of_page[p].store(slot, Ordering::SeqCst);
    }

    /// Takes page `p`'s slot away from it (the caller now owns the slot).
    pub fn take(&self, p: usize) -> Option<u32> {
        let s = self.of_page[p].swap(NO_SLOT, Ordering::SeqCst);
        (s != NO_SLOT).then_some(s)
    }
}
