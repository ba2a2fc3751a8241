//! The vocabulary the pager, the policies, the thread classifier and the stats share: who
//! faulted and how a fault was served. A leaf module: it imports nothing of the agent but the
//! collector's activities (`gc_activity`, itself a leaf).

use crate::gc_activity::GcActivity;

/// Who faulted, as the pager counts it; the stats document names it as `name` does.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    strum::EnumCount,
    strum::VariantArray,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[strum(serialize_all = "kebab-case")]
pub enum ThreadClass {
    /// Java threads.
    Application = 0,
    /// Stop-the-world GC workers.
    Gc = 1,
    /// Concurrent GC threads: markers, refinement, concurrent workers.
    GcConcurrent = 2,
    /// JIT compiler threads.
    Jit = 3,
    /// The VM thread and other VM-internal threads.
    Vm = 4,
    /// Anything else (native threads, threads not yet known, the agent's latency probe).
    Other = 5,
}

impl ThreadClass {
    pub const COUNT: usize = <ThreadClass as strum::EnumCount>::COUNT;
    pub const ALL: &'static [ThreadClass] = <ThreadClass as strum::VariantArray>::VARIANTS;

    /// The class `name` names (its stats name).
    pub fn from_name(name: &str) -> Option<ThreadClass> {
        name.parse().ok()
    }

    pub fn is_gc(self) -> bool {
        matches!(self, ThreadClass::Gc | ThreadClass::GcConcurrent)
    }
}

lowercase_enum! {
    /// How faults reach the code that serves them; the stats document names it as `name` does.
    pub enum FaultDelivery {
        /// As a SIGBUS to the faulting thread, which serves its own fault.
        Signal,
        /// As userfaultfd events, to fault-handler threads that wake the faulting thread.
        Thread,
    }
}

lowercase_enum! {
    /// How the heap was found: HotSpot's serviceability tables, or a guess from /proc/self/maps.
    pub enum Discovery {
        VmStructs,
        Maps,
    }
}

/// Tells the pager which class a faulting thread belongs to.
pub trait ThreadClassifier: Send + Sync {
    /// Called on the fault path for threads not yet cached; may be slow (reads /proc).
    fn kind_of(&self, tid: u32) -> ThreadKind;
    /// Whether a stop-the-world GC pause is in progress (decides `GcWorker` faults).
    fn in_gc_pause(&self) -> bool {
        false
    }
}

/// A thread's role as far as can be told once and cached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadKind {
    Fixed(ThreadClass),
    /// A GC worker that runs both inside pauses and concurrently (Shenandoah, G1 workers).
    GcWorker,
    /// A concurrent GC thread, and what it does (its name says).
    GcConcurrent(GcActivity),
    /// Not known yet (a Java thread may not have announced itself): ask again next time.
    Unknown,
}

/// Why a fault was served the way it was; the stats document names it as `name` does.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, strum::EnumCount, strum::VariantArray, strum::IntoStaticStr,
)]
#[strum(serialize_all = "snake_case")]
pub enum FaultKind {
    /// First touch: zero-filled locally, no network.
    Zero = 0,
    /// Fetched from the page store.
    Remote = 1,
    /// First write to a page mapped write-protected (dirtiness tracking).
    Write = 2,
    /// A duplicate or stale message: the page was already there.
    Stale = 3,
    /// Served from a prefetched marker page: no network.
    #[strum(serialize = "prefetch_hit")]
    Hit = 4,
    /// A touch of a page the reclaimer had unmapped to sample its use (its bytes were kept
    /// locally): mapped back, no network; the page is referenced.
    Reactivate = 5,
}

impl FaultKind {
    pub const COUNT: usize = <FaultKind as strum::EnumCount>::COUNT;
    pub const ALL: &'static [FaultKind] = <FaultKind as strum::VariantArray>::VARIANTS;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_stats_documents_and_tables_follow_the_discriminants() {
        let classes: Vec<&str> = ThreadClass::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(
            classes,
            ["application", "gc", "gc-concurrent", "jit", "vm", "other"]
        );
        let kinds: Vec<&str> = FaultKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(
            kinds,
            [
                "zero",
                "remote",
                "write",
                "stale",
                "prefetch_hit",
                "reactivate"
            ]
        );
        // Counters are arrays indexed by `as usize`.
        for (i, c) in ThreadClass::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
            assert_eq!(ThreadClass::from_name(c.name()), Some(*c));
        }
        for (i, k) in FaultKind::ALL.iter().enumerate() {
            assert_eq!(*k as usize, i);
        }
        assert_eq!(ThreadClass::from_name("gc_concurrent"), None);
        assert_eq!(
            (FaultDelivery::Signal.name(), Discovery::VmStructs.name()),
            ("signal", "vmstructs")
        );
    }
}
