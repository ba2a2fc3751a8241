//! The vocabulary the pager, the policies, the thread classifier and the stats share: who
//! faulted and how a fault was served. A leaf module: it imports nothing of the agent.

/// Who faulted, as the pager counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
    pub const COUNT: usize = 6;
    pub const ALL: [ThreadClass; ThreadClass::COUNT] = [
        ThreadClass::Application,
        ThreadClass::Gc,
        ThreadClass::GcConcurrent,
        ThreadClass::Jit,
        ThreadClass::Vm,
        ThreadClass::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ThreadClass::Application => "application",
            ThreadClass::Gc => "gc",
            ThreadClass::GcConcurrent => "gc-concurrent",
            ThreadClass::Jit => "jit",
            ThreadClass::Vm => "vm",
            ThreadClass::Other => "other",
        }
    }

    /// The class `name` names (its stats name).
    pub fn from_name(name: &str) -> Option<ThreadClass> {
        ThreadClass::ALL.into_iter().find(|c| c.name() == name)
    }

    pub fn is_gc(self) -> bool {
        matches!(self, ThreadClass::Gc | ThreadClass::GcConcurrent)
    }
}

/// How faults reach the code that serves them; the stats document names it as `name` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultDelivery {
    /// As userfaultfd events, to fault-handler threads that wake the faulting thread.
    Thread,
    /// As a SIGBUS to the faulting thread, which serves its own fault.
    Signal,
}

impl FaultDelivery {
    pub fn name(self) -> &'static str {
        match self {
            FaultDelivery::Thread => "thread",
            FaultDelivery::Signal => "signal",
        }
    }
}

/// How the heap was found: HotSpot's serviceability tables, or a guess from /proc/self/maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Discovery {
    VmStructs,
    Maps,
}

impl Discovery {
    pub fn name(self) -> &'static str {
        match self {
            Discovery::VmStructs => "vmstructs",
            Discovery::Maps => "maps",
        }
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
    /// Not known yet (a Java thread may not have announced itself): ask again next time.
    Unknown,
}

/// Why a fault was served the way it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    Hit = 4,
    /// A touch of a page the reclaimer had unmapped to sample its use (its bytes were kept
    /// locally): mapped back, no network; the page is referenced.
    Reactivate = 5,
}

impl FaultKind {
    pub const COUNT: usize = 6;
    pub const ALL: [FaultKind; FaultKind::COUNT] = [
        FaultKind::Zero,
        FaultKind::Remote,
        FaultKind::Write,
        FaultKind::Stale,
        FaultKind::Hit,
        FaultKind::Reactivate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Zero => "zero",
            FaultKind::Remote => "remote",
            FaultKind::Write => "write",
            FaultKind::Stale => "stale",
            FaultKind::Hit => "prefetch_hit",
            FaultKind::Reactivate => "reactivate",
        }
    }
}
