//! libfabric's objects (fabric, domain, event and completion queues, memory regions, active and
//! passive endpoints) as owned Rust values that close themselves. Each holds an `Arc` of what
//! it was opened from, so closing follows libfabric's order (endpoints before their queues,
//! queues and regions before their domain, the domain before its fabric) whatever order the
//! owners drop them in.

use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::layout::*;
use super::{load, Info, Libfabric};
use crate::memory::AnonMemory;

// ---- errors --------------------------------------------------------------------------------

/// A failed libfabric call: which one, and libfabric's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FabricError {
    pub call: &'static str,
    /// The (positive) `FI_E*` / errno value.
    pub code: c_int,
    pub message: String,
}

impl std::fmt::Display for FabricError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.call, self.message)
    }
}

impl std::error::Error for FabricError {}

fn lib() -> &'static Libfabric {
    load().expect("fabric objects exist only once libfabric is loaded")
}

/// `Ok` for 0 (or any non-negative count), else the error of `call`.
pub(super) fn check(call: &'static str, rc: isize) -> Result<usize, FabricError> {
    if rc >= 0 {
        return Ok(rc as usize);
    }
    let code = (-rc) as c_int;
    Err(FabricError {
        call,
        code,
        message: lib().strerror(code),
    })
}

pub(super) fn fail(call: &'static str, code: c_int, message: String) -> FabricError {
    FabricError {
        call,
        code,
        message,
    }
}

/// Whether the function table at `table` (whose first member is its size) holds the member
/// ending at byte `end`: a provider built against an older libfabric may hand out shorter
/// tables, and calling past one's end would jump anywhere.
///
/// # Safety
/// `table` points to a live table whose first member is its `size_t` size.
unsafe fn has_member<T>(table: *const T, end: usize) -> bool {
    // SAFETY: per the contract, the first member is readable.
    !table.is_null() && unsafe { *(table as *const usize) } >= end
}

macro_rules! member_end {
    ($t:ty, $m:ident) => {
        std::mem::offset_of!($t, $m) + std::mem::size_of::<usize>()
    };
}

/// Calls `close` on a fid, reporting nothing (it runs from `Drop`).
///
/// # Safety
/// `fid` is a live, open libfabric object not used after this.
unsafe fn close(fid: *mut Fid) {
    // SAFETY: every fid's ops table has close (the first entry after the size).
    unsafe { ((*(*fid).ops).close)(fid) };
}

// ---- fabric, domain ------------------------------------------------------------------------

/// An open fabric (`fi_fabric`).
pub struct Fabric {
    raw: *mut FidFabric,
}

// SAFETY: libfabric objects are thread safe under FI_THREAD_SAFE, which every info this
// module opens asks for (see `Info::get`).
unsafe impl Send for Fabric {}
// SAFETY: as above.
unsafe impl Sync for Fabric {}

impl Fabric {
    pub fn open(info: &Info) -> Result<Arc<Fabric>, FabricError> {
        let lib = lib();
        let mut raw: *mut FidFabric = std::ptr::null_mut();
        // SAFETY: the fabric attributes of a live info; a place for the result (a fid_fabric).
        let rc = unsafe {
            (lib.fabric)(
                (*info.head()).fabric_attr,
                (&mut raw as *mut *mut FidFabric).cast(),
                std::ptr::null_mut(),
            )
        };
        check("fi_fabric", rc as isize)?;
        // SAFETY: fi_fabric succeeded: raw is a live fabric whose ops table we check.
        if !unsafe { has_member((*raw).ops, member_end!(OpsFabric, eq_open)) } {
            // SAFETY: opened just above, not used after.
            unsafe { close(raw.cast()) };
            return Err(fail(
                "fi_fabric",
                0,
                "the provider's fabric table is too short".into(),
            ));
        }
        Ok(Arc::new(Fabric { raw }))
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        // SAFETY: ours, and everything opened from it holds an Arc of it, so nothing is left.
        unsafe { close(self.raw.cast()) };
    }
}

/// An open domain: one NIC (or one interface, for tcp), where memory is registered.
pub struct Domain {
    raw: *mut FidDomain,
    fabric: Arc<Fabric>,
}

// SAFETY: see Fabric.
unsafe impl Send for Domain {}
// SAFETY: see Fabric.
unsafe impl Sync for Domain {}

