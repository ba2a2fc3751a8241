//! Released ranges (a patched collector's freed regions) on a plain mmap region: every page
//! wholly inside is dropped wherever it was (mapped, inactive in a slot, or only in the store),
//! reads back as zeros without a remote fetch, and gives its budget back; pages outside, and a
//! page only partly inside, keep their bytes. A page whose write-back is in flight when its
//! range is released is dropped too, and stays dropped once the write lands. Mapped pages are
//! dropped only while the budget is short; with room to spare they stay as they are, and a
//! clean one is dropped when it is evicted rather than fetched back.

// Tests map regions and read the pager's residency map raw.
#![allow(unsafe_code)]

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};

use memliner_agent::model::{FaultKind, ThreadClass};
use memliner_agent::pager::PagerConfig;
use memliner_agent::policy::Baseline;
use swap_backend::{LocalStore, PageStore, StoreError, PAGE_SIZE};

mod common;
use common::{residency, start_pager, AllApp, Region};

const PAGES: usize = 256;
const BUDGET: usize = 32;

/// The tests' pager: `BUDGET` pages local, no fill-ahead, no prefetching.
fn start(region: &Region, store: Box<dyn PageStore>) -> memliner_agent::pager::Pager {
    start_with(region, store, BUDGET)
}

fn start_with(
    region: &Region,
    store: Box<dyn PageStore>,
    budget: usize,
) -> memliner_agent::pager::Pager {
    start_pager(
        region,
        PagerConfig {
            fill_ahead: 0,
            prefetch_depth: 0,
            policy: Arc::new(Baseline { prefetch: false }),
            ..common::config(budget)
        },
        store,
        Box::new(AllApp),
    )
}

/// Releases pages `lo..hi`; checks that none was dropped, that they kept their bytes and were
/// counted as left mapped.
fn release_leaves_mapped(
    pager: &memliner_agent::pager::Pager,
    region: &Region,
    (lo, hi): (usize, usize),
    value: impl Fn(usize) -> u64,
    why: &str,
) {
    let left = || pager.counters().released_left_mapped.load(Ordering::SeqCst);
    let before = left();
    let resident = pager.resident_pages();
    let dropped = pager.release(region.base + lo * PAGE_SIZE, (hi - lo) * PAGE_SIZE);
    assert_eq!(dropped, 0, "{why}: mapped pages are left mapped");
    assert_eq!(left() - before, (hi - lo) as u64, "{why}: counted");
    assert_eq!(pager.resident_pages(), resident, "{why}: still resident");
    for p in lo..hi {
        assert_eq!(
            region.read(p, 7),
            value(p),
            "{why}: page {p} kept its bytes"
        );
    }
}

#[test]
fn with_the_whole_region_local_released_pages_stay_mapped() {
    let region = Region::new(PAGES);
    let pager = start_with(&region, Box::new(LocalStore::new(PAGES as u64)), PAGES);
    let value = |p: usize| 0xfee1_0000 + p as u64;
    for p in 0..PAGES {
        region.write(p, 7, value(p));
    }
    release_leaves_mapped(&pager, &region, (16, 200), value, "budget = region");
    assert_eq!(pager.counters().pages_released.load(Ordering::SeqCst), 0);
}

