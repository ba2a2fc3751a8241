//! The pager's parts, wired together: what every thread of the pager (and a thread serving its
//! own fault) holds. Each part owns its state; this only bundles references to them.

use std::sync::Arc;

use super::attribution::Attribution;
use super::context::Ctx;
use super::page_table::budget::Budget;
use super::pause_reads::{PauseReads, Using};
use super::phases::Phases;
use super::prefetch_io::Prefetcher;
use super::reclaim::Reclaimer;

pub(super) struct Parts {
    pub ctx: Arc<Ctx>,
    pub budget: Arc<Budget>,
    pub phases: Arc<Phases>,
    /// GC threads' remote faults by the collector's activity.
    pub attribution: Arc<Attribution>,
    /// A pause's pages read in bulk.
    pub pause_reads: PauseReads,
    pub reclaim: Arc<Reclaimer>,
    /// `None` when prefetching is off.
    pub prefetch: Option<Arc<Prefetcher>>,
}

impl Parts {
    /// What a pause's reads use of these parts.
    pub fn for_pause_reads(&self) -> Using<'_> {
        Using {
            ctx: &self.ctx,
            attribution: &self.attribution,
            reclaim: &self.reclaim,
            prefetch: self.prefetch.as_deref(),
        }
    }
}
