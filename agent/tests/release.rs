//! Released ranges (a patched collector's freed regions) on a plain mmap region: every page
//! wholly inside is dropped wherever it was (mapped, inactive in a slot, or only in the store),
//! reads back as zeros without a remote fetch, and gives its budget back; pages outside, and a
//! page only partly inside, keep their bytes.

// Tests map regions and read the pager's residency map raw.
#![allow(unsafe_code)]

use std::sync::Arc;

use memliner_agent::model::{FaultKind, ThreadClass};
use memliner_agent::pager::PagerConfig;
use memliner_agent::policy::Baseline;
use swap_backend::{LocalStore, PAGE_SIZE};

mod common;
use common::{start_pager, AllApp, Region};

const PAGES: usize = 256;
const BUDGET: usize = 32;

#[test]
fn released_pages_read_back_as_zeros_without_a_fetch_and_the_rest_keep_their_bytes() {
    let region = Region::new(PAGES);
    let pager = start_pager(
        &region,
        PagerConfig {
            fill_ahead: 0,
            prefetch_depth: 0,
            policy: Arc::new(Baseline { prefetch: false }),
            ..common::config(BUDGET)
        },
        Box::new(LocalStore::new(PAGES as u64)),
        Box::new(AllApp),
    );
    let value = |p: usize| 0x5eed_0000_0000 + p as u64;
    for p in 0..PAGES {
        region.write(p, 7, value(p));
    }
    pager.settle();
    let remote = || {
        pager.counters().faults[ThreadClass::Application as usize][FaultKind::Remote as usize]
            .load(std::sync::atomic::Ordering::SeqCst)
    };
    // Pages 64..192 wholly, and the first bytes of page 192.
    let (lo, hi) = (64, 192);
    let dropped = pager.release(region.base + lo * PAGE_SIZE, (hi - lo) * PAGE_SIZE + 100);
    assert_eq!(dropped, hi - lo, "every page wholly inside is dropped");
    assert!(pager.resident_pages() <= BUDGET);
    let before = remote();
    for p in lo..hi {
        assert_eq!(
            region.read(p, 7),
            0,
            "released page {p} reads back as zeros"
        );
    }
    assert_eq!(
        remote(),
        before,
        "released pages are zero-filled, never fetched"
    );
    for p in (0..lo).chain(hi..PAGES) {
        assert_eq!(region.read(p, 7), value(p), "page {p} outside the range");
    }
    let c = pager.counters();
    assert_eq!(
        c.pages_released.load(std::sync::atomic::Ordering::SeqCst),
        (hi - lo) as u64
    );
    assert!(
        c.released_remote.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "with {BUDGET} of {PAGES} pages local, most released pages were only in the store"
    );
    // Outside the region, or less than a page: nothing.
    assert_eq!(pager.release(0x1000, PAGE_SIZE), 0);
    assert_eq!(pager.release(region.base + 8, PAGE_SIZE), 0);
}
