//! The reclaimer and the reference sampler on a plain mmap region (no JVM): the budget holds
//! while faults and background reclaim race, no write is lost while pages are unmapped for
//! sampling, direct reclaim is counted, and a hot set that fits survives a cold scan that
//! plain FIFO replacement would let evict it.

// Tests map regions and read the pager's residency map raw.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use memliner_agent::model::{FaultKind, ThreadClass};
use memliner_agent::pager::{Pager, PagerConfig, Replacement, Window};
use memliner_agent::policy::Baseline;
use swap_backend::{LocalStore, PageStore, StoreError, PAGE_SIZE};

mod common;
use common::{start_pager, AllApp, Region};

const FILL_AHEAD: usize = 3;

fn start(region: &Region, budget: usize, sampling: bool, store: Box<dyn PageStore>) -> Pager {
    start_with(region, budget, sampling, 1, store)
}

fn start_with(
    region: &Region,
    budget: usize,
    sampling: bool,
    handlers: usize,
    store: Box<dyn PageStore>,
) -> Pager {
    start_pager(
        region,
        PagerConfig {
            handlers,
            fill_ahead: FILL_AHEAD,
            replacement: if sampling {
                Replacement::Lru
            } else {
                Replacement::Fifo
            },
            prefetch_depth: 0,
            policy: Arc::new(Baseline { prefetch: false }),
            ..common::config(budget)
        },
        store,
        Box::new(AllApp),
    )
}

fn remote_faults(p: &Pager) -> u64 {
    p.counters().faults[ThreadClass::Application as usize][FaultKind::Remote as usize]
        .load(Ordering::SeqCst)
}

/// `threads` writers, each owning one u64 of every page, write a counter into random pages
/// and check that each still holds what they wrote last; returns when all are done.
fn write_and_check(region: &Region, threads: usize, steps: usize) {
    let failed = AtomicBool::new(false);
    std::thread::scope(|sc| {
        for t in 0..threads {
            let failed = &failed;
            sc.spawn(move || {
                let mut last = vec![0u64; region.pages];
                let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (t as u64 + 1);
                for step in 1..=steps as u64 {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let p = seed as usize % region.pages;
                    let seen = region.read(p, t);
                    if seen != last[p] {
                        eprintln!("thread {t} page {p}: read {seen:#x}, wrote {:#x}", last[p]);
                        failed.store(true, Ordering::SeqCst);
                        return;
                    }
                    let v = (t as u64) << 48 | step;
                    region.write(p, t, v);
                    last[p] = v;
                }
                // Everything once more, in order.
                for (p, want) in last.iter().enumerate() {
                    if region.read(p, t) != *want {
                        eprintln!("thread {t} page {p}: lost a write at the end");
                        failed.store(true, Ordering::SeqCst);
                    }
                }
            });
        }
    });
    assert!(!failed.load(Ordering::SeqCst), "a write was lost");
}

#[test]
fn the_budget_holds_while_faults_and_reclaim_race() {
    const BUDGET: usize = 64;
    let region = Region::new(512);
    let pager = start(&region, BUDGET, true, Box::new(LocalStore::new(1 << 20)));
    // Sampled from another thread while four writers fault and the reclaimer runs.
    let peak = AtomicUsize::new(0);
    let peak_mincore = AtomicUsize::new(0);
    let done = AtomicBool::new(false);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                peak.fetch_max(pager.resident_pages(), Ordering::SeqCst);
                peak_mincore.fetch_max(pager.mincore_resident_pages(), Ordering::SeqCst);
                std::thread::yield_now();
            }
        });
        write_and_check(&region, 4, 20_000);
        done.store(true, Ordering::SeqCst);
    });
    // The documented slack: each handler may hold one fault's claims (the page and its
    // fill-ahead) charged while it reclaims.
    let slack = 1 + FILL_AHEAD;
    let (peak, peak_mincore) = (peak.into_inner(), peak_mincore.into_inner());
    assert!(
        peak <= BUDGET + slack,
        "charged {peak} > {BUDGET} + {slack}"
    );
    assert!(
        pager.peak_resident_pages() <= BUDGET + slack,
        "peak {}",
        pager.peak_resident_pages()
    );
    // Mapped heap pages are a part of the charged ones (inactive pages live in slots).
    assert!(peak_mincore <= BUDGET + slack, "mincore saw {peak_mincore}");
    let r = pager.reclaim_counters();
    assert!(r.deactivated.load(Ordering::SeqCst) > 0);
    assert!(
        r.background_evicted.load(Ordering::SeqCst) > 0,
        "the reclaimer evicted nothing"
    );
}

