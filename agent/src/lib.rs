//! memliner's JVMTI agent: pages the Java heap to far memory with userfaultfd.
//!
//! Data flows agent (JVMTI glue, options, heap discovery, thread classes, stats) -> pager
//! (userfaultfd fault service, budget, eviction) -> swap backend (page stores).
//!
//! The JVM meets the agent in `runtime` (`Agent_OnLoad`, the JVMTI callbacks) and, on a
//! GC-hook patched JVM, in `hooks`.

/// `name()`, how options, stats and metrics spell a value (its `strum::IntoStaticStr` name),
/// and a `Display` that writes it: one definition for the enums those documents name.
macro_rules! named {
    ($($t:ty),*) => {$(
        impl $t {
            /// How the options, the stats document and `/metrics` spell it.
            pub fn name(self) -> &'static str {
                self.into()
            }
        }

        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    )*};
}

/// An enum whose values options and documents name in lower case (`policy=memliner`,
/// `"delivery": "signal"`): its derives, its names (`strum` for parsing and the choices an error
/// lists, `serde` for the stats document) and `named!`'s `name()` and `Display`, in one place.
macro_rules! lowercase_enum {
    ($(#[$m:meta])* $vis:vis enum $name:ident { $($body:tt)* }) => {
        $(#[$m])*
        #[derive(
            Clone,
            Copy,
            Debug,
            PartialEq,
            Eq,
            serde::Serialize,
            serde::Deserialize,
            strum::EnumString,
            strum::IntoStaticStr,
            strum::VariantNames,
        )]
        #[serde(rename_all = "lowercase")]
        #[strum(serialize_all = "lowercase")]
        $vis enum $name { $($body)* }

        named!($name);
    };
}

named!(
    model::ThreadClass,
    model::FaultKind,
    gc_activity::GcActivity,
    pager::Role,
    gc_layout::Reason
);

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
pub mod memory;
pub mod model;
pub mod options;
pub mod pager;
pub mod perfdata;
pub mod policy;
pub mod prefetch;
mod runtime;
pub mod stats;
pub mod threads;
pub mod uffd;
pub mod vmstructs;

pub use runtime::{fatal, host_name, FATAL_EXIT_CODE};
