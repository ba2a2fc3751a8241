//! Released ranges: a patched collector says a range holds no object it will read before
//! writing it again (a region it just freed), so the pager drops the range's pages wherever
//! they are. Reusing the region then zero-fills locally instead of fetching garbage from the
//! store, and no garbage is written back or keeps budget.
//!
//! Only pages nobody else holds are dropped: a page in flight (a fetch, a deactivation or a
//! write-back) keeps whatever bytes it gets, which is as good as any for a page whose
//! contents do not matter. The store's copy is left where it is and only forgotten: freeing it
//! would race a later write-back of the same page on another connection, and the store never
//! holds more than one copy per heap page anyway.

use std::sync::atomic::Ordering;

use swap_backend::PAGE_SIZE;

use super::os;
use super::page_table::{Claim, PageState};
use super::Shared;

impl Shared {
    /// Drops the pages wholly inside `[start, start + len)`. The caller promises that nobody
    /// touches the range until this returns (the JVM frees a region before reusing it).
    /// Returns the pages dropped.
    pub(super) fn release(&self, start: usize, len: usize) -> usize {
        let lo = start.max(self.base).next_multiple_of(PAGE_SIZE);
        let hi = (start.saturating_add(len)).min(self.base + self.npages * PAGE_SIZE);
        if lo >= hi {
            return 0;
        }
        let (first, last) = ((lo - self.base) / PAGE_SIZE, (hi - self.base) / PAGE_SIZE);
        let mut mapped: Vec<Claim<'_>> = Vec::new();
        let mut dropped = 0;
        let mut remote = 0u64;
        for p in first..last {
            let Some(c) = self.table.claim_if(p, |s| {
                !matches!(s, PageState::Untouched | PageState::Writeback)
            }) else {
                continue;
            };
            if c.from().is_mapped() {
                mapped.push(c);
                continue;
            }
            remote += u64::from(c.from() == PageState::Remote);
            self.forget(c);
            dropped += 1;
        }
        if !mapped.is_empty() {
            let pages: Vec<usize> = mapped.iter().map(Claim::page).collect();
            match self.madvise.dontneed(&os::runs(self.base, &pages)) {
                Ok(()) => {
                    dropped += mapped.len();
                    for c in mapped {
                        self.forget(c);
                    }
                }
                // The claims drop: the pages stay as they were, correct, only not released.
                Err(e) => crate::log!(
                    crate::options::LogLevel::Warn,
                    "cannot discard released heap pages: {e}"
                ),
            }
        }
        self.counters
            .pages_released
            .fetch_add(dropped as u64, Ordering::Relaxed);
        self.counters
            .released_remote
            .fetch_add(remote, Ordering::Relaxed);
        dropped
    }
}