#[test]
fn mapped_pages_are_dropped_only_while_the_budget_is_short() {
    let region = Region::new(PAGES);
    let pager = start(&region, Box::new(LocalStore::new(PAGES as u64)));
    let value = |p: usize| 0xab_0000 + p as u64;
    let release =
        |lo: usize, hi: usize| pager.release(region.base + lo * PAGE_SIZE, (hi - lo) * PAGE_SIZE);
    // A quarter of the budget used, nothing evicted yet: a heap still filling up, short.
    for p in 0..BUDGET / 4 {
        region.write(p, 7, value(p));
    }
    let resident = pager.resident_pages();
    assert_eq!(
        release(0, BUDGET / 4),
        BUDGET / 4,
        "before any eviction: every page dropped"
    );
    assert_eq!(
        pager.resident_pages() + BUDGET / 4,
        resident,
        "before any eviction"
    );
    // Every page written: pages were evicted since the last collection (none has ended), so
    // releasing the last ones written, mapped, gives their budget back.
    for p in 0..PAGES {
        region.write(p, 7, value(p));
    }
    pager.settle();
    let resident = pager.resident_pages();
    let (lo, hi) = (PAGES - BUDGET, PAGES);
    assert_eq!(
        release(lo, hi),
        hi - lo,
        "a short budget: every page dropped"
    );
    assert!(
        pager.resident_pages() + BUDGET / 2 <= resident,
        "the mapped ones gave their budget back: {} of {resident} still resident",
        pager.resident_pages()
    );
    // A collection ends with a quarter of the budget free and nothing evicted since: the next
    // release leaves the pages the JVM wrote meanwhile mapped.
    pager.gc_pause_finished(None, Default::default());
    for p in lo..lo + BUDGET / 4 {
        region.write(p, 7, value(p));
    }
    release_leaves_mapped(
        &pager,
        &region,
        (lo, lo + BUDGET / 4),
        value,
        "after a collection",
    );
    for p in lo + BUDGET / 4..hi {
        assert_eq!(region.read(p, 7), 0, "page {p} released while short");
    }
}

/// Left mapped with room to spare, a released page the JVM had only read (clean: its copy
/// current in the store) is dead all the same: pushed out unwritten, it reads back as zeros
/// without a fetch, never as the bytes the store still holds (a pause copying into a reused
/// region would fetch them only to overwrite them).
#[test]
fn a_clean_page_left_mapped_is_not_fetched_back_once_evicted() {
    let region = Region::new(PAGES);
    let pager = start(&region, Box::new(LocalStore::new(PAGES as u64)));
    let value = |p: usize| 0xc1ea_0000 + p as u64;
    let remote = || {
        pager.counters().faults[ThreadClass::Application as usize][FaultKind::Remote as usize]
            .load(Ordering::SeqCst)
    };
    for p in 0..PAGES {
        region.write(p, 7, value(p));
    }
    pager.settle();
    // Room made while short: the last pages written are dropped.
    let tail = PAGES - BUDGET / 2;
    pager.release(region.base + tail * PAGE_SIZE, (PAGES - tail) * PAGE_SIZE);
    // Read back from the store into that room (a run of pages only the store holds): mapped
    // clean.
    let n = BUDGET / 4;
    let lo = residency(&pager, PAGES)[..tail]
        .windows(n)
        .position(|w| w.iter().all(|&r| r == 1))
        .expect("a run of remote pages");
    let hi = lo + n;
    let before = remote();
    for p in lo..hi {
        assert_eq!(region.read(p, 7), value(p), "page {p}");
    }
    assert_eq!(remote() - before, (hi - lo) as u64, "each page fetched");
    // A collection ends with nothing evicted since: the budget has room to spare.
    pager.gc_pause_finished(None, Default::default());
    release_leaves_mapped(&pager, &region, (lo, hi), value, "read, then released");
    // Pushed out by other pages, unwritten since.
    for p in (0..lo).chain(hi..tail) {
        region.write(p, 7, 1);
    }
    pager.settle();
    let before = remote();
    for p in lo..hi {
        assert_eq!(
            region.read(p, 7),
            0,
            "released page {p}, evicted since, is zero-filled"
        );
    }
    assert_eq!(remote(), before, "no released page fetched back");
}

#[test]
fn released_pages_read_back_as_zeros_without_a_fetch_and_the_rest_keep_their_bytes() {
    let region = Region::new(PAGES);
    let pager = start(&region, Box::new(LocalStore::new(PAGES as u64)));
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

/// A store whose first write from the reclaimer, once armed, waits until the test opens the
/// gate; the pages it carries are in write-back meanwhile. (Other threads' writes, a fault's
/// direct reclaim among them, go through: the test's faults never wait on the gate.)
struct GatedWrites {
    store: LocalStore,
    gate: Mutex<Gate>,
    changed: Condvar,
}

#[derive(Default)]
struct Gate {
    armed: bool,
    held: Option<Vec<u64>>,
    open: bool,
    landed: bool,
}

impl GatedWrites {
    fn wait(&self, until: impl Fn(&Gate) -> bool) -> std::sync::MutexGuard<'_, Gate> {
        let mut g = self.gate.lock().unwrap();
        while !until(&g) {
            g = self.changed.wait(g).unwrap();
        }
        g
    }

    fn update(&self, f: impl FnOnce(&mut Gate)) {
        f(&mut self.gate.lock().unwrap());
        self.changed.notify_all();
    }
}

