//! The one-sided [`PageStore`]: pages read and written with RDMA READ/WRITE into the memory
//! server's registered pool, slots allocated over a small two-sided control channel.
//!
//! The client keeps the page -> slot table (the server never learns page ids) and a local
//! stock of free slots, asked for [`ALLOC_CHUNK`] at a time and given back beyond
//! [`KEEP_FREE`], a whole grant at a time (slots come in grants, each registered for this
//! client alone with a key of its own). Each caller lane has its own channels (an endpoint with a registered
//! buffer): the demand lane one per fault-handler thread, prefetch and reclaim one each, so a
//! fault never queues behind a prefetch window or a write-back.
//!
//! Never wrong bytes: a page whose write failed is dropped from the table (a later read of it
//! is an error, not stale data), and once the control channel is lost (the server then frees
//! this client's slots) every request fails with that reason.

use std::io::{BufReader, BufWriter};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::one_sided::{
    assign, call_error, release_ok, releases, Control, Hangup, SlotTable, Watcher,
};
use crate::protocol::{
    code, AttachOk, ConnectData, Lane, Reply, Request, ServerStats, MAX_BATCH, PAGE_SIZE,
};
use crate::store::{thread_lane, ClientOptions, PageStore, StoreError};
use memliner_fabric_sys::{
    AddressVector, Channel, Domain, EpType, Fabric, FabricError, Info, Rma, FI_MR_LOCAL,
};

/// Slots asked for at once.
pub const ALLOC_CHUNK: usize = MAX_BATCH;
/// Free slots kept for later writes before the rest go back to the server.
pub const KEEP_FREE: usize = 4 * ALLOC_CHUNK;
/// Pages one transfer moves (a channel's buffer).
pub const CHANNEL_PAGES: usize = MAX_BATCH;

/// How long a new data endpoint waits for the server to accept it without a `deadline`.
const CONNECT_WAIT: Duration = Duration::from_secs(10);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How data endpoints reach the server's pool.
enum Route {
    /// `FI_EP_MSG`: each endpoint connects, carrying the session.
    Connect,
    /// `FI_EP_RDM`: each endpoint posts to the server's endpoint, at `dest` in `av`.
    Address { av: Arc<AddressVector>, dest: u64 },
}

/// A [`PageStore`] on a memory server reached with one-sided RDMA (`fabric://`).
pub struct FabricStore {
    name: String,
    control: Mutex<Control<BufReader<TcpStream>, BufWriter<TcpStream>>>,
    /// Its hang-up is set when the server closes the session (or by a failed control
    /// request): the session, and this client's pages there, are gone then.
    watcher: Watcher,
    attach: AttachOk,
    capacity_pages: u64,
    table: Mutex<SlotTable<()>>,
    // Drop order: channels before the domain and the info they were opened from.
    channels: Vec<Mutex<Option<Channel>>>,
    register: bool,
    /// The longest a transfer waits without a completion (`ClientOptions::deadline`).
    deadline: Option<Duration>,
    route: Route,
    domain: Arc<Domain>,
    info: Info,
}

