//! The `PageStore` interface the pager writes evicted pages to and reads them back from, the
//! in-process store, and the store that adds emulated latency (several servers: `replica`).

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use crate::protocol::{Lane, PAGE_SIZE};

/// How a client connects to a memory server, whatever the transport.
#[derive(Clone, Debug, Default)]
pub struct ClientOptions {
    /// Shared secret the server was started with (`--token`); empty for none.
    pub token: String,
    /// This client's namespace on the server: all connections of one client share it.
    pub namespace: String,
    /// How many demand connections to keep (one per concurrent caller, e.g. fault-handler
    /// threads); the prefetch and reclaim lanes get one more each.
    pub connections: usize,
    /// The longest a connection waits for the server at a time (to connect, to send, for the
    /// next bytes of a reply); past it the request fails and the connection is dropped, as
    /// when the server closes it. `None`: wait as long as TCP does.
    pub deadline: Option<std::time::Duration>,
}

thread_local! {
    static LANE: std::cell::Cell<Lane> = const { std::cell::Cell::new(Lane::Demand) };
}

/// Declares the lane of the calling thread's requests (default: [`Lane::Demand`]): remote
/// stores keep connections per lane, so a demand read never queues behind the others.
pub fn set_thread_lane(lane: Lane) {
    LANE.with(|l| l.set(lane));
}

/// The calling thread's lane.
pub(crate) fn thread_lane() -> Lane {
    LANE.with(|l| l.get())
}

/// Why a store operation failed. Every message names the store so that a fatal stop can say
/// which server lost a page.
#[derive(Debug)]
pub enum StoreError {
    /// The connection to the server failed or closed.
    Io {
        store: String,
        error: std::io::Error,
    },
    /// The server refused the request with an error frame.
    Refused {
        store: String,
        code: u16,
        message: String,
    },
    /// The server's reply does not fit the protocol.
    Protocol { store: String, message: String },
    /// The server returned other bytes for a page than were written (see `checksum`).
    Corrupt {
        store: String,
        page: u64,
        message: String,
    },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Io { store, error } => write!(f, "memory server {store}: {error}"),
            StoreError::Refused { store, message, .. } => {
                write!(f, "memory server {store} refused: {message}")
            }
            StoreError::Protocol { store, message } => {
                write!(f, "memory server {store}: protocol error: {message}")
            }
            StoreError::Corrupt { store, message, .. } => {
                write!(f, "memory server {store} returned wrong bytes: {message}")
            }
        }
    }
}

impl std::error::Error for StoreError {}

/// Remote page storage addressed by page id (the page's index within the paged region).
///
/// Implementations are shared by all fault-handler threads; each call is one synchronous,
/// internally pipelined batch.
pub trait PageStore: Send + Sync {
    /// Reads `ids.len()` pages into `out` (`ids.len() * PAGE_SIZE` bytes), in order.
    fn read_pages(&self, ids: &[u64], out: &mut [u8]) -> Result<(), StoreError>;
    /// Writes `ids.len()` pages from `data`, in order, replacing earlier contents.
    fn write_pages(&self, ids: &[u64], data: &[u8]) -> Result<(), StoreError>;
    /// Forgets pages (a missing id is not an error).
    fn free_pages(&self, ids: &[u64]) -> Result<(), StoreError>;
    /// Where the pages live, for messages: `tcp://127.0.0.1:7070`, `local`.
    fn describe(&self) -> String;
    /// Which store holds `id`: the same as `describe` unless the store spreads pages.
    fn describe_page(&self, _id: u64) -> String {
        self.describe()
    }
    /// Where each server stands, for a store that replicates pages over several.
    fn replication(&self) -> Option<memliner_contracts::store_stats::ReplicationStats> {
        None
    }
    /// [`PageStore::replication`]'s counters without the pages held per server (0): cheap
    /// enough for every scrape of `/metrics`, and taking no lock a fault takes.
    fn replication_counters(&self) -> Option<memliner_contracts::store_stats::ReplicationStats> {
        None
    }
    /// What the end-to-end page checks found, for a store that checks (`checksum`).
    fn integrity(&self) -> Option<memliner_contracts::store_stats::IntegrityStats> {
        None
    }
}

/// Pages in this process's memory: for tests, the embedded demo, and the server's own storage.
pub struct LocalStore {
    capacity_pages: u64,
    pages: Mutex<HashMap<u64, Box<[u8]>>>,
}

impl LocalStore {
    pub fn new(capacity_pages: u64) -> Self {
        LocalStore {
            capacity_pages,
            pages: Mutex::new(HashMap::new()),
        }
    }