/// The pager's handle on the test's store.
struct Shared(Arc<GatedWrites>);

impl PageStore for Shared {
    fn read_pages(&self, ids: &[u64], out: &mut [u8]) -> Result<(), StoreError> {
        self.0.store.read_pages(ids, out)
    }
    fn write_pages(&self, ids: &[u64], data: &[u8]) -> Result<(), StoreError> {
        self.0.write_pages(ids, data)
    }
    fn free_pages(&self, ids: &[u64]) -> Result<(), StoreError> {
        self.0.store.free_pages(ids)
    }
    fn describe(&self) -> String {
        "gated".into()
    }
}

impl GatedWrites {
    fn write_pages(&self, ids: &[u64], data: &[u8]) -> Result<(), StoreError> {
        let hold = {
            let mut g = self.gate.lock().unwrap();
            let hold = g.armed
                && g.held.is_none()
                && std::thread::current().name() == Some("memliner-reclaim");
            if hold {
                g.held = Some(ids.to_vec());
            }
            hold
        };
        if !hold {
            return self.store.write_pages(ids, data);
        }
        self.changed.notify_all();
        drop(self.wait(|g| g.open));
        let r = self.store.write_pages(ids, data);
        self.update(|g| g.landed = true);
        r
    }
}

struct OpenOnDrop<'a>(&'a GatedWrites);
impl Drop for OpenOnDrop<'_> {
    fn drop(&mut self) {
        self.0.update(|g| g.open = true);
    }
}

#[test]
fn a_page_released_while_its_write_back_is_in_flight_stays_dropped() {
    let region = Region::new(PAGES);
    let store = Arc::new(GatedWrites {
        store: LocalStore::new(PAGES as u64),
        gate: Mutex::default(),
        changed: Condvar::new(),
    });
    let pager = start(&region, Box::new(Shared(store.clone())));
    // A failed assertion opens the gate on its way out: the held write-back must not keep
    // the pager from stopping.
    let _open = OpenOnDrop(&store);
    let remote = || {
        pager.counters().faults[ThreadClass::Application as usize][FaultKind::Remote as usize]
            .load(Ordering::SeqCst)
    };
    for p in 0..PAGES {
        region.write(p, 3, p as u64 + 1);
    }
    pager.settle();
    // Rewrite pages until the reclaimer's next write-back is held at the gate.
    store.update(|g| g.armed = true);
    let mut p = 0;
    let held = loop {
        if let Some(ids) = store.gate.lock().unwrap().held.clone() {
            break ids;
        }
        assert!(p < PAGES * 4, "no write-back started");
        region.write(p % PAGES, 3, 0xbad);
        p += 1;
    };
    for &id in &held {
        let at = region.base + id as usize * PAGE_SIZE;
        assert_eq!(
            pager.release(at, PAGE_SIZE),
            1,
            "page {id}, in write-back, is dropped"
        );
    }
    store.update(|g| g.open = true);
    drop(store.wait(|g| g.landed));
    let before = remote();
    for &id in &held {
        assert_eq!(region.read(id as usize, 3), 0, "released page {id}");
    }
    assert_eq!(
        remote(),
        before,
        "released pages are zero-filled, never fetched"
    );
    // Pushed out again (read only, or written), they still read back as zeros: the write that
    // landed after the release is no copy of theirs.
    for p in 0..PAGES {
        if !held.contains(&(p as u64)) {
            region.write(p, 5, 1);
        }
    }
    pager.settle();
    for &id in &held {
        assert_eq!(
            region.read(id as usize, 3),
            0,
            "released page {id}, evicted again"
        );
    }
}

