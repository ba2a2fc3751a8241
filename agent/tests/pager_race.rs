//! The pager on a plain mmap region, without a JVM: many threads write while the pager evicts
//! at a tiny budget; every byte read back must be the last byte written.

// Tests map regions and read the pager's residency map raw.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use memliner_agent::pager::{Pager, PagerConfig, Replacement, Window};
use swap_backend::{LocalStore, PageStore, PAGE_SIZE};

mod common;
use common::{start_pager, AllApp, Region};

fn start(region: &Region, budget: usize, handlers: usize, store: Box<dyn PageStore>) -> Pager {
    start_with(region, budget, handlers, store, true)
}

fn start_with(
    region: &Region,
    budget: usize,
    handlers: usize,
    store: Box<dyn PageStore>,
    track_dirty: bool,
) -> Pager {
    start_holding(region, budget, handlers, store, track_dirty, true)
}

fn start_holding(
    region: &Region,
    budget: usize,
    handlers: usize,
    store: Box<dyn PageStore>,
    track_dirty: bool,
    hold_in_pipe: bool,
) -> Pager {
    start_pager(
        region,
        PagerConfig {
            handlers,
            fill_ahead: 3,
            track_dirty,
            hold_in_pipe,
            // The riskier path: pages unmapped for sampling while they are written.
            ..common::config(budget)
        },
        store,
        Box::new(AllApp),
    )
}

/// Each thread owns a disjoint set of u64 slots spread over all pages and writes a counter
/// into them round after round, checking that every slot still holds what it wrote last.
fn hammer(region: &Region, threads: usize, rounds: u64) {
    let slots_per_page = PAGE_SIZE / 8;
    let npages = region.pages;
    let failed = Arc::new(AtomicBool::new(false));
    std::thread::scope(|sc| {
        for t in 0..threads {
            let failed = failed.clone();
            let base = region.base;
            sc.spawn(move || {
                let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ t as u64;
                let mut last = vec![0u64; npages];
                for round in 1..=rounds {
                    for k in 0..npages {
                        // Visit pages in a thread-specific pseudo-random order.
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        let p = (seed as usize) % npages;
                        let slot = (base + p * PAGE_SIZE + (t % slots_per_page) * 8) as *mut u64;
                        // SAFETY: the slot is inside the region and owned by thread t alone.
                        let seen = unsafe { std::ptr::read_volatile(slot) };
                        if seen != last[p] {
                            eprintln!(
                                "thread {t} page {p}: read {seen:#x}, last wrote {:#x}",
                                last[p]
                            );
                            failed.store(true, Ordering::SeqCst);
                            return;
                        }
                        let v = (t as u64) << 48 | round << 24 | k as u64;
                        // SAFETY: as above.
                        unsafe { std::ptr::write_volatile(slot, v) };
                        last[p] = v;
                    }
                }
            });
        }
    });
    assert!(
        !failed.load(Ordering::SeqCst),
        "a write was lost under eviction"
    );
}

#[test]
fn writes_survive_eviction_at_a_tiny_budget() {
    let region = Region::new(256);
    let pager = start(&region, 16, 1, Box::new(LocalStore::new(1 << 20)));
    hammer(&region, 8, 6);
    let c = pager.counters();
    assert!(
        c.evicted_dirty.load(Ordering::SeqCst) > 100,
        "the test must evict dirty pages"
    );
    assert!(
        c.pages_read.load(Ordering::SeqCst) > 100,
        "the test must fetch pages back"
    );
    assert!(
        pager.peak_resident_pages() <= 16 + 3 + 1,
        "peak {} over budget",
        pager.peak_resident_pages()
    );
    assert!(pager.mincore_resident_pages() <= 16 + 3 + 1);
    // Deactivated the cheap way: each batch held in a pipe across its one discard.
    let r = pager.reclaim_counters();
    assert!(r.deactivated_in_pipe.load(Ordering::SeqCst) > 100);
    assert_eq!(r.deactivation_write_protects.load(Ordering::SeqCst), 0);
}