impl FabricStore {
    /// Opens the control channel to `authority` (`HOST:PORT`), attaches, and connects the
    /// first data channel.
    pub fn connect(authority: &str, options: ClientOptions) -> Result<FabricStore, StoreError> {
        let name = format!("fabric://{authority}");
        let io = |error: std::io::Error| StoreError::Io {
            store: name.clone(),
            error,
        };
        let addr = authority
            .to_socket_addrs()
            .map_err(io)?
            .next()
            .ok_or_else(|| io(std::io::Error::other("no address")))?;
        let wait = options.deadline.unwrap_or(Duration::from_secs(5));
        let stream = TcpStream::connect_timeout(&addr, wait).map_err(io)?;
        stream.set_nodelay(true).map_err(io)?;
        // The control channel's waits are bounded as a TCP store's are.
        crate::tcp::bound_waits(&stream, options.deadline).map_err(io)?;
        // The server's end closing is seen at once, not only by the next control request:
        // a transfer to a server that is gone (over reliable datagrams, nothing else says so)
        // gives up then instead of waiting out its deadline.
        let watcher = Watcher::start(stream.try_clone().map_err(io)?.into()).map_err(io)?;
        let mut control = Control::new(
            BufReader::new(stream.try_clone().map_err(io)?),
            BufWriter::new(stream),
            options.deadline,
        );
        let (capacity_pages, attach) = control.open_session(&name, &options)?;
        let host = authority
            .rsplit_once(':')
            .map_or(authority, |(h, _)| h)
            .trim_start_matches('[')
            .trim_end_matches(']');
        // The server's provider, unless FI_PROVIDER chooses (libfabric then filters itself).
        let provider = std::env::var_os("FI_PROVIDER")
            .is_none()
            .then_some(attach.provider.as_str());
        let fabric_err = |e: FabricError| StoreError::Io {
            store: name.clone(),
            error: std::io::Error::other(format!("libfabric ({}): {e}", attach.provider)),
        };
        // The server's endpoints say which kind ours are: it names its own when it listens
        // with reliable datagrams.
        let datagrams = !attach.endpoint.is_empty();
        let info = if datagrams {
            super::rdm_info(host, false, provider)
        } else {
            let port = attach.port.to_string();
            Info::rma(EpType::Msg, Some(host), Some(&port), false, provider)
        }
        .map_err(fabric_err)?;
        let fabric = Fabric::open(&info).map_err(fabric_err)?;
        let domain = Domain::open(&fabric, &info).map_err(fabric_err)?;
        let route = if !datagrams {
            Route::Connect
        } else {
            let av = AddressVector::open(&domain).map_err(fabric_err)?;
            let dest = av.insert(&attach.endpoint).map_err(fabric_err)?;
            Route::Address { av, dest }
        };
        let store = FabricStore {
            name: name.clone(),
            control: Mutex::new(control),
            watcher,
            register: info.mr_mode() & FI_MR_LOCAL != 0,
            deadline: options.deadline,
            route,
            attach,
            capacity_pages,
            table: Mutex::new(SlotTable::new(ALLOC_CHUNK, KEEP_FREE)),
            channels: (0..options.connections.max(1) + 2)
                .map(|_| Mutex::new(None))
                .collect(),
            domain,
            info,
        };
        // One channel now, so that a server the fabric cannot reach fails here.
        *lock(&store.channels[0]) = Some(store.open_channel(0)?);
        Ok(store)
    }

    /// Pages the server can hold in all (across all its clients).
    pub fn capacity_pages(&self) -> u64 {
        self.capacity_pages
    }

    /// The libfabric provider the pages travel over.
    pub fn provider(&self) -> &str {
        &self.attach.provider
    }