/// [`start`] under the `memliner` policy (no prefetching, dirty pages always tracked), which
/// leaves freed young regions mapped write-protected.
fn start_memliner(region: &Region) -> memliner_agent::pager::Pager {
    start_pager(
        region,
        PagerConfig {
            fill_ahead: 0,
            prefetch_depth: 0,
            policy: Arc::new(memliner_agent::policy::MemLiner {
                prefetch: false,
                scope: memliner_agent::policy::StreamScope::Thread,
                adaptive_dirty: None,
            }),
            ..common::config(BUDGET)
        },
        Box::new(LocalStore::new(PAGES as u64)),
        Box::new(AllApp),
    )
}

/// The young regions of the pause under way: `[lo, hi)` pages of `region`.
fn young_pause(pager: &memliner_agent::pager::Pager, region: &Region, (lo, hi): (usize, usize)) {
    use memliner_agent::gc_activity::{RegionKind, RegionMap, RegionSpan};
    let young = RegionMap::new(vec![RegionSpan {
        start: region.base + lo * PAGE_SIZE,
        end: region.base + hi * PAGE_SIZE,
        kind: RegionKind::Young,
    }]);
    pager.gc_pause_started(young, false);
}

/// All faults of the application class so far.
fn app_faults(pager: &memliner_agent::pager::Pager) -> u64 {
    pager.counters().faults[ThreadClass::Application as usize]
        .iter()
        .map(|k| k.load(Ordering::SeqCst))
        .sum()
}

/// A freed young region (eden, which G1 hands out again next) is left mapped, its written
/// pages write-protected in the pause rather than discarded: reused, the first write unprotects
/// the run after it with it (one fault, the bytes the JVM writes kept); pushed out unwritten,
/// its pages are dropped without a write-back and read back as zeros, never fetched. Such pages
/// keep their place on the lists (see `release::Mapped::Protect`).
#[test]
fn a_freed_young_region_is_write_protected_reused_with_one_fault_and_evicted_unwritten() {
    let region = Region::new(PAGES);
    let pager = start_memliner(&region);
    let c = pager.counters();
    let (lo, hi) = (0, BUDGET / 4);
    // Eden filled: written pages, nothing evicted yet (the budget counts as short).
    for p in lo..hi {
        region.write(p, 7, 0xeded_0000 + p as u64);
    }
    let resident = pager.resident_pages();
    young_pause(&pager, &region, (lo, PAGES));
    let dropped = pager.release(region.base + lo * PAGE_SIZE, (hi - lo) * PAGE_SIZE);
    pager.gc_pause_finished(None, Default::default());
    assert_eq!(
        dropped, 0,
        "a young region's mapped pages are not discarded"
    );
    assert_eq!(
        c.released_protected.load(Ordering::SeqCst),
        (hi - lo) as u64
    );
    assert_eq!(
        c.released_left_mapped.load(Ordering::SeqCst),
        (hi - lo) as u64
    );
    assert_eq!(pager.resident_pages(), resident, "still resident");
    // Reused as eden: the first write faults once and unprotects the rest of the run.
    let faults = app_faults(&pager);
    let writes = || {
        c.faults[ThreadClass::Application as usize][FaultKind::Write as usize]
            .load(Ordering::SeqCst)
    };
    let written = writes();
    for p in lo..hi {
        region.write(p, 9, 0x0de0_0000 + p as u64);
    }
    // The handler counts a fault after it wakes the writer.
    common::wait_until(
        || writes() > written,
        || "the write fault is counted".into(),
    );
    assert_eq!(writes() - written, 1, "one write fault for the run");
    assert_eq!(app_faults(&pager) - faults, 1, "and no other fault");
    assert_eq!(
        c.unprotected_ahead.load(Ordering::SeqCst),
        (hi - lo - 1) as u64
    );
    for p in lo..hi {
        assert_eq!(region.read(p, 9), 0x0de0_0000 + p as u64, "page {p} reused");
    }
    // Freed again, then pushed out by other pages without being written since: no write-back,
    // zeros on the next touch, no fetch.
    young_pause(&pager, &region, (lo, PAGES));
    assert_eq!(
        pager.release(region.base + lo * PAGE_SIZE, (hi - lo) * PAGE_SIZE),
        0
    );
    pager.gc_pause_finished(None, Default::default());
    assert_eq!(
        c.released_protected.load(Ordering::SeqCst),
        2 * (hi - lo) as u64
    );
    let evicted_zero = c.evicted_zero.load(Ordering::SeqCst);
    let pages_written = c.pages_written.load(Ordering::SeqCst);
    let dropped = || c.evicted_zero.load(Ordering::SeqCst) - evicted_zero;
    // Two passes over the rest push out what probation holds. The page whose write reused
    // the region took a reference with it and may have been promoted: it keeps its place on
    // the active list (eden's pages are the hottest; with dead bytes it waits for its reuse).
    for _ in 0..2 {
        for p in hi..PAGES {
            region.write(p, 7, 0x0710_0000 + p as u64);
        }
        pager.settle();
    }
    assert!(
        dropped() >= (hi - lo - 1) as u64,
        "{} of the {} protected pages dropped after two passes over the rest",
        dropped(),
        hi - lo
    );
    assert!(
        c.pages_written.load(Ordering::SeqCst) - pages_written <= 2 * (PAGES - hi) as u64,
        "only the pages written since went to the store"
    );
    let remote = || {
        c.faults[ThreadClass::Application as usize][FaultKind::Remote as usize]
            .load(Ordering::SeqCst)
    };
    let before = remote();
    // Dropped ones read zeros; one left mapped still holds its dead bytes; none is fetched.
    let zeros = (lo..hi)
        .filter(|&p| {
            let v = region.read(p, 9);
            assert!(v == 0 || v == 0x0de0_0000 + p as u64, "page {p}: {v:#x}");
            v == 0
        })
        .count();
    assert!(
        zeros >= hi - lo - 1,
        "{zeros} of the {} pages read back as zeros",
        hi - lo
    );
    assert_eq!(remote(), before, "no dead page fetched back");
    for p in hi..PAGES {
        assert_eq!(region.read(p, 7), 0x0710_0000 + p as u64, "page {p}");
    }
}

