//! The page store's parts of the stats document: what a store that replicates pages over
//! several servers reports, and what end-to-end checksums found. The swap backend fills them
//! in; the agent writes them into the document.

use serde::{Deserialize, Serialize};

/// What a replicated store did: one of the stats document's parts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicationStats {
    /// Copies of each page wanted.
    pub replicas: u32,
    pub servers: Vec<ServerReplicaStats>,
    /// Pages held (at the time of writing).
    pub pages: u64,
    /// Of those, pages with fewer copies than wanted (or than servers up).
    pub pages_under_replicated: u64,
    /// Pages copied to another server after a copy was lost.
    pub pages_recopied: u64,
    /// Pages read from another copy after the first one's server failed.
    pub reads_failed_over: u64,
    /// Pages every copy of which was lost.
    pub pages_lost: u64,
}

/// One server's part of [`ReplicationStats`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerReplicaStats {
    pub server: String,
    pub up: bool,
    /// Times the server was lost.
    pub losses: u64,
    /// Times it was connected again after a loss (or after being unreachable at start).
    pub rejoins: u64,
    /// Pages it holds (at the time of writing).
    pub pages: u64,
    pub pages_read: u64,
    pub pages_written: u64,
    /// Pages it returned with other bytes than were written (read from another copy, or the
    /// read failed).
    #[serde(default)]
    pub mismatches: u64,
}

/// What the checks found (`checksums=on`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntegrityStats {
    /// Pages read and found as written.
    pub pages_verified: u64,
    /// Pages a server returned with other bytes than were written (never installed).
    pub mismatches: u64,
    /// Pages read that no checksum was kept for (written before the client started).
    pub pages_unchecked: u64,
}
