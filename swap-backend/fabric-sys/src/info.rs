//! The `fi_getinfo` query for one-sided reads and writes, on connected or reliable-datagram
//! endpoints.

use std::ffi::{c_char, c_int, CString};

use super::layout::*;
use super::objects::{check, fail, FabricError};
use super::{text, Info, Libfabric};

/// The mr_mode bits this code honours: local registration, virtual addresses, allocated
/// memory, provider keys. (`FI_MR_ENDPOINT`, binding regions to endpoints, is not done.)
pub const MR_MODES: c_int = (1 << 2) | (1 << 4) | (1 << 5) | (1 << 6);
/// `FI_MR_LOCAL`, `FI_MR_VIRT_ADDR`, `FI_MR_PROV_KEY`.
pub const FI_MR_LOCAL: c_int = 1 << 2;
pub const FI_MR_VIRT_ADDR: c_int = 1 << 4;
pub const FI_MR_PROV_KEY: c_int = 1 << 6;

/// `fi_getinfo`'s answer for one-sided reads and writes on endpoints of `ep_type`.
///
/// # Safety
/// Internal: called with libfabric loaded.
pub(super) unsafe fn rma_info(
    lib: &Libfabric,
    ep_type: super::EpType,
    node: Option<&str>,
    service: Option<&str>,
    source: bool,
    provider: Option<&str>,
) -> Result<Info, FabricError> {
    const FI_THREAD_SAFE: c_int = 1;
    let node = node.map(|s| CString::new(s).unwrap());
    let service = service.map(|s| CString::new(s).unwrap());
    // Providers that cannot complete writes on delivery (see `Channel::transfer`) are skipped.
    {
        // SAFETY: fi_dupinfo(NULL) allocates a zeroed info with its attribute structures.
        let hints = unsafe { (lib.dupinfo)(std::ptr::null()) };
        if hints.is_null() {
            return Err(fail("fi_allocinfo", libc::ENOMEM, "out of memory".into()));
        }
        // SAFETY: hints and its attributes are live allocations of fi_allocinfo; the provider
        // name is malloc'd (strdup) because fi_freeinfo frees it.
        unsafe {
            // FI_MSG only where connections are made (it is how they are set up).
            let msg = if ep_type == super::EpType::Msg {
                super::FI_MSG
            } else {
                0
            };
            (*hints).caps =
                msg | super::FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
            (*(*hints).ep_attr).ep_type = ep_type as c_int;
            (*(*hints).domain_attr).mr_mode = MR_MODES;
            (*(*hints).domain_attr).threading = FI_THREAD_SAFE;
            (*(*hints).tx_attr).op_flags = FI_DELIVERY_COMPLETE;
            if let Some(p) = provider {
                let p = CString::new(p).unwrap();
                (*(*hints).fabric_attr).prov_name = libc::strdup(p.as_ptr());
            }
        }
        let mut list: *mut RawInfo = std::ptr::null_mut();
        // SAFETY: valid hints and strings (or NULL), a place for the result.
        let rc = unsafe {
            (lib.getinfo)(
                super::API_VERSION,
                node.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
                service.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
                if source { 1 << 57 } else { 0 },
                hints,
                &mut list,
            )
        };
        // SAFETY: ours from fi_dupinfo, not used after.
        unsafe { (lib.freeinfo)(hints) };
        check("fi_getinfo", rc as isize)?;
        // SAFETY: a list fi_getinfo returned, now owned by the Info.
        Ok(unsafe { Info::from_raw(list) })
    }
}

/// Reads a C string of an info for messages.
pub(super) fn prov_name(info: *const RawInfo) -> String {
    // SAFETY: a live info whose fabric_attr is NULL or live.
    unsafe {
        (*info)
            .fabric_attr
            .as_ref()
            .map_or(String::new(), |f: &FabricAttr| {
                text(f.prov_name as *const c_char)
            })
    }
}
