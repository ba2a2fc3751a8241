//! The memory server's one-sided side: its page pool registered with libfabric, the listener
//! its clients' data endpoints connect to, and the slots each client holds.
//!
//! A one-sided server never sees page ids or page bytes: a client asks its control channel
//! (the TCP connection that said `Attach`) for free slots, keeps its own page -> slot table,
//! and reads and writes the slots with RDMA. What the server must guarantee is that a slot
//! belongs to one client at a time: a data connection is accepted only with the session the
//! control channel was given, and when a control channel closes, its session's endpoints are
//! closed before its slots are zeroed and handed to anyone else.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::fabric_ffi::{
    Access, CompletionQueue, Domain, Endpoint, Event, EventQueue, Fabric, FabricError, Info,
    MemoryRegion, PassiveEndpoint, FI_MR_PROV_KEY, FI_MR_VIRT_ADDR,
};
use crate::memory::AnonMemory;
use crate::protocol::{AttachOk, RemoteRegion, PAGE_SIZE};

/// Bytes per registered region: large enough that a pool is a handful of them, small enough
/// for every provider's largest registration.
pub const REGION_BYTES: usize = 1 << 30;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Default)]
struct Session {
    slots: HashSet<u64>,
    endpoints: Vec<Endpoint>,
}

#[derive(Default)]
struct Slots {
    /// Slots from here on were never handed out (and read as zeros).
    next: u64,
    /// Slots given back, zeroed.
    free: Vec<u64>,
}