impl Domain {
    pub fn open(fabric: &Arc<Fabric>, info: &Info) -> Result<Arc<Domain>, FabricError> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: a live fabric (its table checked at open) and a live info.
        let rc = unsafe {
            ((*(*fabric.raw).ops).domain)(fabric.raw, info.head(), &mut raw, std::ptr::null_mut())
        };
        check("fi_domain", rc as isize)?;
        // SAFETY: a live domain; its tables checked before any use.
        let ok = unsafe {
            has_member((*raw).ops, member_end!(OpsDomain, endpoint))
                && has_member((*raw).mr, member_end!(OpsMr, reg))
        };
        if !ok {
            // SAFETY: opened just above.
            unsafe { close(raw.cast()) };
            return Err(fail(
                "fi_domain",
                0,
                "the provider's domain table is too short".into(),
            ));
        }
        Ok(Arc::new(Domain {
            raw,
            fabric: fabric.clone(),
        }))
    }

    pub fn fabric(&self) -> &Arc<Fabric> {
        &self.fabric
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        // SAFETY: ours; regions, queues and endpoints hold Arcs of it.
        unsafe { close(self.raw.cast()) };
    }
}

/// Who may touch a registered region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// This side's own reads into and writes from it (`FI_READ | FI_WRITE`).
    Local,
    /// Peers' one-sided reads and writes (`FI_REMOTE_READ | FI_REMOTE_WRITE`).
    Remote,
}

/// A registered memory region: a range of a [`Memory`] with its descriptor and key.
pub struct MemoryRegion {
    raw: *mut FidMr,
    memory: Arc<AnonMemory>,
    offset: usize,
    len: usize,
    _domain: Arc<Domain>,
}

// SAFETY: see Fabric; the region's bytes are reached only by transfers.
unsafe impl Send for MemoryRegion {}
// SAFETY: see Fabric.
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// Registers `memory[offset..offset + len]`. `key` is used where the provider lets the
    /// application choose keys (not `FI_MR_PROV_KEY`); it must be unique within the domain.
    pub fn register(
        domain: &Arc<Domain>,
        memory: &Arc<AnonMemory>,
        offset: usize,
        len: usize,
        access: Access,
        key: u64,
    ) -> Result<MemoryRegion, FabricError> {
        assert!(offset + len <= memory.len());
        let access = match access {
            Access::Local => FI_READ | FI_WRITE,
            Access::Remote => FI_REMOTE_READ | FI_REMOTE_WRITE,
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: a live domain (mr table checked at open) and a range inside a mapping that
        // outlives the region (we keep an Arc of it).
        let rc = unsafe {
            ((*(*domain.raw).mr).reg)(
                &mut (*domain.raw).fid,
                memory.at(offset).cast(),
                len,
                access,
                0,
                key,
                0,
                &mut raw,
                std::ptr::null_mut(),
            )
        };
        check("fi_mr_reg", rc as isize)?;
        Ok(MemoryRegion {
            raw,
            memory: memory.clone(),
            offset,
            len,
            _domain: domain.clone(),
        })
    }

    /// The key a peer presents to reach this region.
    pub fn key(&self) -> u64 {
        // SAFETY: a live region; `key` is a plain field (fi_mr_key).
        unsafe { (*self.raw).key }
    }

    pub(super) fn desc(&self) -> *mut c_void {
        // SAFETY: a live region; `mem_desc` is a plain field (fi_mr_desc).
        unsafe { (*self.raw).mem_desc }
    }

    /// The region's address in this process (a peer's base for `FI_MR_VIRT_ADDR`).
    pub fn addr(&self) -> u64 {
        self.memory.addr() + self.offset as u64
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: ours; endpoints that could be using it are closed before their channel's
        // region (field order in Channel) and a server closes its endpoints before its pool.
        unsafe { close(self.raw.cast()) };
    }
}

// ---- queues --------------------------------------------------------------------------------

/// An event queue: connection requests, established and closed connections.
pub struct EventQueue {
    raw: *mut FidEq,
    _fabric: Arc<Fabric>,
}

// SAFETY: see Fabric.
unsafe impl Send for EventQueue {}
// SAFETY: see Fabric.
unsafe impl Sync for EventQueue {}

