//! libfabric, loaded at run time: the one crate that calls into it, and all of the unsafe
//! that takes; and the anonymous memory it registers (`memory`), which the pager's slots use
//! too.
//!
//! Nothing links against libfabric: `libfabric.so.1` is opened with `dlopen` when first asked
//! for, and each entry point is looked up at the symbol version whose structure layout the
//! declarations in `layout` copy (`fi_getinfo`, `fi_dupinfo` and `fi_freeinfo` at `FABRIC_1.3`,
//! the `fi_info` with a `nic` field; `fi_fabric` at `FABRIC_1.1`; `fi_version` and
//! `fi_strerror` at `FABRIC_1.0`). A machine without libfabric builds, runs and tests
//! everything else; one with it (Debian's 1.17, or any later release, which keeps these
//! versions) needs no rebuild.
//!
//! Here: loading, the provider list, the owned `fi_info`. `layout`: the C structures and
//! function tables. `info`: the query for one-sided endpoints. `objects`: fabric, domain,
//! regions, queues and endpoints as values that close themselves. `channel`: an endpoint with
//! its registered buffer, and the transfer.

#![allow(unsafe_code)]

mod channel;
mod info;
mod layout;
pub mod memory;
mod objects;

use layout::{FabricAttr, RawInfo};

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

pub use channel::{Channel, Rma};
pub use info::{FI_MR_LOCAL, FI_MR_PROV_KEY, FI_MR_VIRT_ADDR};
pub use layout::CM_DATA_MAX;
pub use objects::{
    Access, AddressVector, CompletionQueue, Domain, Endpoint, Event, EventQueue, Fabric,
    FabricError, MemoryRegion, PassiveEndpoint, Peers,
};

/// `FI_VERSION(1, 17)`: the API this module speaks (Debian 12's libfabric).
pub const API_VERSION: u32 = (1 << 16) | 17;
/// `FI_MSG`, `FI_RMA`: capability bits of `fi_info.caps`.
pub const FI_MSG: u64 = 1 << 1;
pub const FI_RMA: u64 = 1 << 2;

/// `enum fi_ep_type`, named as libfabric's headers name it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::FromRepr, strum::IntoStaticStr)]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE", prefix = "FI_EP_")]
#[allow(dead_code)] // variants are written by the library
pub enum EpType {
    Unspec = 0,
    Msg = 1,
    Dgram = 2,
    Rdm = 3,
    SockStream = 4,
    SockDgram = 5,
}

impl EpType {
    /// A raw `fi_ep_type` (`Unspec` for codes this module does not know).
    fn from_raw(raw: c_int) -> EpType {
        u8::try_from(raw)
            .ok()
            .and_then(|r| EpType::from_repr(r as _))
            .unwrap_or(EpType::Unspec)
    }

    /// The name of a raw `fi_ep_type` (`FI_EP_UNSPEC` for codes this module does not know).
    fn name(raw: c_int) -> &'static str {
        EpType::from_raw(raw).into()
    }
}

type GetInfoFn = unsafe extern "C" fn(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const RawInfo,
    info: *mut *mut RawInfo,
) -> c_int;
type DupInfoFn = unsafe extern "C" fn(info: *const RawInfo) -> *mut RawInfo;
type FreeInfoFn = unsafe extern "C" fn(info: *mut RawInfo);
type FabricFn = unsafe extern "C" fn(
    attr: *mut FabricAttr,
    fabric: *mut *mut c_void,
    context: *mut c_void,
) -> c_int;
type VersionFn = unsafe extern "C" fn() -> u32;
type StrErrorFn = unsafe extern "C" fn(errnum: c_int) -> *const c_char;

/// The loaded library's entry points.
pub struct Libfabric {
    getinfo: GetInfoFn,
    dupinfo: DupInfoFn,
    freeinfo: FreeInfoFn,
    version: VersionFn,
    strerror: StrErrorFn,
    fabric: FabricFn,
}

impl std::fmt::Debug for Libfabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (major, minor) = self.version();
        write!(f, "Libfabric({major}.{minor})")
    }
}