/// The pool, the listener and the sessions.
pub struct Target {
    provider: String,
    port: u16,
    verbose: bool,
    region_pages: u64,
    remote: Vec<RemoteRegion>,
    capacity_pages: u64,
    slots: Mutex<Slots>,
    sessions: Mutex<HashMap<u64, Session>>,
    stopping: AtomicBool,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Kernel ids of those threads, for their CPU time.
    tids: Mutex<Vec<u32>>,
    // Drop order: the listener and queues, then the regions, the pool, the domain.
    pep: PassiveEndpoint,
    eq: Arc<EventQueue>,
    cq: Arc<CompletionQueue>,
    _regions: Vec<MemoryRegion>,
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
    /// Registers a pool of `capacity_pages` and listens on `host` (any free port).
    pub fn start(host: &str, capacity_pages: u64, verbose: bool) -> Result<Arc<Target>, String> {
        let provider = super::provider_choice();
        let info = Info::rma(host, "0", true, provider.as_deref())
            .map_err(|e| super::no_provider(e, host, provider.as_deref()))?;
        let err = |e: FabricError| format!("libfabric ({}) on {host}: {e}", info.provider());
        let fabric = Fabric::open(&info).map_err(err)?;
        let domain = Domain::open(&fabric, &info).map_err(err)?;
        let eq = EventQueue::open(&fabric).map_err(err)?;
        let cq = CompletionQueue::open(&domain, 1024).map_err(err)?;
        let pep = PassiveEndpoint::listen(&fabric, &info, &eq).map_err(err)?;
        let port = pep.port().map_err(err)?;
        let bytes = capacity_pages as usize * PAGE_SIZE;
        let pool = Arc::new(
            AnonMemory::new(bytes)
                .map_err(|e| format!("cannot reserve a page pool of {bytes} bytes: {e}"))?,
        );
        let mr_mode = info.mr_mode();
        let base_key = if info.mr_key_size() >= 8 {
            random_u64() >> 16
        } else {
            0
        };
        let mut regions = Vec::new();
        let mut remote = Vec::new();
        for (i, offset) in (0..bytes).step_by(REGION_BYTES).enumerate() {
            let len = REGION_BYTES.min(bytes - offset);
            let r = MemoryRegion::register(
                &domain,
                &pool,
                offset,
                len,
                Access::Remote,
                base_key + i as u64,
            )
            .map_err(err)?;
            remote.push(RemoteRegion {
                addr: if mr_mode & FI_MR_VIRT_ADDR != 0 {
                    r.addr()
                } else {
                    0
                },
                len: len as u64,
                key: if mr_mode & FI_MR_PROV_KEY != 0 {
                    r.key()
                } else {
                    base_key + i as u64
                },
            });
            regions.push(r);
        }
        let target = Arc::new(Target {
            provider: info.provider(),
            port,
            verbose,
            region_pages: (REGION_BYTES / PAGE_SIZE) as u64,
            remote,
            capacity_pages,
            slots: Mutex::new(Slots::default()),
            sessions: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            tids: Mutex::new(Vec::new()),
            pep,
            eq,
            cq,
            _regions: regions,
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
        let cm = spawn("memliner-fabric-cm", Box::new(move || t1.accept_loop()))?;
        let progress = spawn(
            "memliner-fabric-progress",
            Box::new(move || t2.progress_loop()),
        )?;
        lock(&target.threads).extend([cm, progress]);
        Ok(target)
    }

    pub fn provider(&self) -> &str {
        &self.provider
    }

    pub fn port(&self) -> u16 {
        self.port
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
            port: self.port,
            session,
            provider: self.provider.clone(),
            region_pages: self.region_pages,
            regions: self.remote.clone(),
        }
    }

    /// Takes `count` free slots for `session`. The caller has reserved that much of the
    /// server's capacity first, and the pool holds the whole capacity, so an error means the
    /// session has ended (the server is stopping).
    pub fn alloc(&self, session: u64, count: u32) -> Result<Vec<u64>, String> {
        let mut sessions = lock(&self.sessions);
        let s = sessions.get_mut(&session).ok_or("the session has ended")?;
        let mut slots = lock(&self.slots);
        let fresh = self.capacity_pages - slots.next;
        if (slots.free.len() as u64 + fresh) < count as u64 {
            return Err(format!("the pool has fewer than {count} free slots"));
        }
        let mut got = Vec::with_capacity(count as usize);
        while got.len() < count as usize {
            match slots.free.pop() {
                Some(x) => got.push(x),
                None => {
                    got.push(slots.next);
                    slots.next += 1;
                }
            }
        }
        s.slots.extend(&got);
        Ok(got)
    }

    /// Gives `slots` of `session` back; an error names the first one it does not hold (and
    /// nothing is released then).
    pub fn release(&self, session: u64, slots: &[u64]) -> Result<(), String> {
        {
            let mut sessions = lock(&self.sessions);
            let s = sessions.get_mut(&session).ok_or("the session has ended")?;
            if let Some(bad) = slots.iter().find(|x| !s.slots.contains(x)) {
                return Err(format!("slot {bad} is not held by this client"));
            }
            for x in slots {
                s.slots.remove(x);
            }
        }
        self.recycle(slots.iter().copied());
        Ok(())
    }

    /// Ends a session: its endpoints closed first (no transfer of its can land afterwards),
    /// then its slots zeroed and freed. Returns how many slots it held.
    pub fn detach(&self, session: u64) -> u64 {
        let Some(s) = lock(&self.sessions).remove(&session) else {
            return 0;
        };
        let n = s.slots.len() as u64;
        drop(s.endpoints);
        self.recycle(s.slots.into_iter());
        n
    }

    fn recycle(&self, slots: impl Iterator<Item = u64>) {
        let slots: Vec<u64> = slots.collect();
        for &s in &slots {
            // Zeroed so the next owner never reads this one's pages.
            self.pool.zero(s as usize * PAGE_SIZE, PAGE_SIZE);
        }
        lock(&self.slots).free.extend(slots);
    }

    fn accept_loop(&self) {
        while !self.stopping.load(Ordering::SeqCst) {
            match self.eq.wait(Duration::from_millis(200)) {
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
        let session = data
            .get(0..8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()));
        let mut sessions = lock(&self.sessions);
        let Some(s) = sessions.get_mut(&session).filter(|_| session != 0) else {
            drop(sessions);
            eprintln!("memliner-server: refused a fabric connection with no live session");
            self.pep.reject(&info);
            return;
        };
        let accepted = Endpoint::open(&self.domain, &info, &self.eq, &self.cq).and_then(|ep| {
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
    fn progress_loop(&self) {
        while !self.stopping.load(Ordering::SeqCst) {
            let _ = self.cq.wait(Duration::from_millis(200));
        }
    }

    /// CPU time the listener's and the progress thread have used (while they run).
    pub fn cpu_time(&self) -> Duration {
        lock(&self.tids)
            .iter()
            .filter_map(|&t| crate::cpu::cpu_time_of(t))
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
            .field("port", &self.port)
            .finish()
    }
}