/// What [`EventQueue::wait`] saw.
#[derive(Debug)]
pub enum Event {
    /// A peer asks to connect; `data` is what it sent with the request.
    ConnectRequest { info: Info, data: Vec<u8> },
    /// The endpoint with this id is connected.
    Connected { endpoint: usize },
    /// The endpoint with this id lost its peer.
    Shutdown { endpoint: usize },
    /// Nothing before the timeout.
    Timeout,
}

impl EventQueue {
    pub fn open(fabric: &Arc<Fabric>) -> Result<Arc<EventQueue>, FabricError> {
        let mut attr = EqAttr {
            size: 0,
            flags: 0,
            wait_obj: FI_WAIT_UNSPEC,
            signaling_vector: 0,
            wait_set: std::ptr::null_mut(),
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: a live fabric (table checked), an attribute struct, a place for the result.
        let rc = unsafe {
            ((*(*fabric.raw).ops).eq_open)(fabric.raw, &mut attr, &mut raw, std::ptr::null_mut())
        };
        check("fi_eq_open", rc as isize)?;
        // SAFETY: a live queue; its table checked before use.
        if !unsafe { has_member((*raw).ops, member_end!(OpsEq, sread)) } {
            // SAFETY: opened just above.
            unsafe { close(raw.cast()) };
            return Err(fail(
                "fi_eq_open",
                0,
                "the provider's queue table is too short".into(),
            ));
        }
        Ok(Arc::new(EventQueue {
            raw,
            _fabric: fabric.clone(),
        }))
    }

    /// Waits up to `timeout` for the next event (an error event is returned as the error).
    pub fn wait(&self, timeout: Duration) -> Result<Event, FabricError> {
        #[repr(C)]
        struct CmEntry {
            fid: *mut Fid,
            info: *mut RawInfo,
            data: [u8; CM_DATA_MAX],
        }
        let mut entry = CmEntry {
            fid: std::ptr::null_mut(),
            info: std::ptr::null_mut(),
            data: [0; CM_DATA_MAX],
        };
        let mut event = 0u32;
        let ms = timeout.as_millis().min(i32::MAX as u128) as c_int;
        // SAFETY: a live queue (table checked at open) and a buffer of the size given.
        let n = unsafe {
            ((*(*self.raw).ops).sread)(
                self.raw,
                &mut event,
                (&mut entry as *mut CmEntry).cast(),
                std::mem::size_of::<CmEntry>(),
                ms,
                0,
            )
        };
        if n == -(FI_EAGAIN as isize) || n == -(libc::ETIMEDOUT as isize) {
            return Ok(Event::Timeout);
        }
        if n == -(FI_EAVAIL as isize) {
            return Err(self.error());
        }
        let n = check("fi_eq_sread", n)?;
        let header = std::mem::offset_of!(CmEntry, data);
        Ok(match event {
            FI_CONNREQ => Event::ConnectRequest {
                // SAFETY: a connection request carries an fi_info that is ours to free.
                info: unsafe { Info::from_raw(entry.info) },
                data: entry.data[..n.saturating_sub(header).min(CM_DATA_MAX)].to_vec(),
            },
            FI_CONNECTED => Event::Connected {
                endpoint: entry.fid as usize,
            },
            FI_SHUTDOWN => Event::Shutdown {
                endpoint: entry.fid as usize,
            },
            other => return Err(fail("fi_eq_sread", 0, format!("unexpected event {other}"))),
        })
    }

    fn error(&self) -> FabricError {
        // SAFETY: a zeroed error entry is a valid input (err_data_size 0: no error data).
        let mut e: EqErrEntry = unsafe { std::mem::zeroed() };
        // SAFETY: a live queue and an entry to fill.
        let n = unsafe { ((*(*self.raw).ops).readerr)(self.raw, &mut e, 0) };
        if n < 0 {
            return check("fi_eq_readerr", n).unwrap_err();
        }
        fail("connection", e.err, lib().strerror(e.err))
    }
}

impl Drop for EventQueue {
    fn drop(&mut self) {
        // SAFETY: ours; endpoints bound to it hold Arcs of it.
        unsafe { close(self.raw.cast()) };
    }
}

/// A completion queue: where the operations a channel posts report.
pub struct CompletionQueue {
    raw: *mut FidCq,
    _domain: Arc<Domain>,
}

// SAFETY: see Fabric.
unsafe impl Send for CompletionQueue {}
// SAFETY: see Fabric.
unsafe impl Sync for CompletionQueue {}

impl CompletionQueue {
    pub fn open(domain: &Arc<Domain>, size: usize) -> Result<Arc<CompletionQueue>, FabricError> {
        let mut attr = CqAttr {
            size,
            flags: 0,
            format: FI_CQ_FORMAT_CONTEXT,
            wait_obj: FI_WAIT_UNSPEC,
            signaling_vector: 0,
            wait_cond: 0,
            wait_set: std::ptr::null_mut(),
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: a live domain (table checked), an attribute struct, a place for the result.
        let rc = unsafe {
            ((*(*domain.raw).ops).cq_open)(domain.raw, &mut attr, &mut raw, std::ptr::null_mut())
        };
        check("fi_cq_open", rc as isize)?;
        // SAFETY: a live queue; its table checked before use.
        if !unsafe { has_member((*raw).ops, member_end!(OpsCq, sread)) } {
            // SAFETY: opened just above.
            unsafe { close(raw.cast()) };
            return Err(fail(
                "fi_cq_open",
                0,
                "the provider's queue table is too short".into(),
            ));
        }
        Ok(Arc::new(CompletionQueue {
            raw,
            _domain: domain.clone(),
        }))
    }

    /// Reaps finished operations without blocking: how many.
    pub fn poll(&self) -> Result<usize, FabricError> {
        let mut entries = [std::ptr::null_mut::<c_void>(); 16];
        // SAFETY: a live queue and room for 16 context-format entries.
        let n = unsafe { ((*(*self.raw).ops).read)(self.raw, entries.as_mut_ptr().cast(), 16) };
        self.reaped("fi_cq_read", n)
    }

    /// Blocks up to `timeout` for finished operations: how many (0 at the timeout). This is
    /// also what drives a provider's progress on a side that posts nothing (a server).
    pub fn wait(&self, timeout: Duration) -> Result<usize, FabricError> {
        let mut entries = [std::ptr::null_mut::<c_void>(); 16];
        let ms = timeout.as_millis().min(i32::MAX as u128) as c_int;
        // SAFETY: a live queue and room for 16 context-format entries; no wait condition.
        let n = unsafe {
            ((*(*self.raw).ops).sread)(
                self.raw,
                entries.as_mut_ptr().cast(),
                16,
                std::ptr::null(),
                ms,
            )
        };
        if n == -(libc::ETIMEDOUT as isize) {
            return Ok(0);
        }
        self.reaped("fi_cq_sread", n)
    }

    fn reaped(&self, call: &'static str, n: isize) -> Result<usize, FabricError> {
        if n == -(FI_EAGAIN as isize) {
            return Ok(0);
        }
        if n == -(FI_EAVAIL as isize) {
            return Err(self.error());
        }
        check(call, n)
    }

    fn error(&self) -> FabricError {
        // SAFETY: a zeroed error entry is a valid input (err_data_size 0).
        let mut e: CqErrEntry = unsafe { std::mem::zeroed() };
        // SAFETY: a live queue and an entry to fill.
        let n = unsafe { ((*(*self.raw).ops).readerr)(self.raw, &mut e, 0) };
        if n < 0 {
            return check("fi_cq_readerr", n).unwrap_err();
        }
        fail(
            "one-sided transfer",
            e.err,
            format!(
                "{} (provider error {})",
                lib().strerror(e.err),
                e.prov_errno
            ),
        )
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: ours; endpoints bound to it hold Arcs of it.
        unsafe { close(self.raw.cast()) };
    }
}

// ---- address vectors -----------------------------------------------------------------------

/// An address vector: the peers a reliable-datagram endpoint (`FI_EP_RDM`) may address, each
/// by the index its name was inserted at.
pub struct AddressVector {
    raw: *mut FidAv,
    _domain: Arc<Domain>,
}

// SAFETY: see Fabric.
unsafe impl Send for AddressVector {}
// SAFETY: see Fabric.
unsafe impl Sync for AddressVector {}

impl AddressVector {
    pub fn open(domain: &Arc<Domain>) -> Result<Arc<AddressVector>, FabricError> {
        let mut attr = AvAttr {
            av_type: FI_AV_TABLE,
            rx_ctx_bits: 0,
            count: 0,
            ep_per_node: 0,
            name: std::ptr::null(),
            map_addr: std::ptr::null_mut(),
            flags: 0,
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: a live domain (its table checked at open to reach `endpoint`, which follows
        // `av_open`), an attribute struct, a place for the result.
        let rc = unsafe {
            ((*(*domain.raw).ops).av_open)(domain.raw, &mut attr, &mut raw, std::ptr::null_mut())
        };
        check("fi_av_open", rc as isize)?;
        // SAFETY: a live address vector; its table checked before use.
        if !unsafe { has_member((*raw).ops, member_end!(OpsAv, insert)) } {
            // SAFETY: opened just above.
            unsafe { close(raw.cast()) };
            return Err(fail(
                "fi_av_open",
                0,
                "the provider's address vector table is too short".into(),
            ));
        }
        Ok(Arc::new(AddressVector {
            raw,
            _domain: domain.clone(),
        }))
    }

    /// Inserts the endpoint name `name` (what `fi_getname` gave its owner): the address to
    /// post to.
    pub fn insert(&self, name: &[u8]) -> Result<u64, FabricError> {
        let mut addr = u64::MAX;
        // SAFETY: a live address vector (table checked), one name read during the call, one
        // address to fill; synchronous (no context, no event queue bound).
        let n = unsafe {
            ((*(*self.raw).ops).insert)(
                self.raw,
                name.as_ptr().cast(),
                1,
                &mut addr,
                0,
                std::ptr::null_mut(),
            )
        };
        // It returns how many it inserted: 0 means the name was not understood.
        if n != 1 || addr == u64::MAX {
            let n = check("fi_av_insert", n as isize)?;
            return Err(fail(
                "fi_av_insert",
                libc::EINVAL,
                format!(
                    "{n} of 1 addresses inserted (a name of {} bytes the provider does not take)",
                    name.len()
                ),
            ));
        }
        Ok(addr)
    }
}

impl Drop for AddressVector {
    fn drop(&mut self) {
        // SAFETY: ours; endpoints bound to it hold Arcs of it.
        unsafe { close(self.raw.cast()) };
    }
}

// ---- endpoints -----------------------------------------------------------------------------

/// What an endpoint reaches its peers through: connection events (`FI_EP_MSG`, one peer per
/// endpoint, connected) or an address vector (`FI_EP_RDM`, any peer inserted there).
#[derive(Clone, Debug)]
pub enum Peers {
    Connected(Arc<EventQueue>),
    Addressed(Arc<AddressVector>),
}

/// An endpoint: connected (or connecting), or reliable-datagram.
pub struct Endpoint {
    pub(super) raw: *mut FidEp,
    _peers: Peers,
    _cq: Arc<CompletionQueue>,
    _domain: Arc<Domain>,
}

// SAFETY: see Fabric.
unsafe impl Send for Endpoint {}
// SAFETY: see Fabric.
unsafe impl Sync for Endpoint {}

impl Endpoint {
    /// Opens an endpoint for `info` bound to `peers` (its connection events or its address
    /// vector) and `cq` (its completions), enabled.
    pub fn open(
        domain: &Arc<Domain>,
        info: &Info,
        peers: &Peers,
        cq: &Arc<CompletionQueue>,
    ) -> Result<Endpoint, FabricError> {
        let mut raw = std::ptr::null_mut();
        // shm installs handlers for SIGSEGV, SIGBUS, SIGTERM and SIGINT with its first
        // endpoint, which unlink every shm region of the process before passing the signal
        // on: inside a JVM, whose safepoint polls and null checks raise SIGSEGV on purpose
        // (and whose pager serves SIGBUS), the first one unlinked the agent's regions, and a
        // 1.17 server then crashed mapping them. The process's own handlers stay.
        let rc = super::keeping_signal_handlers(|| {
            // SAFETY: a live domain (table checked) and info; a place for the result.
            unsafe {
                ((*(*domain.raw).ops).endpoint)(
                    domain.raw,
                    info.head(),
                    &mut raw,
                    std::ptr::null_mut(),
                )
            }
        });
        check("fi_endpoint", rc as isize)?;
        // SAFETY: a live endpoint; its tables checked before any call through them.
        let ok = unsafe {
            has_member((*raw).cm, member_end!(OpsCm, reject))
                && has_member((*raw).rma, member_end!(OpsRma, writemsg))
                && has_member((*raw).fid.ops, member_end!(FiOps, control))
        };
        let ep = Endpoint {
            raw,
            _peers: peers.clone(),
            _cq: cq.clone(),
            _domain: domain.clone(),
        };
        if !ok {
            return Err(fail(
                "fi_endpoint",
                0,
                "the provider's endpoint tables are too short".into(),
            ));
        }
        // SAFETY: a live endpoint, queue objects that outlive it (we hold Arcs).
        unsafe {
            let fid = &mut (*raw).fid as *mut Fid;
            let ops = (*raw).fid.ops;
            let peers = match peers {
                Peers::Connected(eq) => &mut (*eq.raw).fid,
                Peers::Addressed(av) => &mut (*av.raw).fid,
            };
            check("fi_ep_bind", ((*ops).bind)(fid, peers, 0) as isize)?;
            check(
                "fi_ep_bind",
                ((*ops).bind)(fid, &mut (*cq.raw).fid, FI_TRANSMIT | FI_RECV) as isize,
            )?;
            check(
                "fi_enable",
                ((*ops).control)(fid, FI_ENABLE, std::ptr::null_mut()) as isize,
            )?;
        }
        if info.provider() == "shm" {
            unlink_at_exit(&ep.name()?);
        }
        Ok(ep)
    }

    /// The endpoint's name, which a peer inserts into its address vector to reach it.
    pub fn name(&self) -> Result<Vec<u8>, FabricError> {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: a live endpoint (cm checked at open) and a buffer of the length given.
        let rc = unsafe {
            ((*(*self.raw).cm).getname)(&mut (*self.raw).fid, buf.as_mut_ptr().cast(), &mut len)
        };
        check("fi_getname", rc as isize)?;
        buf.truncate(len);
        Ok(buf)
    }

    /// The id connection events name this endpoint by.
    pub fn id(&self) -> usize {
        self.raw as usize
    }

    /// Connects to `info`'s destination with `data` (at most [`CM_DATA_MAX`] bytes) and
    /// waits up to `timeout` for `eq` (the queue it was opened with) to confirm.
    pub fn connect(
        &self,
        info: &Info,
        eq: &EventQueue,
        data: &[u8],
        timeout: Duration,
    ) -> Result<(), FabricError> {
        assert!(data.len() <= CM_DATA_MAX);
        // SAFETY: a live endpoint (cm table checked) and the destination address of a live
        // info (some providers, tcp among them, do not fall back to it when given NULL).
        let rc = unsafe {
            ((*(*self.raw).cm).connect)(
                self.raw,
                (*info.head()).dest_addr,
                data.as_ptr().cast(),
                data.len(),
            )
        };
        check("fi_connect", rc as isize)?;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(fail("fi_connect", libc::ETIMEDOUT, "no answer".into()));
            }
            match eq.wait(left)? {
                Event::Connected { endpoint } if endpoint == self.id() => return Ok(()),
                Event::Shutdown { endpoint } if endpoint == self.id() => {
                    return Err(fail(
                        "fi_connect",
                        libc::ECONNRESET,
                        "closed by the peer".into(),
                    ))
                }
                Event::ConnectRequest { .. } | Event::Connected { .. } | Event::Shutdown { .. } => {
                }
                Event::Timeout => {}
            }
        }
    }

