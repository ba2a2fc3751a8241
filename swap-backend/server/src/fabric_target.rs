//! The memory server's one-sided side: its page pool registered with libfabric, the listener
//! its clients' data endpoints connect to, and the slots each client holds.
//!
//! A one-sided server never sees page ids or page bytes: a client asks its control channel
//! (the TCP connection that said `Attach`) for free slots, keeps its own page -> slot table,
//! and reads and writes the slots with RDMA. What the server must guarantee is that a slot
//! belongs to one client at a time, and that only that client can reach it:
//! - slots are handed out in *grants* (runs of up to 256 slots), each registered for its
//!   client alone with a key of its own (random where the application chooses keys), so
//!   another client's requests, whatever they name, find no region they may use;
//! - over connected endpoints (`FI_EP_MSG`: tcp, verbs), a data connection is accepted only
//!   with the session its control channel was given, and a session's endpoints close with it;
//!   over reliable datagrams (`FI_EP_RDM`: shm, efa, `verbs;ofi_rxm`), where there are no
//!   connections, one endpoint serves every client, and the grant's key is the whole of the
//!   access check, as an rkey is on an RDMA NIC;
//! - a grant given back, or a session whose control channel closed, has its registration
//!   closed (the key revoked; a session's endpoints first) before its slots are zeroed and
//!   handed to anyone else.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use memliner_fabric_sys::memory::AnonMemory;
use memliner_fabric_sys::{
    Access, AddressVector, CompletionQueue, Domain, Endpoint, EpType, Event, EventQueue, Fabric,
    FabricError, Info, MemoryRegion, PassiveEndpoint, Peers, FI_MR_PROV_KEY, FI_MR_VIRT_ADDR,
};
use swap_backend::protocol::{AttachOk, ConnectData, Grant, PAGE_SIZE};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A grant's slots with the registration only its client may use.
struct Held {
    pages: u64,
    region: MemoryRegion,
}

#[derive(Default)]
struct Session {
    /// By first slot.
    grants: HashMap<u64, Held>,
    endpoints: Vec<Endpoint>,
}

#[derive(Default)]
struct Slots {
    /// Slots from here on were never handed out (and read as zeros).
    next: u64,
    /// Runs of slots given back (first, count), zeroed.
    free: Vec<(u64, u64)>,
    /// Slots in `free`.
    free_pages: u64,
}

/// How clients' data endpoints reach the pool.
enum Listener {
    /// `FI_EP_MSG`: each client connects endpoints of its own, carrying its session.
    Connections {
        pep: PassiveEndpoint,
        eq: Arc<EventQueue>,
        port: u16,
    },
    /// `FI_EP_RDM`: one endpoint, which clients address by its name (held open: it is what
    /// serves their reads and writes).
    Datagrams { _ep: Endpoint, name: Vec<u8> },
}

/// The pool, the listener and the sessions.
pub struct Target {
    provider: String,
    verbose: bool,
    /// Whether its progress is polled for (shm) rather than waited for.
    poll_only: bool,
    /// `FI_MR_*` modes the provider asked for: virtual addresses, its own keys.
    mr_mode: i32,
    /// Bytes of an application-chosen key.
    key_bytes: usize,
    capacity_pages: u64,
    slots: Mutex<Slots>,
    sessions: Mutex<HashMap<u64, Session>>,
    stopping: AtomicBool,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Kernel ids of those threads, for their CPU time.
    tids: Mutex<Vec<u32>>,
    // Drop order: the listener and queues, then (with the sessions) the regions, the pool, the
    // domain.
    listener: Listener,
    cq: Arc<CompletionQueue>,
    pool: Arc<AnonMemory>,
    domain: Arc<Domain>,
}

fn random_u64() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_err()
    {
        // Never reached on Linux; a clock-derived value still differs between runs.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        return t.as_nanos() as u64 ^ (std::process::id() as u64) << 32;
    }
    u64::from_le_bytes(b)
}