#[test]
fn no_write_is_lost_while_pages_are_unmapped_for_sampling() {
    // A budget near the region's size keeps most pages inactive rather than remote: the
    // writes race deactivation and reactivation, not only eviction.
    let region = Region::new(160);
    let store = LocalStore::new(1 << 20);
    let pager = start(&region, 128, true, Box::new(store));
    write_and_check(&region, 4, 40_000);
    let reactivated = pager.reclaim_counters().reactivated.load(Ordering::SeqCst);
    let local_faults = pager.counters().faults[ThreadClass::Application as usize]
        [FaultKind::Reactivate as usize]
        .load(Ordering::SeqCst);
    assert!(reactivated > 100, "only {reactivated} reactivations");
    assert_eq!(reactivated, local_faults);
}

/// A store whose writes take a while, as a slow or distant server's do.
struct SlowWrites(LocalStore, Duration);
impl PageStore for SlowWrites {
    fn read_pages(&self, ids: &[u64], out: &mut [u8]) -> Result<(), StoreError> {
        self.0.read_pages(ids, out)
    }
    fn write_pages(&self, ids: &[u64], data: &[u8]) -> Result<(), StoreError> {
        // The bytes are taken when the write is sent, applied when it arrives: a later
        // write of the same page overtaking this one lands first and is overwritten.
        let sent = data.to_vec();
        std::thread::sleep(self.1);
        self.0.write_pages(ids, &sent)
    }
    fn free_pages(&self, ids: &[u64]) -> Result<(), StoreError> {
        self.0.free_pages(ids)
    }
    fn describe(&self) -> String {
        "slow".into()
    }
}

#[test]
fn a_fault_that_finds_the_budget_full_reclaims_itself_and_is_counted() {
    // Writes fill fresh pages far faster than a slow store takes the write-backs: the
    // reclaimer's reserve runs out and faults must reclaim directly.
    let region = Region::new(1024);
    let pager = start(
        &region,
        64,
        false,
        Box::new(SlowWrites(
            LocalStore::new(1 << 20),
            Duration::from_millis(20),
        )),
    );
    for p in 0..region.pages {
        region.write(p, 0, p as u64 + 1);
    }
    // Read back, pages come in clean (write-protected) while the reclaimer thread waits on
    // the slow store: a fault that finds the budget full drops one of them rather than
    // write back a dirty page itself.
    for p in 0..region.pages {
        assert_eq!(region.read(p, 0), p as u64 + 1, "page {p}");
    }
    let r = pager.reclaim_counters();
    assert!(
        r.direct_reclaims.load(Ordering::SeqCst) > 0,
        "no direct reclaim counted"
    );
    assert!(
        r.direct_dropped.load(Ordering::SeqCst) > 0,
        "no direct reclaim dropped a clean page ({} direct reclaims)",
        r.direct_reclaims.load(Ordering::SeqCst)
    );
    assert!(
        pager.peak_resident_pages() <= 64,
        "peak {} overruns {} charged {} inactive {:?}",
        pager.peak_resident_pages(),
        pager
            .counters()
            .reclaim_found_all_in_flight
            .load(Ordering::SeqCst),
        pager.resident_pages(),
        pager.inactive_pages()
    );
}

/// An in-process store with the costs of a remote one where a test needs them:
/// - `read_cost`: the work each read takes (a network round trip), so that a remote fault
///   costs more than a local one, as the inactive list's sizing assumes it can measure (in
///   process, with faults served by signal, the two cost about the same and the list rightly
///   shrinks to its floor);
/// - `reclaim_write_delay`: background write-backs (the reclaimer's lane) are slow and other
///   writes are not, as when the reclaim connection is queued behind a large batch: a later
///   write of a page can overtake an earlier one.
struct ShapedStore {
    inner: LocalStore,
    read_cost: Duration,
    reclaim_write_delay: Duration,
}

impl ShapedStore {
    fn new(read_cost: Duration, reclaim_write_delay: Duration) -> Box<ShapedStore> {
        Box::new(ShapedStore {
            inner: LocalStore::new(1 << 20),
            read_cost,
            reclaim_write_delay,
        })
    }
}

