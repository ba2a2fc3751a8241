//! What a client and a memory server agree on, and nothing that moves a page: the frames of the
//! page protocol, the URLs that name a server, the sizes and durations options spell, and the
//! session key a token derives. The stores, the transports and the server build on it; the
//! contracts crate (options) names its URLs and sizes.

pub mod auth;
pub mod protocol;
pub mod units;
pub mod url;

pub use protocol::{Lane, PAGE_SIZE};
pub use url::{ListenUrl, Scheme, ServerUrl};
