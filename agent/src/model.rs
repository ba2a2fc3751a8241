//! The pager's view of threads: how it asks which class a faulting thread belongs to. The
//! classes and fault kinds themselves are the stats document's vocabulary and live in the
//! contracts crate (`memliner_contracts::model`), re-exported here.

pub use memliner_contracts::model::{Discovery, FaultDelivery, FaultKind, ThreadClass};

use crate::gc_activity::GcActivity;

/// Tells the pager which class a faulting thread belongs to.
pub trait ThreadClassifier: Send + Sync {
    /// Called on the fault path for threads not yet cached; may be slow (reads /proc).
    fn kind_of(&self, tid: u32) -> ThreadKind;
    /// Whether a stop-the-world GC pause is in progress (decides `GcWorker` and `VmThread`
    /// faults).
    fn in_gc_pause(&self) -> bool {
        false
    }
    /// Whether G1 is between a remark and its cleanup: its marking threads rebuild
    /// remembered sets (decides `ConcurrentMark` faults where the JVM reports no path).
    fn rebuilding_remsets(&self) -> bool {
        false
    }
}

/// A thread's role as far as can be told once and cached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadKind {
    Fixed(ThreadClass),
    /// A GC worker that runs both inside pauses and concurrently (Shenandoah, G1 workers).
    GcWorker,
    /// HotSpot's VM thread: it runs every safepoint operation, and with them whatever part of
    /// a collection the collector leaves to it, all of Serial's (young and full): in a GC
    /// pause, GC work.
    VmThread,
    /// A concurrent GC thread, and what it does (its name says).
    GcConcurrent(GcActivity),
    /// Not known yet (a Java thread may not have announced itself): ask again next time.
    Unknown,
}