/// One provider/domain `fi_getinfo` offers.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Provider {
    /// `tcp`, `verbs`, `efa`, `shm`, ... (`ofi_rxm;verbs` for layered ones).
    pub provider: String,
    pub fabric: String,
    pub domain: String,
    pub ep_type: &'static str,
    /// Whether it does one-sided reads and writes (`FI_RMA`).
    pub rma: bool,
}

static LIB: OnceLock<Result<Libfabric, String>> = OnceLock::new();

/// libfabric, loaded on first use; the error says why it cannot be (not installed, or too old
/// for the symbol versions above).
pub fn load() -> Result<&'static Libfabric, String> {
    LIB.get_or_init(open).as_ref().map_err(Clone::clone)
}

/// Whether a blocking completion-queue read (`fi_cq_sread`) drives `info`'s provider's
/// progress while it waits. shm's (1.17) yields in a loop without it, so a side that waits
/// there never completes a transfer, nor serves one: with shm both sides poll instead.
pub fn blocking_read_progresses(info: &Info) -> bool {
    info.provider() != "shm"
}

fn loader_error() -> String {
    // SAFETY: dlerror returns a thread-local C string or NULL.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown loader error".into()
    } else {
        // SAFETY: non-null: a NUL-terminated message owned by the loader.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Runs `f`, then puts back every signal handler it changed.
///
/// libfabric loads the libraries of all its providers, and some install handlers of their own
/// for SIGSEGV, SIGBUS and the like when loaded or initialised (Debian's libinfinipath, under
/// the psm provider, prints a backtrace and exits). Inside a JVM that is fatal: HotSpot takes
/// SIGSEGV on purpose (implicit null checks, safepoint polls) and the pager serves SIGBUS.
pub fn keeping_signal_handlers<T>(f: impl FnOnce() -> T) -> T {
    let saved: Vec<(c_int, libc::sigaction)> = (1..=31)
        .filter(|&s| s != libc::SIGKILL && s != libc::SIGSTOP)
        .filter_map(|s| Some((s, signal_action(s)?)))
        .collect();
    let result = f();
    for (s, old) in &saved {
        if signal_action(*s).is_some_and(|now| now.sa_sigaction != old.sa_sigaction) {
            // SAFETY: puts back an action this process had installed a moment ago.
            unsafe { libc::sigaction(*s, old, std::ptr::null_mut()) };
        }
    }
    result
}

/// The action installed for signal `s`.
fn signal_action(s: c_int) -> Option<libc::sigaction> {
    // SAFETY: sigaction is a plain C struct, for which all zeros is a valid value.
    let mut a: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a query (no new action) into a struct we own.
    (unsafe { libc::sigaction(s, std::ptr::null(), &mut a) } == 0).then_some(a)
}

fn open() -> Result<Libfabric, String> {
    // Loading runs the constructors of libfabric's provider libraries, hence the handlers
    // kept.
    let h = keeping_signal_handlers(|| {
        // SAFETY: a constant C string; the handle is kept for the life of the process (the
        // entry points below point into it).
        unsafe {
            libc::dlopen(
                c"libfabric.so.1".as_ptr(),
                libc::RTLD_NOW | libc::RTLD_LOCAL,
            )
        }
    });
    if h.is_null() {
        return Err(format!("cannot load libfabric.so.1: {}", loader_error()));
    }
    // SAFETY: for every call below, each symbol is the libfabric function of that name at
    // that version, whose C signature the function-pointer type it is read as copies.
    unsafe {
        Ok(Libfabric {
            getinfo: entry(h, "fi_getinfo", "FABRIC_1.3")?,
            dupinfo: entry(h, "fi_dupinfo", "FABRIC_1.3")?,
            freeinfo: entry(h, "fi_freeinfo", "FABRIC_1.3")?,
            version: entry(h, "fi_version", "FABRIC_1.0")?,
            strerror: entry(h, "fi_strerror", "FABRIC_1.0")?,
            fabric: entry(h, "fi_fabric", "FABRIC_1.1")?,
        })
    }
}

/// The entry point `name@version` of the library `h`, as the function-pointer type `F`.
///
/// # Safety
/// `h` is a live dlopen handle and `F` is an `extern "C" fn` type matching the symbol's C
/// signature at that version.
unsafe fn entry<F: Copy>(h: *mut c_void, name: &str, version: &str) -> Result<F, String> {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
    let (n, v) = (CString::new(name).unwrap(), CString::new(version).unwrap());
    // SAFETY: a live handle and two C strings.
    let p = unsafe { libc::dlvsym(h, n.as_ptr(), v.as_ptr()) };
    if p.is_null() {
        return Err(format!(
            "libfabric.so.1 has no {name}@{version}: {}",
            loader_error()
        ));
    }
    // SAFETY: a non-null code address read as the pointer type the caller vouches for (same
    // size, checked above).
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

/// A C string field, empty when NULL.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that outlives the call.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: per the contract above.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl Libfabric {
    /// The library's (major, minor) version.
    pub fn version(&self) -> (u32, u32) {
        // SAFETY: fi_version takes nothing and returns a number.
        let v = unsafe { (self.version)() };
        (v >> 16, v & 0xffff)
    }

    /// libfabric's message for a (negative or positive) error number.
    pub fn strerror(&self, err: c_int) -> String {
        // SAFETY: fi_strerror returns a static string for any number.
        unsafe { text((self.strerror)(err.abs())) }
    }

    /// The providers `fi_getinfo` offers with capabilities `caps` on endpoints of `ep_type`
    /// (the `FI_PROVIDER` environment variable narrows them, as in every libfabric program).
    /// No provider at all is an empty list, not an error.
    pub fn providers(&self, caps: u64, ep_type: EpType) -> Result<Vec<Provider>, String> {
        // SAFETY: fi_dupinfo(NULL) allocates a zeroed fi_info with its attribute structures
        // (fi_allocinfo); we own it until fi_freeinfo below.
        let hints = unsafe { (self.dupinfo)(std::ptr::null()) };
        if hints.is_null() {
            return Err("fi_allocinfo failed".into());
        }
        // SAFETY: hints is a live fi_info from fi_allocinfo, whose ep_attr it allocated.
        unsafe {
            (*hints).caps = caps;
            if !(*hints).ep_attr.is_null() {
                (*(*hints).ep_attr).ep_type = ep_type as c_int;
            }
        }
        let mut list: *mut RawInfo = std::ptr::null_mut();
        // The first fi_getinfo initialises every provider.
        let rc = keeping_signal_handlers(|| {
            // SAFETY: valid hints, a place for the result; node and service NULL (any local).
            unsafe {
                (self.getinfo)(
                    API_VERSION,
                    std::ptr::null(),
                    std::ptr::null(),
                    0,
                    hints,
                    &mut list,
                )
            }
        });
        // SAFETY: hints came from fi_dupinfo and is not used after this.
        unsafe { (self.freeinfo)(hints) };
        const FI_ENODATA: c_int = 61;
        if rc == -FI_ENODATA {
            return Ok(Vec::new());
        }
        if rc != 0 {
            return Err(format!("fi_getinfo: {}", self.strerror(rc)));
        }
        let mut out = Vec::new();
        let mut p = list;
        while !p.is_null() {
            // SAFETY: p walks the list fi_getinfo returned, alive until fi_freeinfo below;
            // every attribute pointer is NULL or points into that list's allocations.
            unsafe {
                let i = &*p;
                let fabric = i.fabric_attr.as_ref();
                let domain = i.domain_attr.as_ref();
                out.push(Provider {
                    provider: fabric.map_or(String::new(), |f| text(f.prov_name)),
                    fabric: fabric.map_or(String::new(), |f| text(f.name)),
                    domain: domain.map_or(String::new(), |d| text(d.name)),
                    ep_type: EpType::name(i.ep_attr.as_ref().map_or(0, |e| e.ep_type)),
                    rma: i.caps & FI_RMA != 0,
                });
                p = i.next;
            }
        }
        // SAFETY: the list fi_getinfo returned; nothing refers to it any more.
        unsafe { (self.freeinfo)(list) };
        out.dedup();
        Ok(out)
    }
}

/// An `fi_info` list from `fi_getinfo` or a connection request, freed on drop; its head is
/// the one used.
pub struct Info {
    raw: *mut RawInfo,
}

// SAFETY: an owned, immutable allocation of libfabric's.
unsafe impl Send for Info {}
// SAFETY: as above.
unsafe impl Sync for Info {}

impl Info {
    /// # Safety
    /// `raw` is a non-null fi_info list that nobody else frees.
    unsafe fn from_raw(raw: *mut RawInfo) -> Info {
        Info { raw }
    }

    fn head(&self) -> *mut RawInfo {
        self.raw
    }

    /// What `fi_getinfo` offers for one-sided reads and writes (`FI_RMA`) on endpoints of
    /// `ep_type` (`Msg`: connected; `Rdm`: reliable datagrams through an address vector),
    /// thread safe, with writes complete only once delivered: to listen at `node:service`
    /// (`source`) or to reach it (either may be `None`: any local address, for providers
    /// whose addresses are not IP's). `provider` picks one by name (`FI_PROVIDER` in the
    /// environment narrows the choice as usual).
    pub fn rma(
        ep_type: EpType,
        node: Option<&str>,
        service: Option<&str>,
        source: bool,
        provider: Option<&str>,
    ) -> Result<Info, FabricError> {
        let lib = load().map_err(|e| FabricError {
            call: "dlopen",
            code: 0,
            message: e,
        })?;
        // The first fi_getinfo initialises every provider.
        keeping_signal_handlers(|| {
            // SAFETY: libfabric is loaded.
            unsafe { info::rma_info(lib, ep_type, node, service, source, provider) }
        })
    }

    /// The endpoint type it is for.
    pub fn ep_type(&self) -> EpType {
        // SAFETY: a live info; ep_attr is NULL or live.
        EpType::from_raw(unsafe { (*self.raw).ep_attr.as_ref().map_or(0, |e| e.ep_type) })
    }

    /// Whether its addresses are IP socket addresses (`FI_SOCKADDR`, `_IN`, `_IN6`), not a
    /// provider's own names.
    pub fn ip_addresses(&self) -> bool {
        // SAFETY: a live info; addr_format is a plain field.
        matches!(unsafe { (*self.raw).addr_format }, 1..=3)
    }

    /// The provider's name (`tcp`, `verbs`, ...).
    pub fn provider(&self) -> String {
        info::prov_name(self.raw)
    }

    /// The memory-registration mode the provider requires (`FI_MR_*` bits).
    pub fn mr_mode(&self) -> c_int {
        // SAFETY: a live info; domain_attr is NULL or live.
        unsafe { (*self.raw).domain_attr.as_ref().map_or(0, |d| d.mr_mode) }
    }

    /// Bytes in the provider's keys.
    pub fn mr_key_size(&self) -> usize {
        // SAFETY: as above.
        unsafe {
            (*self.raw)
                .domain_attr
                .as_ref()
                .map_or(8, |d| d.mr_key_size)
        }
    }

    /// Operations an endpoint can have outstanding.
    pub fn tx_size(&self) -> usize {
        // SAFETY: a live info; tx_attr is NULL or live.
        unsafe { (*self.raw).tx_attr.as_ref().map_or(64, |t| t.size) }
    }
}

impl Drop for Info {
    fn drop(&mut self) {
        if let Ok(lib) = load() {
            // SAFETY: ours (see from_raw), not used after this.
            unsafe { (lib.freeinfo)(self.raw) };
        }
    }
}

impl std::fmt::Debug for Info {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Info({}, mr_mode {:#x})",
            self.provider(),
            self.mr_mode()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_types_are_named_as_the_headers_name_them() {
        assert_eq!(EpType::name(1), "FI_EP_MSG");
        assert_eq!(EpType::name(4), "FI_EP_SOCK_STREAM");
        assert_eq!(EpType::name(-1), "FI_EP_UNSPEC");
        assert_eq!(EpType::name(99), "FI_EP_UNSPEC");
    }

    extern "C" fn intruder(_: c_int) {}

    #[test]
    fn handlers_a_library_installs_are_taken_back() {
        let query = || signal_action(libc::SIGUSR2).unwrap().sa_sigaction;
        let before = query();
        keeping_signal_handlers(|| {
            // What a provider library's constructor does.
            // SAFETY: installs a do-nothing handler for a signal nothing sends here.
            unsafe { libc::signal(libc::SIGUSR2, intruder as *const () as libc::sighandler_t) };
            assert_eq!(query(), intruder as *const () as libc::sighandler_t);
        });
        assert_eq!(query(), before, "the library's handler stayed");
    }
}
