//! Where evicted heap pages go: the page protocol, the `PageStore` interface with its in-process
//! and TCP implementations, and the memory server (`memliner server`).
//!
//! Data flows one way: the agent's pager calls a [`PageStore`]; nothing here knows about JVMs.

// The wire, URLs and units live in their own crate (`memliner-protocol`); their paths stay.
pub use memliner_protocol::{auth, protocol, units, url};
// What threads cost and when they spin, and libfabric's bindings: crates of their own.
pub use memliner_cpu as cpu;
pub use memliner_cpu::spin;
pub use memliner_fabric_sys as fabric_ffi;
pub use memliner_fabric_sys::memory;

pub mod checksum;
pub mod conformance;
mod connect;
pub mod fabric;
pub mod memfile;
pub mod metrics;
pub mod one_sided;
mod page_map;
pub mod replica;
/// The replicated store's part of the stats document (defined with the document).
pub use memliner_contracts::store_stats as replication_stats;
pub mod server;
pub mod store;
pub mod tcp;

pub use connect::{connect, Connected};
pub use protocol::Lane;
pub use protocol::PAGE_SIZE;
pub use replica::{Member, ReplicatedStore};
pub use store::{set_thread_lane, ClientOptions, LatencyStore, LocalStore, PageStore, StoreError};
pub use tcp::TcpStore;
pub use url::{ListenUrl, Scheme, ServerUrl};