impl Target {
    /// Registers a pool of `capacity_pages` and listens on `host` (any free port) with
    /// `provider` (`None`: [`swap_backend::fabric::provider_choice`]): over connected endpoints where the
    /// provider has them, else over reliable datagrams (see [`swap_backend::fabric::listen_info`]).
    pub fn start(
        host: &str,
        capacity_pages: u64,
        verbose: bool,
        provider: Option<&str>,
    ) -> Result<Arc<Target>, String> {
        let provider = provider
            .map(str::to_string)
            .or_else(swap_backend::fabric::provider_choice);
        let info = swap_backend::fabric::listen_info(host, provider.as_deref())
            .map_err(|e| swap_backend::fabric::no_provider(e, host, provider.as_deref()))?;
        let err = |e: FabricError| {
            format!(
                "libfabric ({}, {}) on {host}: {e}",
                info.provider(),
                <&str>::from(info.ep_type())
            )
        };
        let fabric = Fabric::open(&info).map_err(err)?;
        let domain = Domain::open(&fabric, &info).map_err(err)?;
        let cq = CompletionQueue::open(&domain, 1024).map_err(err)?;
        let listener = if info.ep_type() == EpType::Rdm {
            let av = AddressVector::open(&domain).map_err(err)?;
            let ep = Endpoint::open(&domain, &info, &Peers::Addressed(av), &cq).map_err(err)?;
            let name = ep.name().map_err(err)?;
            Listener::Datagrams { _ep: ep, name }
        } else {
            let eq = EventQueue::open(&fabric).map_err(err)?;
            let pep = PassiveEndpoint::listen(&fabric, &info, &eq).map_err(err)?;
            let port = pep.port().map_err(err)?;
            Listener::Connections { pep, eq, port }
        };
        let bytes = capacity_pages as usize * PAGE_SIZE;
        let pool = Arc::new(
            AnonMemory::new(bytes)
                .map_err(|e| format!("cannot reserve a page pool of {bytes} bytes: {e}"))?,
        );
        let target = Arc::new(Target {
            provider: info.provider(),
            verbose,
            poll_only: !memliner_fabric_sys::blocking_read_progresses(&info),
            mr_mode: info.mr_mode(),
            key_bytes: info.mr_key_size().min(8),
            capacity_pages,
            slots: Mutex::new(Slots::default()),
            sessions: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            tids: Mutex::new(Vec::new()),
            listener,
            cq,
            pool,
            domain,
        });
        let (t1, t2) = (target.clone(), target.clone());
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(f)
                .map_err(|e| format!("cannot start the {name} thread: {e}"))
        };
        let progress = spawn(
            "memliner-fabric-progress",
            Box::new(move || t2.progress_loop()),
        )?;
        lock(&target.threads).push(progress);
        if matches!(target.listener, Listener::Connections { .. }) {
            let cm = spawn("memliner-fabric-cm", Box::new(move || t1.accept_loop()))?;
            lock(&target.threads).push(cm);
        }
        Ok(target)
    }

    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// The port data connections are accepted on (0 over reliable datagrams, which take no
    /// connections).
    pub fn port(&self) -> u16 {
        match self.listener {
            Listener::Connections { port, .. } => port,
            Listener::Datagrams { .. } => 0,
        }
    }

    /// The endpoint type clients use: `FI_EP_MSG` or `FI_EP_RDM`.
    pub fn ep_type(&self) -> &'static str {
        match self.listener {
            Listener::Connections { .. } => EpType::Msg.into(),
            Listener::Datagrams { .. } => EpType::Rdm.into(),
        }
    }

    /// A new session for a control channel.
    pub fn attach(&self) -> AttachOk {
        let mut sessions = lock(&self.sessions);
        let session = loop {
            let s = random_u64();
            if s != 0 && !sessions.contains_key(&s) {
                break s;
            }
        };
        sessions.insert(session, Session::default());
        AttachOk {
            port: self.port(),
            session,
            provider: self.provider.clone(),
            endpoint: match &self.listener {
                Listener::Connections { .. } => Vec::new(),
                Listener::Datagrams { name, .. } => name.clone(),
            },
        }
    }

    /// Takes `count` free slots for `session`, as grants registered for it. The caller has
    /// reserved that much of the server's capacity first, and the pool holds the whole
    /// capacity, so an error means the session has ended (the server is stopping) or the
    /// provider refused a registration.
    pub fn alloc(&self, session: u64, count: u32) -> Result<Vec<Grant>, String> {
        let mut sessions = lock(&self.sessions);
        let s = sessions.get_mut(&session).ok_or("the session has ended")?;
        let runs = {
            let mut slots = lock(&self.slots);
            let fresh = self.capacity_pages - slots.next;
            if slots.free_pages + fresh < count as u64 {
                return Err(format!("the pool has fewer than {count} free slots"));
            }
            let mut runs = Vec::new();
            let mut left = count as u64;
            while left > 0 {
                let (first, n) = match slots.free.pop() {
                    Some((first, n)) if n > left => {
                        // The rest of the run stays free.
                        slots.free.push((first + left, n - left));
                        slots.free_pages -= left;
                        (first, left)
                    }
                    Some((first, n)) => {
                        slots.free_pages -= n;
                        (first, n)
                    }
                    None => {
                        let first = slots.next;
                        slots.next += left;
                        (first, left)
                    }
                };
                left -= n;
                runs.push((first, n));
            }
            runs
        };
        let mut grants = Vec::with_capacity(runs.len());
        for &(first, pages) in &runs {
            match self.register(first, pages) {
                Ok((region, grant)) => {
                    s.grants.insert(first, Held { pages, region });
                    grants.push(grant);
                }
                Err(e) => {
                    // Nothing of this request is handed out: what was registered goes back.
                    for g in &grants {
                        s.grants.remove(&g.slot);
                    }
                    drop(sessions);
                    self.recycle(runs.iter().copied());
                    return Err(format!("cannot register slots for a client: {e}"));
                }
            }
        }
        Ok(grants)
    }

    /// Registers `pages` slots from `first` on with a key of their own.
    fn register(&self, first: u64, pages: u64) -> Result<(MemoryRegion, Grant), FabricError> {
        let offset = first as usize * PAGE_SIZE;
        let len = pages as usize * PAGE_SIZE;
        let prov_key = self.mr_mode & FI_MR_PROV_KEY != 0;
        let mut tries = 0;
        loop {
            // An application key nobody can guess (a collision with a live one, 2^-48 or so
            // for 8-byte keys, is refused by the provider and drawn again).
            let key = match self.key_bytes {
                0 | 8 => random_u64() >> 16,
                n => random_u64() & ((1u64 << (8 * n)) - 1),
            };
            match MemoryRegion::register(&self.domain, &self.pool, offset, len, Access::Remote, key)
            {
                Ok(r) => {
                    let grant = Grant {
                        slot: first,
                        pages,
                        addr: if self.mr_mode & FI_MR_VIRT_ADDR != 0 {
                            r.addr()
                        } else {
                            0
                        },
                        key: if prov_key { r.key() } else { key },
                    };
                    return Ok((r, grant));
                }
                Err(e) if prov_key || tries == 3 => return Err(e),
                Err(_) => tries += 1,
            }
        }
    }

    /// Gives grants of `session` back (each named by its first slot): their registrations
    /// closed, their slots zeroed and freed. Returns how many slots they held; an error names
    /// the first one the session does not hold (and nothing is released then).
    pub fn release(&self, session: u64, grants: &[u64]) -> Result<u64, String> {
        let held: Vec<(u64, Held)> = {
            let mut sessions = lock(&self.sessions);
            let s = sessions.get_mut(&session).ok_or("the session has ended")?;
            if let Some(bad) = grants.iter().find(|g| !s.grants.contains_key(g)) {
                return Err(format!("slot {bad} starts no grant of this client's"));
            }
            let mut unique = grants.to_vec();
            unique.sort_unstable();
            unique.dedup();
            unique
                .iter()
                .filter_map(|&g| s.grants.remove(&g).map(|h| (g, h)))
                .collect()
        };
        let mut runs = Vec::with_capacity(held.len());
        let mut pages = 0;
        for (first, h) in held {
            runs.push((first, h.pages));
            pages += h.pages;
            // Closing the registration revokes its key before the slots are zeroed.
            drop(h.region);
        }
        self.recycle(runs.into_iter());
        Ok(pages)
    }

    /// Ends a session: its endpoints closed first (no transfer of its can land afterwards),
    /// then its registrations, then its slots zeroed and freed. Returns how many slots it
    /// held.
    pub fn detach(&self, session: u64) -> u64 {
        let Some(s) = lock(&self.sessions).remove(&session) else {
            return 0;
        };
        drop(s.endpoints);
        let runs: Vec<(u64, u64)> = s.grants.iter().map(|(&f, h)| (f, h.pages)).collect();
        drop(s.grants);
        let n = runs.iter().map(|r| r.1).sum();
        self.recycle(runs.into_iter());
        n
    }

    fn recycle(&self, runs: impl Iterator<Item = (u64, u64)>) {
        let runs: Vec<(u64, u64)> = runs.collect();
        for &(first, n) in &runs {
            // Zeroed so the next owner never reads this one's pages.
            self.pool
                .zero(first as usize * PAGE_SIZE, n as usize * PAGE_SIZE);
        }
        let mut slots = lock(&self.slots);
        slots.free_pages += runs.iter().map(|r| r.1).sum::<u64>();
        slots.free.extend(runs);
    }

    fn accept_loop(&self) {
        let Listener::Connections { eq, .. } = &self.listener else {
            return;
        };
        while !self.stopping.load(Ordering::SeqCst) {
            match eq.wait(Duration::from_millis(200)) {
                Ok(Event::ConnectRequest { info, data }) => self.on_request(info, &data),
                Ok(Event::Shutdown { endpoint }) => {
                    // The client closed this data endpoint: close ours.
                    for s in lock(&self.sessions).values_mut() {
                        s.endpoints.retain(|e| e.id() != endpoint);
                    }
                }
                Ok(Event::Connected { .. } | Event::Timeout) => {}
                Err(e) => {
                    if self.verbose {
                        eprintln!("memliner-server: fabric connection event: {e}");
                    }
                }
            }
        }
    }

    fn on_request(&self, info: Info, data: &[u8]) {
        let Listener::Connections { pep, eq, .. } = &self.listener else {
            return;
        };
        let session = match ConnectData::decode(data) {
            Ok(d) => d.session,
            Err(why) => {
                eprintln!("memliner-server: refused a fabric connection: {why}");
                pep.reject(&info);
                return;
            }
        };
        let mut sessions = lock(&self.sessions);
        let Some(s) = sessions.get_mut(&session).filter(|_| session != 0) else {
            drop(sessions);
            eprintln!("memliner-server: refused a fabric connection with no live session");
            pep.reject(&info);
            return;
        };
        let peers = Peers::Connected(eq.clone());
        let accepted = Endpoint::open(&self.domain, &info, &peers, &self.cq).and_then(|ep| {
            ep.accept()?;
            Ok(ep)
        });
        match accepted {
            Ok(ep) => s.endpoints.push(ep),
            Err(e) => eprintln!("memliner-server: cannot accept a fabric connection: {e}"),
        }
    }

    /// Waits on the completion queue: a target that posts nothing still has to drive its
    /// provider's progress, or the first read of a client hangs. It blocks, so with a
    /// software provider (tcp) every request costs the server a wake: 4 KiB reads over
    /// loopback at queue depth 1 took 41 us p50 so, 11.5 us with this thread polling without
    /// pause. Spinning only after a request, as the TCP server does, would need to know a
    /// request was served; tcp grants FI_RMA_EVENT, but its counter of served operations
    /// never moved (1.17). On a NIC the server's CPU takes no part in one-sided operations.
    ///
    /// Over shm it polls, sleeping 50 us between: shm's blocking read yields without driving
    /// progress, and a read it does not progress never completes (see
    /// scripts/shm-rma-probe.sh). That costs this thread a wake every 50 us while the server
    /// runs, which is why `unix://`, not shm, is what one host uses.
    fn progress_loop(&self) {
        while !self.stopping.load(Ordering::SeqCst) {
            if self.poll_only {
                if let Ok(0) = self.cq.poll() {
                    std::thread::sleep(Duration::from_micros(50));
                }
            } else {
                let _ = self.cq.wait(Duration::from_millis(200));
            }
        }
    }

    /// CPU time the listener's and the progress thread have used (while they run).
    pub fn cpu_time(&self) -> Duration {
        lock(&self.tids)
            .iter()
            .filter_map(|&t| memliner_cpu::cpu_time_of(t))
            .sum()
    }

    /// Stops the threads and closes every session's endpoints.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        for t in lock(&self.threads).drain(..) {
            let _ = t.join();
        }
        for (_, s) in lock(&self.sessions).drain() {
            drop(s.endpoints);
        }
    }
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("provider", &self.provider)
            .field("port", &self.port())
            .field("endpoints", &self.ep_type())
            .finish()
    }
}