    pub fn len(&self) -> usize {
        self.pages.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn err(&self, code: u16, message: String) -> StoreError {
        StoreError::Refused {
            store: self.describe(),
            code,
            message,
        }
    }
}

impl PageStore for LocalStore {
    fn read_pages(&self, ids: &[u64], out: &mut [u8]) -> Result<(), StoreError> {
        assert_eq!(out.len(), ids.len() * PAGE_SIZE);
        let pages = self.pages.lock().unwrap();
        for (id, dst) in ids.iter().zip(out.chunks_exact_mut(PAGE_SIZE)) {
            match pages.get(id) {
                Some(p) => dst.copy_from_slice(p),
                None => {
                    return Err(self.err(
                        crate::protocol::code::NOT_FOUND,
                        format!("page {id} was never written"),
                    ))
                }
            }
        }
        Ok(())
    }

    fn write_pages(&self, ids: &[u64], data: &[u8]) -> Result<(), StoreError> {
        assert_eq!(data.len(), ids.len() * PAGE_SIZE);
        let mut pages = self.pages.lock().unwrap();
        let new = ids.iter().filter(|id| !pages.contains_key(id)).count() as u64;
        if pages.len() as u64 + new > self.capacity_pages {
            return Err(self.err(
                crate::protocol::code::CAPACITY,
                format!("capacity of {} pages exhausted", self.capacity_pages),
            ));
        }
        for (id, src) in ids.iter().zip(data.chunks_exact(PAGE_SIZE)) {
            match pages.get_mut(id) {
                Some(p) => p.copy_from_slice(src),
                None => {
                    pages.insert(*id, src.into());
                }
            }
        }
        Ok(())
    }

    fn free_pages(&self, ids: &[u64]) -> Result<(), StoreError> {
        let mut pages = self.pages.lock().unwrap();
        for id in ids {
            pages.remove(id);
        }
        Ok(())
    }

    fn describe(&self) -> String {
        "local".into()
    }
}

/// Waits out `latency` from `start`: spins for the last stretch where the spin governor allows
/// it (sleep alone overshoots microseconds by tens of them), sleeps otherwise.
pub fn wait_until(start: std::time::Instant, latency: std::time::Duration) {
    let end = start + latency;
    loop {
        let now = std::time::Instant::now();
        if now >= end {
            return;
        }
        let left = end - now;
        if left <= std::time::Duration::from_micros(200)
            && memliner_cpu::spin::spin_until(|| std::time::Instant::now() >= end)
        {
            return;
        }
        std::thread::sleep(
            left.saturating_sub(std::time::Duration::from_micros(100))
                .max(std::time::Duration::from_micros(1)),
        );
    }
}

/// Another store whose reads and writes each take at least `latency`, for planning: the
/// in-process store at 2-3 us approximates an RDMA fabric's one-sided reads, which loopback
/// TCP (20 us and more here) cannot.
pub struct LatencyStore {
    inner: Box<dyn PageStore>,
    latency: std::time::Duration,
}

impl LatencyStore {
    pub fn new(inner: Box<dyn PageStore>, latency: std::time::Duration) -> Self {
        LatencyStore { inner, latency }
    }
}

impl fmt::Debug for LatencyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatencyStore")
            .field("inner", &self.inner.describe())
            .field("latency", &self.latency)
            .finish()
    }
}

impl PageStore for LatencyStore {
    fn read_pages(&self, ids: &[u64], out: &mut [u8]) -> Result<(), StoreError> {
        let t = std::time::Instant::now();
        let r = self.inner.read_pages(ids, out);
        wait_until(t, self.latency);
        r
    }

    fn write_pages(&self, ids: &[u64], data: &[u8]) -> Result<(), StoreError> {
        let t = std::time::Instant::now();
        let r = self.inner.write_pages(ids, data);
        wait_until(t, self.latency);
        r
    }

    fn free_pages(&self, ids: &[u64]) -> Result<(), StoreError> {
        self.inner.free_pages(ids)
    }

    fn describe(&self) -> String {
        format!(
            "{} (+{} emulated latency)",
            self.inner.describe(),
            crate::units::format_duration(self.latency)
        )
    }

    fn describe_page(&self, id: u64) -> String {
        self.inner.describe_page(id)
    }

    fn replication(&self) -> Option<memliner_contracts::store_stats::ReplicationStats> {
        self.inner.replication()
    }

    fn replication_counters(&self) -> Option<memliner_contracts::store_stats::ReplicationStats> {
        self.inner.replication_counters()
    }

    fn integrity(&self) -> Option<memliner_contracts::store_stats::IntegrityStats> {
        self.inner.integrity()
    }
}

impl std::fmt::Debug for LocalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalStore")
            .field("pages", &self.len())
            .finish()
    }
}