/// With the sampling window closed (adaptive, at its start: none), a page only read since it
/// came in is evicted at once when the reclaimer chooses it: no slot, no write-back; its bytes
/// come back from the store.
#[test]
fn clean_pages_are_dropped_at_once_while_the_window_is_closed() {
    let region = Region::new(128);
    let pager = start_pager(
        &region,
        PagerConfig {
            handlers: 1,
            fill_ahead: 3,
            window: Window::Adaptive,
            ..common::config(16)
        },
        Box::new(LocalStore::new(1 << 20)),
        Box::new(AllApp),
    );
    let value = |p: usize, round: u64| (p as u64) << 8 | round;
    for p in 0..128 {
        region.write(p, 0, value(p, 1));
    }
    let c = pager.counters();
    let r = pager.reclaim_counters();
    let written = c.pages_written.load(Ordering::SeqCst);
    let dropped = r.dropped_unsampled.load(Ordering::SeqCst);
    for _ in 0..3 {
        for p in 0..128 {
            assert_eq!(region.read(p, 0), value(p, 1), "page {p}");
        }
    }
    assert!(
        r.dropped_unsampled.load(Ordering::SeqCst) - dropped >= 200,
        "pages read back and chosen again were not dropped at once ({} then {})",
        dropped,
        r.dropped_unsampled.load(Ordering::SeqCst)
    );
    // Only the pages still dirty from the writes (at most the budget) were written back.
    assert!(
        c.pages_written.load(Ordering::SeqCst) - written <= 16,
        "pages only read were written back ({} then {})",
        written,
        c.pages_written.load(Ordering::SeqCst)
    );
    // Written again, they are dirty: deactivated into slots and written back as before.
    let in_pipe = r.deactivated_in_pipe.load(Ordering::SeqCst);
    for p in 0..128 {
        region.write(p, 0, value(p, 2));
    }
    for p in 0..128 {
        assert_eq!(region.read(p, 0), value(p, 2), "page {p}");
    }
    assert!(r.deactivated_in_pipe.load(Ordering::SeqCst) > in_pipe);
    assert!(c.pages_written.load(Ordering::SeqCst) > written);
}

/// The way a kernel that refuses pipes (or a heap that forks could share) is evicted: every
/// run of dirty victims write-protected before it is copied.
#[test]
fn writes_survive_eviction_when_each_run_is_write_protected() {
    let region = Region::new(256);
    let pager = start_holding(
        &region,
        16,
        1,
        Box::new(LocalStore::new(1 << 20)),
        true,
        false,
    );
    hammer(&region, 8, 4);
    let r = pager.reclaim_counters();
    assert!(pager.counters().evicted_dirty.load(Ordering::SeqCst) > 100);
    assert!(r.deactivation_write_protects.load(Ordering::SeqCst) > 100);
    assert_eq!(r.deactivated_in_pipe.load(Ordering::SeqCst), 0);
}

/// Pages the process touched before the pager took the region over may be mapped shared (a
/// read maps the zero page), so they are write-protected, not held in a pipe, until the
/// pager has installed them itself; and the region is kept from forked children.
#[test]
fn pages_touched_before_registration_are_write_protected_for_eviction() {
    let region = Region::new(64);
    for p in 0..32 {
        region.write(p, 0, p as u64 + 1);
    }
    for p in 32..64 {
        assert_eq!(region.read(p, 0), 0); // the zero page, mapped read-only
    }
    let pager = start(&region, 16, 1, Box::new(LocalStore::new(1 << 20)));
    pager.settle();
    let r = pager.reclaim_counters();
    assert!(
        r.deactivation_write_protects.load(Ordering::SeqCst) > 0,
        "adopted pages were not write-protected"
    );
    assert_eq!(r.deactivated_in_pipe.load(Ordering::SeqCst), 0);
    for p in 0..64 {
        region.write(p, 1, 1000 + p as u64);
    }
    for p in 0..64 {
        let first = if p < 32 { p as u64 + 1 } else { 0 };
        assert_eq!(region.read(p, 0), first, "page {p}");
        assert_eq!(region.read(p, 1), 1000 + p as u64, "page {p}");
    }
    // Installed by the pager since, they go through pipes.
    assert!(r.deactivated_in_pipe.load(Ordering::SeqCst) > 0);
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let flags = smaps
        .split("\n")
        .skip_while(|l| !l.starts_with(&format!("{:x}-", region.base)))
        .find(|l| l.starts_with("VmFlags:"))
        .expect("the region in smaps");
    assert!(flags.contains(" dc"), "not kept from forks: {flags}");
}