    /// Accepts the connection request this endpoint was opened for.
    pub fn accept(&self) -> Result<(), FabricError> {
        // SAFETY: a live endpoint (cm table checked), no accept data.
        let rc = unsafe { ((*(*self.raw).cm).accept)(self.raw, std::ptr::null(), 0) };
        check("fi_accept", rc as isize).map(drop)
    }
}

/// shm's regions (16 MiB files in /dev/shm named after their endpoints) not closed by exit.
static SHM_REGIONS: std::sync::Mutex<Vec<std::ffi::CString>> = std::sync::Mutex::new(Vec::new());

/// Unlinks the shm region of the endpoint named `name` (`fi_shm://PID:...`) when the process
/// exits: shm unlinks a region when its endpoint closes, and from its signal handlers, which
/// this module takes back (see [`Endpoint::open`]); a JVM exits without closing its stores, so
/// without this every run would leave its regions behind. Unlinking a region still mapped is
/// harmless: the memory goes once the last mapping does.
fn unlink_at_exit(name: &[u8]) {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    let name = name.split(|&b| b == 0).next().unwrap_or_default();
    let file = name.strip_prefix(b"fi_shm://").unwrap_or(name);
    let Ok(file) = std::ffi::CString::new(file) else {
        return;
    };
    SHM_REGIONS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(file);
    extern "C" fn unlink_all() {
        if let Ok(names) = SHM_REGIONS.try_lock() {
            for n in names.iter() {
                // SAFETY: a NUL-terminated name; a region already gone is ENOENT, ignored.
                unsafe { libc::shm_unlink(n.as_ptr()) };
            }
        }
    }
    REGISTERED.call_once(|| {
        // SAFETY: registers a function that only unlinks files, safe to run at exit.
        unsafe { libc::atexit(unlink_all) };
    });
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // SAFETY: ours; closing it cancels whatever is still posted on it, before the channel
        // that owns its buffer frees that buffer.
        unsafe { close(self.raw.cast()) };
    }
}

/// A listening endpoint.
pub struct PassiveEndpoint {
    raw: *mut FidPep,
    _eq: Arc<EventQueue>,
    _fabric: Arc<Fabric>,
}

// SAFETY: see Fabric.
unsafe impl Send for PassiveEndpoint {}
// SAFETY: see Fabric.
unsafe impl Sync for PassiveEndpoint {}

impl PassiveEndpoint {
    /// Listens at the info's source address, reporting requests on `eq`.
    pub fn listen(
        fabric: &Arc<Fabric>,
        info: &Info,
        eq: &Arc<EventQueue>,
    ) -> Result<PassiveEndpoint, FabricError> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: a live fabric (table checked) and info; a place for the result.
        let rc = unsafe {
            ((*(*fabric.raw).ops).passive_ep)(
                fabric.raw,
                info.head(),
                &mut raw,
                std::ptr::null_mut(),
            )
        };
        check("fi_passive_ep", rc as isize)?;
        let pep = PassiveEndpoint {
            raw,
            _eq: eq.clone(),
            _fabric: fabric.clone(),
        };
        // SAFETY: a live passive endpoint; tables checked before the calls.
        unsafe {
            if !has_member((*raw).cm, member_end!(OpsCm, reject))
                || !has_member((*raw).fid.ops, member_end!(FiOps, bind))
            {
                return Err(fail(
                    "fi_passive_ep",
                    0,
                    "the provider's tables are too short".into(),
                ));
            }
            let ops = (*raw).fid.ops;
            check(
                "fi_pep_bind",
                ((*ops).bind)(&mut (*raw).fid, &mut (*eq.raw).fid, 0) as isize,
            )?;
            check("fi_listen", ((*(*raw).cm).listen)(raw) as isize)?;
        }
        Ok(pep)
    }

