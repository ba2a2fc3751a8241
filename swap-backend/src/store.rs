//! The `PageStore` interface the pager writes evicted pages to and reads them back from, the
//! in-process store, and the store that adds emulated latency (several servers: `replica`).

use std::collections::hash_map::{Entry, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

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

/// Pages in this process's memory: the pager's in-process store (`--server local`) and tests.
///
/// Every faulting thread reads here while the reclaimer writes batches back, so no lock is
/// held across a batch: the pages are spread over shards by id, and a shard is locked for one
/// page's copy at a time. One lock over the whole map made a fault wait for a write-back batch
/// to finish, or, on a machine with few cores, for the preempted reclaimer holding it to run
/// again (milliseconds).
pub struct LocalStore {
    capacity_pages: u64,
    /// Pages held and pages reserved by writes under way: never above `capacity_pages`.
    held: AtomicU64,
    shards: Box<[Mutex<Shard>]>,
}

/// One shard's pages by id.
type Shard = HashMap<u64, Box<[u8]>>;

/// Shards of a [`LocalStore`]: a power of two well above the threads that page at once.
const SHARDS: usize = 64;

impl LocalStore {
    pub fn new(capacity_pages: u64) -> Self {
        LocalStore {
            capacity_pages,
            held: AtomicU64::new(0),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    /// Pages held.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The shard of page `id`: neighbouring pages (a batch) fall in different shards.
    fn shard(&self, id: u64) -> MutexGuard<'_, Shard> {
        lock(&self.shards[id as usize % SHARDS])
    }

    /// Reserves room for `new` more pages, or says why there is none.
    fn reserve(&self, new: u64) -> Result<(), StoreError> {
        self.held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                h.checked_add(new).filter(|&t| t <= self.capacity_pages)
            })
            .map(drop)
            .map_err(|_| {
                self.err(
                    crate::protocol::code::CAPACITY,
                    format!("capacity of {} pages exhausted", self.capacity_pages),
                )
            })
    }

    fn err(&self, code: u16, message: String) -> StoreError {
        StoreError::Refused {
            store: self.describe(),
            code,
            message,
        }
    }
}

/// A shard's lock: a panic elsewhere left whole pages behind (each is copied under it).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl PageStore for LocalStore {
    fn read_pages(&self, ids: &[u64], out: &mut [u8]) -> Result<(), StoreError> {
        assert_eq!(out.len(), ids.len() * PAGE_SIZE);
        for (id, dst) in ids.iter().zip(out.chunks_exact_mut(PAGE_SIZE)) {
            match self.shard(*id).get(id) {
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

    /// All or nothing for room: a batch that does not fit writes no page.
    fn write_pages(&self, ids: &[u64], data: &[u8]) -> Result<(), StoreError> {
        assert_eq!(data.len(), ids.len() * PAGE_SIZE);
        // Pages are written by one caller at a time each (the pager's claim on the page), so
        // what is new here stays new until this call inserts it; where a store is shared
        // otherwise, the count is put right page by page below.
        let new: Vec<bool> = ids
            .iter()
            .map(|id| !self.shard(*id).contains_key(id))
            .collect();
        self.reserve(new.iter().filter(|n| **n).count() as u64)?;
        for ((id, src), counted) in ids.iter().zip(data.chunks_exact(PAGE_SIZE)).zip(new) {
            match self.shard(*id).entry(*id) {
                Entry::Occupied(mut o) => {
                    o.get_mut().copy_from_slice(src);
                    if counted {
                        self.held.fetch_sub(1, Ordering::Relaxed);
                    }
                }
                Entry::Vacant(v) => {
                    v.insert(src.into());
                    if !counted {
                        self.held.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        Ok(())
    }

    fn free_pages(&self, ids: &[u64]) -> Result<(), StoreError> {
        for id in ids {
            if self.shard(*id).remove(id).is_some() {
                self.held.fetch_sub(1, Ordering::Relaxed);
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::code;

    fn page(byte: u8) -> Vec<u8> {
        vec![byte; PAGE_SIZE]
    }

    fn refused(e: StoreError) -> u16 {
        match e {
            StoreError::Refused { code, .. } => code,
            other => panic!("expected a refusal, got {other}"),
        }
    }

    #[test]
    fn pages_read_back_as_written_and_freed_pages_are_gone() {
        let s = LocalStore::new(16);
        // Two pages of one shard among them.
        let ids = [3, 4, 68, 3 + SHARDS as u64];
        let data: Vec<u8> = (1..=4u8).flat_map(page).collect();
        s.write_pages(&ids, &data).unwrap();
        let mut out = vec![0; data.len()];
        s.read_pages(&ids, &mut out).unwrap();
        assert!(out == data, "pages read back differ");
        assert_eq!(s.len(), 4);
        s.free_pages(&[4, 99]).unwrap();
        let e = s.read_pages(&[4], &mut out[..PAGE_SIZE]).unwrap_err();
        assert_eq!(refused(e), code::NOT_FOUND);
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn a_batch_that_does_not_fit_writes_nothing_and_rewrites_need_no_room() {
        let s = LocalStore::new(3);
        s.write_pages(&[0, 1], &[page(1), page(2)].concat())
            .unwrap();
        let e = s
            .write_pages(&[1, 2, 3], &[page(7), page(8), page(9)].concat())
            .unwrap_err();
        assert_eq!(refused(e), code::CAPACITY);
        let mut out = page(0);
        s.read_pages(&[1], &mut out).unwrap();
        assert!(out == page(2), "a refused batch changed a page");
        assert!(s.read_pages(&[2], &mut out).is_err());
        // Full, every page rewritten: no room needed.
        s.write_pages(&[2], &page(3)).unwrap();
        s.write_pages(&[0, 1, 2], &[page(4), page(5), page(6)].concat())
            .unwrap();
        assert!(s.write_pages(&[5], &page(1)).is_err());
        s.free_pages(&[0]).unwrap();
        s.write_pages(&[5], &page(1)).unwrap();
        assert_eq!(s.len(), 3);
    }

    /// Writers rewrite their pages with a new byte each round while readers read them all: no
    /// reader sees a page mixing two writes, and the count of pages held stays exact.
    #[test]
    fn concurrent_batches_never_tear_a_page() {
        let s = LocalStore::new(4 * 64);
        std::thread::scope(|t| {
            for w in 0..4u64 {
                let s = &s;
                t.spawn(move || {
                    let ids: Vec<u64> = (0..64).map(|i| i * 4 + w).collect();
                    for round in 0..200u8 {
                        let data: Vec<u8> = ids.iter().flat_map(|_| page(round)).collect();
                        s.write_pages(&ids, &data).unwrap();
                    }
                });
            }
            for _ in 0..2 {
                let s = &s;
                t.spawn(move || {
                    let mut out = page(0);
                    for i in 0..20_000u64 {
                        let id = i % 256;
                        if s.read_pages(&[id], &mut out).is_ok() {
                            assert!(out.iter().all(|b| *b == out[0]), "page {id} torn");
                        }
                    }
                });
            }
        });
        assert_eq!(s.len(), 256);
        assert_eq!(s.held.load(Ordering::Relaxed), 256);
        assert!(s.write_pages(&[1000], &page(1)).is_err(), "over capacity");
    }
}
