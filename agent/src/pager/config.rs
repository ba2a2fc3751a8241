//! How a pager runs: the configuration the agent derives from its options.

use std::sync::Arc;
use std::time::Duration;

use crate::model::FaultDelivery;
use crate::policy::PagingPolicy;

pub use memliner_contracts::model::Replacement;

/// How long the sampling window (the inactive list of unmapped pages) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// Sized by its measured costs and savings (`reclaim::sizing`), from none at all.
    Adaptive,
    /// Always this many pages (tests that need pages sampled).
    Fixed(usize),
}

/// How the pager runs.
#[derive(Clone, Debug)]
pub struct PagerConfig {
    /// Most pages local at once (mapped, inactive or prefetch markers).
    pub budget_pages: usize,
    /// How faults are delivered (signal falls back to thread where the kernel or the
    /// architecture cannot).
    pub delivery: FaultDelivery,
    /// Fault-handler threads (with signal delivery one, for events only).
    pub handlers: usize,
    /// Untouched pages zero-filled behind a first-touch write (allocation runs forward); at
    /// most 31 (`ZERO_RUN_PAGES` less the faulting page).
    pub fill_ahead: usize,
    /// Pages per reclaim batch (deactivation, write-back).
    pub evict_batch: usize,
    /// Map pages write-protected after a read fault, so that a page that was only read is
    /// dropped at eviction without a write-back (one extra fault at its first write). Off:
    /// every evicted page that is not all zeros is written back.
    pub track_dirty: bool,
    /// Deactivation holds its victims in a pipe across their discard, one TLB shootdown a
    /// batch (`splice`), where the kernel allows; off: each run of dirty victims is
    /// write-protected (one shootdown each) and copied before the discard.
    pub hold_in_pipe: bool,
    /// How victims are chosen.
    pub replacement: Replacement,
    /// The sampling window under `Replacement::Lru`.
    pub window: Window,
    /// Which streams faults train, where pages are admitted, which pages are tracked.
    pub policy: Arc<dyn PagingPolicy>,
    /// Largest prefetch window in pages; 0 turns prefetching off.
    pub prefetch_depth: usize,
    /// Prefetch worker threads.
    pub prefetch_workers: usize,
    /// Interval of the latency probe; `None` turns it off.
    pub probe_every: Option<Duration>,
}

impl Default for PagerConfig {
    fn default() -> Self {
        PagerConfig {
            budget_pages: 1024,
            delivery: FaultDelivery::Thread,
            handlers: 1,
            fill_ahead: 31,
            evict_batch: 64,
            track_dirty: true,
            hold_in_pipe: true,
            replacement: Replacement::Lru,
            window: Window::Adaptive,
            policy: Arc::new(crate::policy::Baseline { prefetch: true }),
            prefetch_depth: 32,
            prefetch_workers: 1,
            probe_every: None,
        }
    }
}

/// Called when a page cannot be served correctly; must not return (the agent exits the JVM).
pub type FatalFn = fn(&str) -> !;
