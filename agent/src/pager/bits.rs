//! A bit a page shared between threads: what a `Box<[AtomicBool]>` says, in an eighth of the
//! memory (at 16 GiB of heap, 512 KiB instead of 4 MiB).

use std::sync::atomic::{AtomicU64, Ordering};

pub(super) struct AtomicBits(Box<[AtomicU64]>);

impl AtomicBits {
    /// `n` bits, all clear.
    pub fn new(n: usize) -> AtomicBits {
        AtomicBits((0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect())
    }

    pub fn get(&self, i: usize, order: Ordering) -> bool {
        self.0[i / 64].load(order) & (1 << (i % 64)) != 0
    }

    /// Sets bit `i` to `v`; returns what it was.
    pub fn set(&self, i: usize, v: bool, order: Ordering) -> bool {
        let bit = 1 << (i % 64);
        let old = if v {
            self.0[i / 64].fetch_or(bit, order)
        } else {
            self.0[i / 64].fetch_and(!bit, order)
        };
        old & bit != 0
    }

    /// Clears every bit (relaxed: each word on its own).
    pub fn clear(&self) {
        for w in self.0.iter() {
            w.store(0, Ordering::Relaxed);
        }
    }

    /// [`set`](Self::set) with relaxed order, for a bit only one thread at a time changes
    /// (the holder of the page's claim): read first, and written only when it changes. Most
    /// calls find it as wanted (a fault clearing a bit already clear), and a read costs the
    /// fault path less than a locked write to a word other pages share.
    pub fn put(&self, i: usize, v: bool) -> bool {
        let old = self.get(i, Ordering::Relaxed);
        if old != v {
            self.set(i, v, Ordering::Relaxed);
        }
        old
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bit_changes_alone_and_says_what_it_was() {
        let b = AtomicBits::new(130);
        assert!(!b.set(64, true, Ordering::Relaxed));
        assert!(b.set(64, true, Ordering::Relaxed), "already set");
        assert!(b.get(64, Ordering::Relaxed));
        assert!(!b.get(63, Ordering::Relaxed) && !b.get(65, Ordering::Relaxed));
        assert!(!b.set(129, true, Ordering::Relaxed), "the last bit exists");
        assert!(b.set(64, false, Ordering::Relaxed));
        assert!(!b.get(64, Ordering::Relaxed));
        assert!(b.get(129, Ordering::Relaxed));
        assert!(b.put(129, false), "put says what it was");
        assert!(!b.put(129, false), "and leaves it as wanted");
        assert!(!b.get(129, Ordering::Relaxed));
        assert!(!b.put(3, true));
        assert!(b.get(3, Ordering::Relaxed));
    }
}
