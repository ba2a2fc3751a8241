//! Helpers shared by the pager tests that run without a JVM.
#![allow(dead_code)] // each test binary uses its own part

use memliner_agent::maps::Span;
use memliner_agent::model::{FaultDelivery, ThreadClass, ThreadClassifier, ThreadKind};
use memliner_agent::pager::{Pager, PagerConfig};
use swap_backend::{PageStore, PAGE_SIZE};

pub fn fatal(msg: &str) -> ! {
    eprintln!("pager test fatal: {msg}");
    std::process::abort()
}

/// Every thread is an application thread.
pub struct AllApp;
impl ThreadClassifier for AllApp {
    fn kind_of(&self, _tid: u32) -> ThreadKind {
        ThreadKind::Fixed(ThreadClass::Application)
    }
}

/// How the tests' pagers take faults: `MEMLINER_TEST_FAULTS=signal|thread` (the test script
/// runs these tests under both).
pub fn delivery() -> FaultDelivery {
    match std::env::var("MEMLINER_TEST_FAULTS").as_deref() {
        Ok("signal") => FaultDelivery::Signal,
        _ => FaultDelivery::Thread,
    }
}

/// The tests' pager: `budget_pages` resident, evictions in batches of 8 and, under
/// `reclaim=lru`, a sampling window of 32 pages whatever its measured worth (tests need pages
/// sampled); the rest as the agent runs it.
pub fn config(budget_pages: usize) -> PagerConfig {
    PagerConfig {
        budget_pages,
        evict_batch: 8,
        window: memliner_agent::pager::Window::Fixed(32),
        ..PagerConfig::default()
    }
}

/// Starts a pager over the whole region.
pub fn start_pager(
    region: &Region,
    mut config: PagerConfig,
    store: Box<dyn PageStore>,
    classifier: Box<dyn ThreadClassifier>,
) -> Pager {
    config.delivery = delivery();
    let pager = Pager::start(
        region.base,
        region.len(),
        &[Span {
            start: region.base,
            end: region.base + region.len(),
        }],
        config,
        store,
        classifier,
        fatal,
    )
    .unwrap();
    assert_eq!(pager.delivery(), delivery(), "fault delivery");
    pager
}

pub struct Region {
    pub base: usize,
    pub pages: usize,
}

impl Region {
    /// Bytes in the region.
    pub fn len(&self) -> usize {
        self.pages * PAGE_SIZE
    }

    pub fn new(pages: usize) -> Region {
        // SAFETY: fresh anonymous mapping owned by this test.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                pages * PAGE_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        Region {
            base: p as usize,
            pages,
        }
    }

    pub fn word(&self, page: usize, slot: usize) -> *mut u64 {
        assert!(page < self.pages && slot < PAGE_SIZE / 8);
        (self.base + page * PAGE_SIZE + slot * 8) as *mut u64
    }

    pub fn read(&self, page: usize, slot: usize) -> u64 {
        // SAFETY: inside the region.
        unsafe { std::ptr::read_volatile(self.word(page, slot)) }
    }

    pub fn write(&self, page: usize, slot: usize, v: u64) {
        // SAFETY: inside the region.
        unsafe { std::ptr::write_volatile(self.word(page, slot), v) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping after the pager is gone.
        unsafe { libc::munmap(self.base as *mut _, self.pages * PAGE_SIZE) };
    }
}

/// The pager's residency map: one byte per page, 1 = remote (a touch fetches it).
pub fn residency(pager: &Pager, pages: usize) -> &[u8] {
    // SAFETY: the residency map has one byte per page and lives as long as the pager.
    unsafe { std::slice::from_raw_parts(pager.residency_map(), pages) }
}

/// Waits until `done` holds (the pager's threads work in the background: a test waits for a
/// state, never for a time); fails with `what` after a minute.
pub fn wait_until(mut done: impl FnMut() -> bool, what: impl Fn() -> String) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{}", what());
        std::thread::yield_now();
    }
}
