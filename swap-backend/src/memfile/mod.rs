//! One-sided pages on one host (`unix://PATH`): the server hands each client memory files of
//! its own over a Unix socket (SCM_RIGHTS), one per grant of slots, and the client copies pages
//! in and out of their mappings itself. A read costs a copy and no server CPU, as an RDMA READ
//! does; it is also the shape of a memory pool that several JVMs of one host share (CXL).
//!
//! The server keeps what it keeps over TCP: the token, a namespace per client, capacity and
//! quotas (a grant's memory is allocated by the server when granted), the audit log. A file
//! goes to one client only: its descriptor is the grant's key. A grant given back is emptied
//! (truncated), also under a client that kept it mapped. A session the server cuts (it stops)
//! leaves the client's mappings alone, and the client takes the hang-up as the server's loss.

mod client;
pub mod sys;

pub use crate::one_sided::Hangup;
pub use client::{grant_pages, MemfileStore, KEEP_FREE, MAX_GRANT, MIN_GRANT};
pub use sys::{send_with_fds, server_at, FdReader};

/// What the server names the provider in its attach reply.
pub const PROVIDER: &str = "memfile";

/// Whether this host can hand out memory files (memfd with seals; a sandbox may refuse it):
/// `Err` says why not.
pub fn available() -> Result<(), String> {
    sys::grant_file("memliner probe", 1)
        .map(drop)
        .map_err(|e| format!("cannot make a sealed memory file: {e}"))
}
