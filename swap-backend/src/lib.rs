//! Where evicted heap pages go: the page protocol, the `PageStore` interface with its in-process
//! and TCP implementations, and the memory server (`memliner server`).
//!
//! Data flows one way: the agent's pager calls a [`PageStore`]; nothing here knows about JVMs.

// The wire, URLs and units live in their own crate (`memliner-protocol`); their paths stay.
pub use memliner_protocol::{auth, protocol, units, url};

pub mod checksum;
pub mod conformance;
mod connect;
pub mod cpu;
pub mod fabric;
pub mod fabric_ffi;
pub mod memfile;
pub mod memory;
pub mod metrics;
pub mod one_sided;
mod page_map;
pub mod replica;
/// The replicated store's part of the stats document (defined with the document).
pub use memliner_contracts::store_stats as replication_stats;
pub mod server;
pub mod spin;
pub mod store;
pub mod tcp;

pub use connect::{connect, Connected};
pub use protocol::Lane;
pub use protocol::PAGE_SIZE;
pub use replica::{Member, ReplicatedStore};
pub use store::{set_thread_lane, ClientOptions, LatencyStore, LocalStore, PageStore, StoreError};
pub use tcp::TcpStore;
pub use url::{ListenUrl, Scheme, ServerUrl};
