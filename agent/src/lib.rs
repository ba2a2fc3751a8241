//! memliner's JVMTI agent: pages the Java heap to far memory with userfaultfd.
//!
//! Data flows agent (JVMTI glue, options, heap discovery, thread classes, stats) -> pager
//! (userfaultfd fault service, budget, eviction) -> swap backend (page stores).
//!
//! The JVM meets the agent in `runtime` (`Agent_OnLoad`, the JVMTI callbacks) and, on a
//! GC-hook patched JVM, in `hooks`.

// The enums the pager and the collector's layout name in the stats document; the contracts
// crate's own are named there.
memliner_contracts::named!(pager::Role, gc_layout::Reason);

/// Every allocation of the agent counted, for the stats (see `memory`); in the `memliner`
/// command and the tests that link this crate it counts theirs, which nobody reads.
#[global_allocator]
static ALLOCATOR: memory::Counted = memory::Counted;

pub mod gc_activity;
pub mod gc_layout;
pub mod heap;
pub mod hooks;
pub mod jvmti;
mod logging;
pub mod maps;
pub mod mark_path;
pub mod memory;
pub mod model;
pub use memliner_contracts::options;
pub mod pager;
pub mod perfdata;
pub mod policy;
pub mod prefetch;
mod runtime;
pub mod stats;
pub mod threads;
pub use memliner_uffd as uffd;
pub mod vmstructs;
pub mod young;

pub use memliner_contracts::{host_name, FATAL_EXIT_CODE};
pub use runtime::fatal;