/// Where the reclaimer turned the budget over faster than eden fills since the last collection
/// (more pages evicted than the young regions hold), a freed young region's pages are
/// discarded as any dead space: left mapped, they would hold budget the live pages need.
#[test]
fn a_freed_young_region_is_discarded_when_the_budget_turns_over_faster_than_eden() {
    let region = Region::new(PAGES);
    let pager = start_memliner(&region);
    let c = pager.counters();
    for p in 0..PAGES {
        region.write(p, 7, p as u64 + 1);
    }
    pager.settle();
    pager.gc_pause_finished(None, Default::default());
    // Every page again: far more evictions than the young regions' BUDGET / 4 pages.
    let evicted = c.evicted();
    for p in 0..PAGES {
        region.write(p, 7, p as u64 + 2);
    }
    pager.settle();
    let (lo, hi) = (PAGES - BUDGET / 4, PAGES);
    assert!(c.evicted() - evicted >= (hi - lo) as u64);
    young_pause(&pager, &region, (lo, hi));
    let dropped = pager.release(region.base + lo * PAGE_SIZE, (hi - lo) * PAGE_SIZE);
    pager.gc_pause_finished(None, Default::default());
    assert_eq!(dropped, hi - lo, "every page dropped");
    assert_eq!(c.released_protected.load(Ordering::SeqCst), 0);
    for p in lo..hi {
        assert_eq!(region.read(p, 7), 0, "page {p}");
    }
}

/// Under `baseline` (a pager that does not use the collector's knowledge) a freed young region
/// is dead space like any other: discarded while the budget is short.
#[test]
fn under_baseline_a_freed_young_region_is_discarded() {
    let region = Region::new(PAGES);
    let pager = start(&region, Box::new(LocalStore::new(PAGES as u64)));
    let (lo, hi) = (0, BUDGET / 4);
    for p in lo..hi {
        region.write(p, 7, p as u64 + 1);
    }
    young_pause(&pager, &region, (lo, PAGES));
    let dropped = pager.release(region.base + lo * PAGE_SIZE, (hi - lo) * PAGE_SIZE);
    pager.gc_pause_finished(None, Default::default());
    assert_eq!(dropped, hi - lo);
    assert_eq!(
        pager.counters().released_protected.load(Ordering::SeqCst),
        0
    );
}