/// Threads add to words they all share (locked read-modify-writes, as a GC's CAS on a header
/// or a forwarding pointer) at random pages while the pager evicts: no increment may be lost,
/// whatever the page was doing (missing, write-protected, being deactivated) when it came.
#[test]
fn shared_atomic_increments_survive_eviction() {
    use std::sync::atomic::AtomicU64;
    for sampling in [false, true] {
        let region = Region::new(256);
        let _pager = start_pager(
            &region,
            PagerConfig {
                fill_ahead: 3,
                replacement: if sampling {
                    Replacement::Lru
                } else {
                    Replacement::Fifo
                },
                ..common::config(24)
            },
            Box::new(LocalStore::new(1 << 20)),
            Box::new(AllApp),
        );
        const THREADS: u64 = 4;
        const ADDS: u64 = 20_000;
        std::thread::scope(|sc| {
            for t in 0..THREADS {
                let region = &region;
                sc.spawn(move || {
                    let mut seed = 0x2545_f491_4f6c_dd1du64 ^ (t + 1);
                    for _ in 0..ADDS {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        let p = (seed as usize) % region.pages;
                        // SAFETY: an aligned word inside the region, only accessed atomically.
                        let w = unsafe { &*(region.word(p, 1) as *const AtomicU64) };
                        w.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        let sum: u64 = (0..region.pages).map(|p| region.read(p, 1)).sum();
        assert_eq!(sum, THREADS * ADDS, "sampling={sampling}: increments lost");
    }
}

#[test]
fn writes_survive_with_several_handler_threads() {
    let region = Region::new(128);
    let pager = start(&region, 24, 3, Box::new(LocalStore::new(1 << 20)));
    hammer(&region, 6, 5);
    assert!(pager.counters().evicted_dirty.load(Ordering::SeqCst) > 50);
}

#[test]
fn writes_survive_without_dirty_tracking_and_nothing_drops_clean() {
    let region = Region::new(128);
    let pager = start_with(&region, 16, 1, Box::new(LocalStore::new(1 << 20)), false);
    hammer(&region, 4, 4);
    let c = pager.counters();
    assert!(c.evicted_dirty.load(Ordering::SeqCst) > 50);
    assert_eq!(c.evicted_clean.load(Ordering::SeqCst), 0);
    let write_faults: u64 = c.faults.iter().map(|k| k[2].load(Ordering::SeqCst)).sum();
    assert_eq!(write_faults, 0, "no page is mapped write-protected");
}

#[test]
fn read_only_pages_are_dropped_clean_and_zero_pages_cost_no_store_space() {
    let region = Region::new(64);
    let store = Arc::new(LocalStore::new(1 << 20));
    struct Shared(Arc<LocalStore>);
    impl PageStore for Shared {
        fn read_pages(&self, ids: &[u64], out: &mut [u8]) -> Result<(), swap_backend::StoreError> {
            self.0.read_pages(ids, out)
        }
        fn write_pages(&self, ids: &[u64], data: &[u8]) -> Result<(), swap_backend::StoreError> {
            self.0.write_pages(ids, data)
        }
        fn free_pages(&self, ids: &[u64]) -> Result<(), swap_backend::StoreError> {
            self.0.free_pages(ids)
        }
        fn describe(&self) -> String {
            self.0.describe()
        }
    }
    let pager = start(&region, 8, 1, Box::new(Shared(store.clone())));
    let page = |p: usize| (region.base + p * PAGE_SIZE) as *mut u8;
    // Write a marker into every page, then zero half of them again.
    for p in 0..64 {
        // SAFETY: inside the region.
        unsafe { *page(p) = p as u8 + 1 };
    }
    for p in (0..64).step_by(2) {
        // SAFETY: inside the region.
        unsafe { *page(p) = 0 };
    }
    // Read everything twice: the second pass evicts pages that were only read.
    for _ in 0..2 {
        for p in 0..64 {
            // SAFETY: inside the region.
            let v = unsafe { std::ptr::read_volatile(page(p)) };
            assert_eq!(v, if p % 2 == 0 { 0 } else { p as u8 + 1 }, "page {p}");
        }
    }
    let c = pager.counters();
    assert!(
        c.evicted_clean.load(Ordering::SeqCst) > 0,
        "read-only pages must drop clean"
    );
    assert!(c.evicted_zero.load(Ordering::SeqCst) > 0);
    // Only the non-zero pages need store space once evicted: a zero page's copy is freed
    // when it is evicted. A page zeroed after an earlier eviction and still local (at most
    // the budget's 8) keeps its older copy until then.
    assert!(store.len() <= 32 + 8, "store holds {} pages", store.len());
}

/// A store whose reads fail as `on_read` says; writes and frees succeed.
struct FailingReads {
    name: &'static str,
    on_read: fn(&'static str) -> Result<(), swap_backend::StoreError>,
}

impl PageStore for FailingReads {
    fn read_pages(&self, _: &[u64], _: &mut [u8]) -> Result<(), swap_backend::StoreError> {
        (self.on_read)(self.name)
    }
    fn write_pages(&self, _: &[u64], _: &[u8]) -> Result<(), swap_backend::StoreError> {
        Ok(())
    }
    fn free_pages(&self, _: &[u64]) -> Result<(), swap_backend::StoreError> {
        Ok(())
    }
    fn describe(&self) -> String {
        self.name.into()
    }
}

/// Runs test `test` again in a child process, where 32 written pages are evicted at a 4-page
/// budget and read back through `store`: the pager must stop the child rather than serve
/// wrong bytes (or hang). Returns the child's stderr.
fn refetch_in_child(test: &str, store: FailingReads) -> String {
    if std::env::var("PAGER_CHILD").is_ok() {
        let region = Region::new(32);
        let _pager = start(&region, 4, 1, Box::new(store));
        for p in 0..32 {
            // SAFETY: inside the region.
            unsafe { *((region.base + p * PAGE_SIZE) as *mut u8) = 7 };
        }
        for p in 0..32 {
            // SAFETY: inside the region.
            let v = unsafe { std::ptr::read_volatile((region.base + p * PAGE_SIZE) as *const u8) };
            assert_eq!(v, 7);
        }
        std::process::exit(0);
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture"])
        .env("PAGER_CHILD", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "child must not succeed; stderr: {err}"
    );
    err
}

#[test]
fn a_broken_store_stops_the_process_with_the_page_and_server_named() {
    let err = refetch_in_child(
        "a_broken_store_stops_the_process_with_the_page_and_server_named",
        FailingReads {
            name: "tcp://10.9.9.9:7070",
            on_read: |name| {
                Err(swap_backend::StoreError::Io {
                    store: name.into(),
                    error: std::io::ErrorKind::ConnectionReset.into(),
                })
            },
        },
    );
    assert!(err.contains("cannot fetch heap page"), "{err}");
    assert!(err.contains("tcp://10.9.9.9:7070"), "{err}");
}

#[test]
fn a_panicking_handler_stops_the_process_instead_of_hanging_it() {
    let err = refetch_in_child(
        "a_panicking_handler_stops_the_process_instead_of_hanging_it",
        FailingReads {
            name: "panics",
            on_read: |_| panic!("store bug"),
        },
    );
    // Named as the handler thread's or (faults=signal) the faulting thread's crash.
    assert!(
        err.contains("fault handler 0 crashed: store bug")
            || (err.contains("serving the fault at 0x") && err.contains("crashed: store bug")),
        "{err}"
    );
}
