//! The contracts between memliner's crates, defined once: the agent's options and their table,
//! the stats document, the metrics target file, the names of every metric served, and the
//! model's enums those documents name. The agent writes them, the `memliner` command, the
//! bench and the dashboard generator read them; a field or name that moves is a compile error
//! (or a failing test) on both sides.
//!
//! A leaf of the workspace but for the wire crate (`memliner-protocol`, for server URLs and
//! sizes): nothing here pages, serves or runs a JVM.

/// `name()`, how options, stats and metrics spell a value (its `strum::IntoStaticStr` name),
/// and a `Display` that writes it: one definition for the enums those documents name.
#[macro_export]
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

named!(model::ThreadClass, model::FaultKind, model::GcActivity);

pub mod metrics;
pub mod model;
pub mod options;
pub mod stats;
pub mod store_stats;
pub mod targets;

/// The exit status of a JVM the agent stopped because a page could not be served correctly.
pub const FATAL_EXIT_CODE: i32 = 70;

/// Why a ZGC heap is not paged; the line names the collectors that are.
pub const ZGC_REFUSED: &str = "ZGC maps its heap several times over shared memory, which the pager does not handle; use G1, Parallel, Serial or Shenandoah";

/// This machine's name, as the stats and metrics files' names and labels carry it.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}