impl PageStore for ShapedStore {
    fn read_pages(&self, ids: &[u64], out: &mut [u8]) -> Result<(), StoreError> {
        let t = std::time::Instant::now();
        while t.elapsed() < self.read_cost {
            std::hint::spin_loop();
        }
        self.inner.read_pages(ids, out)
    }
    fn write_pages(&self, ids: &[u64], data: &[u8]) -> Result<(), StoreError> {
        let sent = data.to_vec();
        if std::thread::current().name() == Some("memliner-reclaim") {
            std::thread::sleep(self.reclaim_write_delay);
        }
        self.inner.write_pages(ids, &sent)
    }
    fn free_pages(&self, ids: &[u64]) -> Result<(), StoreError> {
        self.inner.free_pages(ids)
    }
    fn describe(&self) -> String {
        "shaped".into()
    }
}

#[test]
fn no_write_is_lost_when_pages_are_taken_back_and_written_out_again_during_a_write_back() {
    // Pages written all the time at a small budget: the reclaimer's slow write-backs see
    // their pages taken back, written and evicted again by the handlers' direct reclaim.
    // The second write-back must not overtake the first.
    let region = Region::new(48);
    let pager = start_with(
        &region,
        32,
        true,
        2,
        ShapedStore::new(Duration::ZERO, Duration::from_millis(3)),
    );
    write_and_check(&region, 4, 20_000);
    let taken = pager
        .reclaim_counters()
        .reactivated_in_writeback
        .load(Ordering::SeqCst);
    assert!(taken > 0, "no page was taken back during its write-back");
}

/// Touches the hot set, then steps through a cold scan of pages never used again, touching
/// the whole hot set again after every scan page. Returns the remote faults on hot pages.
/// The budget leaves the hot set room beside the reserve (up to 32 free pages) and the
/// inactive list (at least 32): at 64 pages a 24-page hot set lived in the inactive list, and
/// on a loaded machine a reclaim burst that ran while the application waited for a core
/// evicted hot pages before their next touch (half the runs failed).
fn hot_set_through_a_scan(replacement: Replacement, window: Window) -> u64 {
    const HOT: usize = 64;
    const SCAN: usize = 1200;
    let region = Region::new(HOT + SCAN);
    let pager = start_pager(
        &region,
        PagerConfig {
            fill_ahead: FILL_AHEAD,
            replacement,
            window,
            prefetch_depth: 0,
            policy: Arc::new(Baseline { prefetch: false }),
            ..common::config(256)
        },
        ShapedStore::new(Duration::from_micros(20), Duration::ZERO),
        Box::new(AllApp),
    );
    // Write everything once so that every page lives remotely (the scan then fetches).
    for p in 0..region.pages {
        region.write(p, 0, p as u64 + 1);
    }
    for p in 0..HOT {
        assert_eq!(region.read(p, 0), p as u64 + 1);
    }
    let before = remote_faults(&pager);
    for s in HOT..HOT + SCAN {
        assert_eq!(region.read(s, 0), s as u64 + 1);
        for p in 0..HOT {
            assert_eq!(region.read(p, 0), p as u64 + 1);
        }
    }
    let hot_remote = (remote_faults(&pager) - before).saturating_sub(SCAN as u64);
    let r = pager.reclaim_counters();
    let d = pager.decisions();
    eprintln!(
        "{replacement:?} {window:?}: {hot_remote} hot pages refetched; deactivated {} reactivated {} workingset {} direct {} target {:?}",
        r.deactivated.load(Ordering::SeqCst),
        r.reactivated.load(Ordering::SeqCst),
        d.workingset_activations,
        r.direct_reclaims.load(Ordering::SeqCst),
        pager.inactive_pages()
    );
    hot_remote
}

#[test]
fn a_hot_set_that_fits_survives_a_cold_scan() {
    let fifo = hot_set_through_a_scan(Replacement::Fifo, Window::Adaptive);
    let sampled = hot_set_through_a_scan(Replacement::Lru, Window::Fixed(32));
    let workingset = hot_set_through_a_scan(Replacement::Lru, Window::Adaptive);
    // FIFO cannot see touches of mapped pages: the scan pushes the hot set out again and
    // again. Sampling sees them and keeps the hot set; working-set detection sees each hot
    // page come back soon after its eviction, once, and keeps it active from then on.
    assert!(fifo >= 150, "fifo refetched only {fifo} hot pages");
    assert!(
        sampled * 4 <= fifo,
        "sampling refetched {sampled}, fifo {fifo}"
    );
    assert!(
        workingset <= 64 + 16,
        "working-set detection refetched {workingset} hot pages (64 of them), fifo {fifo}"
    );
    assert!(
        workingset * 2 <= fifo,
        "working-set detection {workingset}, fifo {fifo}"
    );
}

