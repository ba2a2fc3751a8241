//! Where evicted heap pages go, as a client sees it: the [`PageStore`] interface and its stores
//! (in-process, TCP frames, one-sided memory files and libfabric, several servers with copies
//! of every page), end-to-end checksums, the conformance suite every store passes, and the
//! Prometheus text format both the agent and the server serve.
//!
//! Beside it, crates of their own: the wire and URLs (`memliner-protocol`), libfabric's
//! bindings (`memliner-fabric-sys`), thread CPU and spinning (`memliner-cpu`), and the memory
//! server (`memliner-server`, which builds on this crate).
//!
//! Data flows one way: the agent's pager calls a [`PageStore`]; nothing here knows about JVMs.

// The wire, URLs and units live in their own crate (`memliner-protocol`); their paths stay.
pub use memliner_protocol::{auth, protocol, units, url};

pub mod checksum;
pub mod conformance;
mod connect;
pub mod fabric;
pub mod memfile;
pub mod metrics;
pub mod one_sided;
pub mod replica;
pub mod store;
pub mod tcp;

pub use connect::{connect, Connected};
pub use protocol::Lane;
pub use protocol::PAGE_SIZE;
pub use replica::{Member, ReplicatedStore};
pub use store::{set_thread_lane, ClientOptions, LatencyStore, LocalStore, PageStore, StoreError};
pub use tcp::TcpStore;
pub use url::{ListenUrl, Scheme, ServerUrl};