    /// The port it listens on (the first two bytes after the family of a `sockaddr_in` or
    /// `sockaddr_in6`, which every IP-based provider's names are).
    pub fn port(&self) -> Result<u16, FabricError> {
        let mut buf = [0u8; 128];
        let mut len = buf.len();
        // SAFETY: a live passive endpoint (cm checked) and a buffer of the length given.
        let rc = unsafe {
            ((*(*self.raw).cm).getname)(&mut (*self.raw).fid, buf.as_mut_ptr().cast(), &mut len)
        };
        check("fi_getname", rc as isize)?;
        let family = u16::from_ne_bytes([buf[0], buf[1]]) as c_int;
        if len < 4 || (family != libc::AF_INET && family != libc::AF_INET6) {
            return Err(fail(
                "fi_getname",
                0,
                format!("not an IP address (family {family})"),
            ));
        }
        Ok(u16::from_be_bytes([buf[2], buf[3]]))
    }

    /// Refuses the connection request `info` came with.
    pub fn reject(&self, info: &Info) {
        // SAFETY: a live passive endpoint (cm checked) and the request's handle from its info.
        unsafe {
            ((*(*self.raw).cm).reject)(self.raw, (*info.head()).handle.cast(), std::ptr::null(), 0)
        };
    }
}

impl Drop for PassiveEndpoint {
    fn drop(&mut self) {
        // SAFETY: ours.
        unsafe { close(self.raw.cast()) };
    }
}

/// Objects print as their type and address: what there is to tell about an opaque handle.
macro_rules! debug_by_address {
    ($($t:ty),*) => {$(
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({:p})", stringify!($t), self.raw)
            }
        }
    )*};
}
debug_by_address!(
    AddressVector,
    Fabric,
    Domain,
    MemoryRegion,
    EventQueue,
    CompletionQueue,
    Endpoint,
    PassiveEndpoint
);
