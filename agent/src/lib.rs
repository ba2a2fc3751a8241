//! memliner's JVMTI agent: pages the Java heap to far memory with userfaultfd.
//!
//! Data flows agent (JVMTI glue, options, heap discovery, thread classes, stats) -> pager
//! (userfaultfd fault service, budget, eviction) -> swap backend (page stores).

#![deny(missing_debug_implementations)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod pager;
pub mod uffd;