    /// The endpoint type the data moves over: `FI_EP_MSG` (connected) or `FI_EP_RDM`.
    pub fn endpoint_type(&self) -> &'static str {
        match self.route {
            Route::Connect => EpType::Msg.into(),
            Route::Address { .. } => EpType::Rdm.into(),
        }
    }

    fn io(&self, error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> StoreError {
        StoreError::Io {
            store: self.name.clone(),
            error: std::io::Error::other(error),
        }
    }

    fn open_channel(&self, index: usize) -> Result<Channel, StoreError> {
        let (buffer, key) = (CHANNEL_PAGES * PAGE_SIZE, index as u64 + 1);
        match &self.route {
            Route::Connect => Channel::connect(
                &self.domain,
                &self.info,
                &ConnectData {
                    session: self.attach.session,
                }
                .encode(),
                buffer,
                self.register,
                key,
                // A server that stopped answering leaves a new endpoint's thread waiting no
                // longer than any transfer would.
                self.deadline.unwrap_or(CONNECT_WAIT),
            ),
            Route::Address { av, dest } => Channel::addressed(
                &self.domain,
                &self.info,
                av,
                *dest,
                buffer,
                self.register,
                key,
            ),
        }
        .map(|mut ch| {
            if let Some(d) = self.deadline {
                ch.set_timeout(d);
            }
            ch
        })
        .map_err(|e| {
            let why = match e.code {
                libc::ETIMEDOUT => crate::tcp::name_timeout(
                    std::io::Error::new(std::io::ErrorKind::TimedOut, e.to_string()),
                    self.deadline,
                )
                .to_string(),
                _ => e.to_string(),
            };
            self.io(format!(
                "cannot connect a data endpoint ({}): {why}",
                self.attach.provider
            ))
        })
    }

    /// A control request; a broken control channel marks the store lost for good.
    fn control<T>(
        &self,
        request: &Request<'_>,
        f: impl FnOnce(Reply<'_>) -> Result<T, String>,
    ) -> Result<T, StoreError> {
        self.check_alive()?;
        lock(&self.control)
            .call(request, f)
            .map_err(|e| call_error(&self.name, e, || self.lost().set()))
    }

    /// Whether the server hung up (or the control channel broke).
    fn lost(&self) -> &Hangup {
        self.watcher.hangup()
    }

    fn check_alive(&self) -> Result<(), StoreError> {
        if self.lost().is_set() {
            return Err(self.io(
                "the control channel to the server was lost, and with it this client's pages there",
            ));
        }
        Ok(())
    }

    /// Server-side counters.
    pub fn server_stats(&self) -> Result<ServerStats, StoreError> {
        self.control(&Request::Stats, |r| match r {
            Reply::StatsOk(s) => Ok(s),
            other => Err(format!("unexpected {:?} in reply to stats", other.op())),
        })
    }

    /// The remote address and key of slot `s`.
    fn remote(&self, t: &SlotTable<()>, s: u64) -> Result<(u64, u64), StoreError> {
        let g = t.held(s).ok_or_else(|| StoreError::Protocol {
            store: self.name.clone(),
            message: format!("slot {s} is in no grant this client holds"),
        })?;
        Ok((
            g.grant.addr + (s - g.grant.slot) * PAGE_SIZE as u64,
            g.grant.key,
        ))
    }

    /// The transfers for `slots` (in buffer order): neighbouring slots of one grant merge.
    fn plan(&self, slots: &[u64], write: bool) -> Result<Vec<Rma>, StoreError> {
        let t = lock(&self.table);
        let mut ops: Vec<Rma> = Vec::new();
        for (i, &s) in slots.iter().enumerate() {
            let (addr, key) = self.remote(&t, s)?;
            if let Some(last) = ops.last_mut() {
                if last.key == key
                    && last.addr + last.len as u64 == addr
                    && last.offset + last.len == i * PAGE_SIZE
                {
                    last.len += PAGE_SIZE;
                    continue;
                }
            }
            ops.push(Rma {
                write,
                offset: i * PAGE_SIZE,
                len: PAGE_SIZE,
                addr,
                key,
            });
        }
        Ok(ops)
    }

    /// Runs `f` on a channel of the caller's lane (connecting it if needed); a channel whose
    /// transfer failed is dropped, so a later call connects afresh.
    fn with_channel<T>(
        &self,
        f: impl FnOnce(&mut Channel) -> Result<T, FabricError>,
    ) -> Result<T, StoreError> {
        self.check_alive()?;
        let demand = self.channels.len() - 2;
        let (range, first) = match thread_lane() {
            Lane::Demand => (0..demand, 0),
            Lane::Prefetch => (demand..demand + 1, demand),
            Lane::Reclaim => (demand + 1..demand + 2, demand + 1),
        };
        let lanes = &self.channels[range.clone()];
        let (index, mut slot) = lanes
            .iter()
            .enumerate()
            .find_map(|(i, m)| m.try_lock().ok().map(|g| (first + i, g)))
            .unwrap_or_else(|| (first, lock(&lanes[0])));
        if slot.is_none() {
            *slot = Some(self.open_channel(index)?);
        }
        let result = f(slot.as_mut().unwrap());
        if result.is_err() {
            *slot = None;
        }
        result.map_err(|e| self.io(e.to_string()))
    }

    /// Slots for `ids`, taking free ones for pages not yet stored (and asking the server for
    /// more when the stock runs out).
    fn assign(&self, ids: &[u64]) -> Result<Vec<u64>, StoreError> {
        assign(&self.table, ids, |missing| self.refill(missing))
    }

    /// Asks the server for at least `missing` more free slots.
    fn refill(&self, missing: usize) -> Result<(), StoreError> {
        let mut left = missing;
        while left > 0 {
            let need = left.min(ALLOC_CHUNK) as u32;
            let got = self.control(
                &Request::Alloc {
                    need,
                    want: ALLOC_CHUNK as u32,
                },
                |r| match r {
                    Reply::AllocOk(grants) => {
                        let n: u64 = grants.iter().map(|g| g.pages).sum();
                        if n < need as u64 {
                            return Err(format!("{n} slots granted, {need} asked"));
                        }
                        Ok(grants)
                    }
                    other => Err(format!("unexpected {:?} in reply to alloc", other.op())),
                },
            )?;
            let mut t = lock(&self.table);
            for g in got {
                left = left.saturating_sub(g.pages as usize);
                t.add(g, ());
            }
        }
        Ok(())
    }

    /// Gives grants none of whose slots are used back to the server, while more than
    /// [`KEEP_FREE`] slots are free.
    fn trim(&self) -> Result<(), StoreError> {
        let back: Vec<u64> = lock(&self.table)
            .trim()
            .iter()
            .map(|h| h.grant.slot)
            .collect();
        for r in releases(&back) {
            self.control(&r, release_ok)?;
        }
        Ok(())
    }
}

impl PageStore for FabricStore {
    fn read_pages(&self, ids: &[u64], out: &mut [u8]) -> Result<(), StoreError> {
        assert_eq!(out.len(), ids.len() * PAGE_SIZE);
        let slots: Vec<u64> = {
            let t = lock(&self.table);
            ids.iter()
                .map(|id| {
                    t.slot(*id).ok_or_else(|| StoreError::Refused {
                        store: self.name.clone(),
                        code: code::NOT_FOUND,
                        message: format!("page {id} is not stored there"),
                    })
                })
                .collect::<Result<_, _>>()?
        };
        for (slots, dst) in slots
            .chunks(CHANNEL_PAGES)
            .zip(out.chunks_mut(CHANNEL_PAGES * PAGE_SIZE))
        {
            let ops = self.plan(slots, false)?;
            self.with_channel(|ch| {
                ch.transfer(&ops, || self.lost().is_set())?;
                dst.copy_from_slice(&ch.buffer()[..dst.len()]);
                Ok(())
            })?;
        }
        Ok(())
    }

    fn write_pages(&self, ids: &[u64], data: &[u8]) -> Result<(), StoreError> {
        assert_eq!(data.len(), ids.len() * PAGE_SIZE);
        let slots = self.assign(ids)?;
        let result = slots
            .chunks(CHANNEL_PAGES)
            .zip(data.chunks(CHANNEL_PAGES * PAGE_SIZE))
            .try_for_each(|(slots, src)| {
                let ops = self.plan(slots, true)?;
                self.with_channel(|ch| {
                    ch.buffer()[..src.len()].copy_from_slice(src);
                    ch.transfer(&ops, || self.lost().is_set())
                })
            });
        if result.is_err() {
            // What the slots hold is unknown now, and a write of the failed endpoint may still
            // land: forget the pages (a read of one is an error, never stale bytes) and leave
            // their slots unused until the session ends.
            lock(&self.table).forget(ids);
        }
        result
    }

    fn free_pages(&self, ids: &[u64]) -> Result<(), StoreError> {
        lock(&self.table).free(ids);
        self.trim()
    }

    fn describe(&self) -> String {
        self.name.clone()
    }
}

impl std::fmt::Debug for FabricStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FabricStore")
            .field("server", &self.name)
            .field("provider", &self.attach.provider)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::pattern;
    use crate::protocol::Grant;
    use memliner_server::{self as server, ServerConfig};

    fn pair() -> Option<(memliner_server::ServerHandle, FabricStore)> {
        pair_with(1024)
    }

    fn pair_with(capacity_pages: u64) -> Option<(memliner_server::ServerHandle, FabricStore)> {
        if !crate::conformance::libfabric_or_skip("a fabric client test") {
            return None;
        }
        let s = server::spawn(
            "127.0.0.1:0",
            ServerConfig {
                fabric: true,
                ..ServerConfig::with_capacity(capacity_pages * PAGE_SIZE as u64)
            },
        )
        .unwrap();
        // A refused transfer ends at the deadline where the provider reports nothing (shm does
        // not answer a read with a wrong key).
        let options = ClientOptions {
            deadline: Some(Duration::from_secs(2)),
            ..Default::default()
        };
        let c = FabricStore::connect(&s.local_addr().to_string(), options).unwrap();
        Some((s, c))
    }

    /// One raw read of a page at `addr` with `key` on a demand channel.
    fn raw_read(c: &FabricStore, addr: u64, key: u64) -> Result<Vec<u8>, StoreError> {
        raw(c, false, addr, key)
    }

    /// One raw transfer of a page; returns what the channel's buffer holds after it.
    fn raw(c: &FabricStore, write: bool, addr: u64, key: u64) -> Result<Vec<u8>, StoreError> {
        c.with_channel(|ch| {
            ch.transfer(
                &[Rma {
                    write,
                    offset: 0,
                    len: PAGE_SIZE,
                    addr,
                    key,
                }],
                || false,
            )?;
            Ok(ch.buffer()[..PAGE_SIZE].to_vec())
        })
    }

    /// Where page `id` of `c` lives: its slot's address and key, and its grant.
    fn where_is(c: &FabricStore, id: u64) -> (u64, u64, Grant) {
        let t = lock(&c.table);
        let slot = t.slot(id).unwrap();
        let (addr, key) = c.remote(&t, slot).unwrap();
        (addr, key, t.held(slot).unwrap().grant)
    }

    #[test]
    fn another_clients_pages_cannot_be_reached_with_the_keys_a_client_holds() {
        let Some((s, a)) = pair() else {
            return;
        };
        let b = FabricStore::connect(
            &s.local_addr().to_string(),
            ClientOptions {
                namespace: "other".into(),
                deadline: Some(Duration::from_secs(2)),
                ..Default::default()
            },
        )
        .unwrap();
        a.write_pages(&[7], &pattern(7, 1)).unwrap();
        b.write_pages(&[7], &pattern(7, 2)).unwrap();
        let (addr, key, _) = where_is(&a, 7);
        let (_, b_key, _) = where_is(&b, 7);
        assert_ne!(key, b_key, "two clients share a key");
        // b aims at a's page with every key it has: its keys open its own grants only, so it
        // reads its own bytes or nothing, never a's; and a key next to a's is no key.
        for k in lock(&b.table)
            .grants()
            .map(|h| h.grant.key)
            .collect::<Vec<_>>()
        {
            if let Ok(got) = raw(&b, false, addr, k) {
                assert_ne!(got, pattern(7, 1), "b read a's page with its own key");
            }
        }
        raw(&b, false, addr, key ^ 1).unwrap_err();
        let mut out = vec![0u8; PAGE_SIZE];
        a.read_pages(&[7], &mut out).unwrap();
        assert_eq!(out, pattern(7, 1), "a's page changed");
    }

    #[test]
    fn a_grant_given_back_can_no_longer_be_reached() {
        let Some((_s, c)) = pair_with(4096) else {
            return;
        };
        let ids: Vec<u64> = (0..(KEEP_FREE + 3 * ALLOC_CHUNK) as u64).collect();
        let data: Vec<u8> = ids.iter().flat_map(|&i| pattern(i, 3)).collect();
        c.write_pages(&ids, &data).unwrap();
        let before: Vec<Grant> = lock(&c.table).grants().map(|h| h.grant).collect();
        for g in &before {
            raw_read(&c, g.addr, g.key).expect("a held grant reads");
        }
        c.free_pages(&ids).unwrap();
        // Beyond KEEP_FREE free slots, whole grants went back: their keys open nothing.
        let t = lock(&c.table);
        assert!(
            t.free_slots() <= KEEP_FREE + ALLOC_CHUNK,
            "{}",
            t.free_slots()
        );
        let gone: Vec<Grant> = before
            .into_iter()
            .filter(|g| t.held(g.slot).is_none())
            .collect();
        drop(t);
        assert!(gone.len() >= 2, "{gone:?}");
        for g in gone {
            raw_read(&c, g.addr, g.key).expect_err("a released grant's key still reads");
        }
    }

    #[test]
    fn a_wrong_key_or_an_address_outside_the_pool_fails_and_the_store_recovers() {
        let Some((_s, c)) = pair() else {
            return;
        };
        c.write_pages(&[7], &pattern(7, 1)).unwrap();
        let (addr, key, grant) = where_is(&c, 7);
        raw_read(&c, addr, key).expect("the right key reads");
        let err = raw_read(&c, addr, key ^ 0x5a5a).unwrap_err();
        assert!(err.to_string().contains("fabric://"), "{err}");
        let past =
            addr + (grant.slot + grant.pages - lock(&c.table).slot(7).unwrap()) * PAGE_SIZE as u64;
        let err = raw_read(&c, past, key).unwrap_err();
        assert!(err.to_string().contains("fabric://"), "{err}");
        // The failed channels were dropped; the next request connects a new one.
        let mut out = vec![0u8; PAGE_SIZE];
        c.read_pages(&[7], &mut out).unwrap();
        assert_eq!(out, pattern(7, 1));
    }

    #[test]
    fn a_data_connection_without_a_live_session_is_refused() {
        let Some((_s, c)) = pair() else {
            return;
        };
        if !matches!(c.route, Route::Connect) {
            // Reliable datagrams take no connections: the grant's key is the whole check
            // (the tests above).
            return;
        }
        for session in [0u64, c.attach.session ^ 1] {
            let r = Channel::connect(
                &c.domain,
                &c.info,
                &ConnectData { session }.encode(),
                PAGE_SIZE,
                c.register,
                99,
                CONNECT_WAIT,
            );
            assert!(r.is_err(), "session {session:#x} was accepted");
        }
    }

    #[test]
    fn slots_of_neighbouring_pages_merge_into_one_transfer() {
        let Some((_s, c)) = pair() else {
            return;
        };
        let ids: Vec<u64> = (0..64).collect();
        let data: Vec<u8> = ids.iter().flat_map(|&i| pattern(i, 0)).collect();
        c.write_pages(&ids, &data).unwrap();
        let t = lock(&c.table);
        let slot = |id: u64| t.slot(id).unwrap();
        let slots = [slot(10), slot(11), slot(12), slot(40), slot(41)];
        assert_eq!(slots[1], slots[0] + 1, "free slots are taken in order");
        drop(t);
        let ops = c.plan(&slots, true).unwrap();
        assert_eq!(ops.len(), 2, "{ops:?}");
        assert_eq!((ops[0].offset, ops[0].len), (0, 3 * PAGE_SIZE));
        assert_eq!((ops[1].offset, ops[1].len), (3 * PAGE_SIZE, 2 * PAGE_SIZE));
        assert!(c.plan(&[1 << 40], false).is_err(), "a slot past the pool");
    }
}