/// Kilobytes of `[base, base + len)` that /proc/self/smaps reports locked.
fn locked_kb(base: usize, len: usize) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    let mut kb = 0;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ') {
            if let Some((s, e)) = range.split_once('-') {
                if let (Ok(s), Ok(e)) = (usize::from_str_radix(s, 16), usize::from_str_radix(e, 16))
                {
                    inside = s < base + len && e > base;
                    continue;
                }
            }
        }
        if let Some(v) = line.strip_prefix("Locked:") {
            if inside {
                kb += v
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap();
            }
        }
    }
    kb
}

/// Services pin their memory against swap (Cassandra calls `mlockall(MCL_CURRENT)` at start),
/// and a locked mapping refuses `MADV_DONTNEED`: the pager unlocks the heap and pages on, and
/// every byte written reads back.
#[test]
fn a_heap_the_program_locks_is_unlocked_and_paged_on() {
    const LOCKED: usize = 32;
    let region = Region::new(512);
    let pager = start(&region, 64, true, Box::new(LocalStore::new(1 << 20)));
    for p in 0..LOCKED {
        region.write(p, 100, p as u64 + 1);
    }
    // SAFETY: locks resident pages of our own mapping; contents and mapping are unchanged.
    let rc = unsafe { libc::mlock(region.base as *const _, LOCKED * PAGE_SIZE) };
    assert_eq!(rc, 0, "mlock: {}", std::io::Error::last_os_error());
    assert_eq!(
        locked_kb(region.base, region.len()),
        (LOCKED * PAGE_SIZE / 1024) as u64
    );
    write_and_check(&region, 2, 20_000);
    for p in 0..LOCKED {
        // The writers own slots 0 and 1: slot 100 still holds what was written before the lock.
        assert_eq!(region.read(p, 100), p as u64 + 1, "page {p}");
    }
    let r = pager.reclaim_counters();
    assert!(
        r.background_evicted.load(Ordering::SeqCst) > 0,
        "nothing was evicted"
    );
    assert_eq!(
        locked_kb(region.base, region.len()),
        0,
        "the region is still locked after paging"
    );
    assert!(pager.peak_resident_pages() <= 64 + 1 + FILL_AHEAD);
}

/// A fault never waits for the replacement lists (the reclaimer holds them a batch at a
/// time, and may be preempted holding them): the pages faults map meanwhile are placed on
/// them by their next holder, and leave as any other when the budget needs room.
#[test]
fn faults_complete_while_the_lists_are_held_and_their_pages_are_placed_after() {
    const BUDGET: usize = 64;
    const HELD: usize = 40; // below the low watermark's wake (56) and any direct reclaim
    let region = Region::new(4 * BUDGET);
    let pager = start(&region, BUDGET, false, Box::new(LocalStore::new(1 << 20)));
    let held = pager.hold_lists();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let region = &region;
        s.spawn(move || {
            for p in 0..HELD {
                region.write(p, 0, p as u64 + 1);
            }
            done.send(()).unwrap();
        });
        let seen = finished.recv_timeout(Duration::from_secs(30));
        drop(held);
        assert!(seen.is_ok(), "faults waited for the lists");
    });
    let deferred = pager
        .reclaim_counters()
        .deferred_list_changes
        .load(Ordering::SeqCst);
    assert!(deferred >= HELD as u64, "{deferred} admissions deferred");
    for p in HELD..region.pages {
        region.write(p, 0, p as u64 + 1);
    }
    // Placed on the lists, the first pages mapped are the first to go (FIFO); lost from them,
    // they would stay mapped for good.
    common::wait_until(
        || common::residency(&pager, HELD).iter().all(|&r| r == 1),
        || {
            format!(
                "pages mapped while the lists were held stay local: {:?}",
                common::residency(&pager, HELD)
            )
        },
    );
    for p in 0..region.pages {
        assert_eq!(region.read(p, 0), p as u64 + 1, "page {p}");
    }
    assert!(pager.peak_resident_pages() <= BUDGET);
}
