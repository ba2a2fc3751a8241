//! The C layouts of libfabric 1.17 this module calls through: each object's leading `fid`
//! and its function tables, copied from `<rdma/fabric.h>`, `fi_domain.h`, `fi_endpoint.h`,
//! `fi_cm.h`, `fi_rma.h` and `fi_eq.h` up to the last member called (members not called are
//! opaque pointers, which only keep the offsets), and the constants used with them. Apart from
//! `fi_fabric`, libfabric's API is static inline functions in its headers that call through
//! these tables (`ep->rma->read(...)`); a provider built against an older libfabric may hand
//! out shorter tables, so each table's size is checked before a member is called.

use std::ffi::{c_char, c_int, c_void};

#[repr(C)]
pub(super) struct Fid {
    pub(super) fclass: usize,
    pub(super) context: *mut c_void,
    pub(super) ops: *const FiOps,
}

#[repr(C)]
pub(super) struct FiOps {
    pub(super) size: usize,
    pub(super) close: unsafe extern "C" fn(*mut Fid) -> c_int,
    pub(super) bind: unsafe extern "C" fn(*mut Fid, *mut Fid, u64) -> c_int,
    pub(super) control: unsafe extern "C" fn(*mut Fid, c_int, *mut c_void) -> c_int,
}

#[repr(C)]
pub(super) struct FidFabric {
    pub(super) fid: Fid,
    pub(super) ops: *const OpsFabric,
    pub(super) api_version: u32,
}

pub(super) type Opaque = *const c_void;

#[repr(C)]
pub(super) struct OpsFabric {
    pub(super) size: usize,
    pub(super) domain: unsafe extern "C" fn(
        *mut FidFabric,
        *mut RawInfo,
        *mut *mut FidDomain,
        *mut c_void,
    ) -> c_int,
    pub(super) passive_ep:
        unsafe extern "C" fn(*mut FidFabric, *mut RawInfo, *mut *mut FidPep, *mut c_void) -> c_int,
    pub(super) eq_open:
        unsafe extern "C" fn(*mut FidFabric, *mut EqAttr, *mut *mut FidEq, *mut c_void) -> c_int,
}

#[repr(C)]
pub(super) struct FidDomain {
    pub(super) fid: Fid,
    pub(super) ops: *const OpsDomain,
    pub(super) mr: *const OpsMr,
}

#[repr(C)]
pub(super) struct OpsDomain {
    pub(super) size: usize,
    pub(super) av_open:
        unsafe extern "C" fn(*mut FidDomain, *mut AvAttr, *mut *mut FidAv, *mut c_void) -> c_int,
    pub(super) cq_open:
        unsafe extern "C" fn(*mut FidDomain, *mut CqAttr, *mut *mut FidCq, *mut c_void) -> c_int,
    pub(super) endpoint:
        unsafe extern "C" fn(*mut FidDomain, *mut RawInfo, *mut *mut FidEp, *mut c_void) -> c_int,
}

/// `struct fi_av_attr`.
#[repr(C)]
pub(super) struct AvAttr {
    pub(super) av_type: c_int,
    pub(super) rx_ctx_bits: c_int,
    pub(super) count: usize,
    pub(super) ep_per_node: usize,
    pub(super) name: *const c_char,
    pub(super) map_addr: *mut c_void,
    pub(super) flags: u64,
}

#[repr(C)]
pub(super) struct FidAv {
    pub(super) fid: Fid,
    pub(super) ops: *const OpsAv,
}

#[repr(C)]
pub(super) struct OpsAv {
    pub(super) size: usize,
    pub(super) insert:
        unsafe extern "C" fn(*mut FidAv, *const c_void, usize, *mut u64, u64, *mut c_void) -> c_int,
}

#[repr(C)]
pub(super) struct OpsMr {
    pub(super) size: usize,
    #[allow(clippy::type_complexity)]
    pub(super) reg: unsafe extern "C" fn(
        *mut Fid,
        *const c_void,
        usize,
        u64,
        u64,
        u64,
        u64,
        *mut *mut FidMr,
        *mut c_void,
    ) -> c_int,
}

#[repr(C)]
pub(super) struct FidMr {
    pub(super) fid: Fid,
    pub(super) mem_desc: *mut c_void,
    pub(super) key: u64,
}

#[repr(C)]
pub(super) struct FidEp {
    pub(super) fid: Fid,
    pub(super) ops: Opaque,
    pub(super) cm: *const OpsCm,
    pub(super) msg: Opaque,
    pub(super) rma: *const OpsRma,
}

/// `struct fid_pep`: its `cm` table sits where an active endpoint's does, which is what lets
/// `fi_getname` take either.
#[repr(C)]
pub(super) struct FidPep {
    pub(super) fid: Fid,
    pub(super) ops: Opaque,
    pub(super) cm: *const OpsCm,
}

#[repr(C)]
pub(super) struct OpsCm {
    pub(super) size: usize,
    pub(super) setname: Opaque,
    pub(super) getname: unsafe extern "C" fn(*mut Fid, *mut c_void, *mut usize) -> c_int,
    pub(super) getpeer: Opaque,
    pub(super) connect:
        unsafe extern "C" fn(*mut FidEp, *const c_void, *const c_void, usize) -> c_int,
    pub(super) listen: unsafe extern "C" fn(*mut FidPep) -> c_int,
    pub(super) accept: unsafe extern "C" fn(*mut FidEp, *const c_void, usize) -> c_int,
    pub(super) reject: unsafe extern "C" fn(*mut FidPep, *mut Fid, *const c_void, usize) -> c_int,
}

pub(super) type RmaFn = unsafe extern "C" fn(
    ep: *mut FidEp,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    peer: u64,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize;

#[repr(C)]
pub(super) struct OpsRma {
    pub(super) size: usize,
    pub(super) read: RmaFn,
    pub(super) readv: Opaque,
    pub(super) readmsg: Opaque,
    pub(super) write: Opaque,
    pub(super) writev: Opaque,
    pub(super) writemsg: unsafe extern "C" fn(*mut FidEp, *const MsgRma, u64) -> isize,
}

/// `struct fi_rma_iov`.
#[repr(C)]
pub(super) struct RmaIov {
    pub(super) addr: u64,
    pub(super) len: usize,
    pub(super) key: u64,
}

/// `struct fi_msg_rma`.
#[repr(C)]
pub(super) struct MsgRma {
    pub(super) msg_iov: *const libc::iovec,
    pub(super) desc: *mut *mut c_void,
    pub(super) iov_count: usize,
    pub(super) addr: u64,
    pub(super) rma_iov: *const RmaIov,
    pub(super) rma_iov_count: usize,
    pub(super) context: *mut c_void,
    pub(super) data: u64,
}

#[repr(C)]
pub(super) struct EqAttr {
    pub(super) size: usize,
    pub(super) flags: u64,
    pub(super) wait_obj: c_int,
    pub(super) signaling_vector: c_int,
    pub(super) wait_set: *mut c_void,
}

#[repr(C)]
pub(super) struct FidEq {
    pub(super) fid: Fid,
    pub(super) ops: *const OpsEq,
}

#[repr(C)]
pub(super) struct OpsEq {
    pub(super) size: usize,
    pub(super) read: Opaque,
    pub(super) readerr: unsafe extern "C" fn(*mut FidEq, *mut EqErrEntry, u64) -> isize,
    pub(super) write: Opaque,
    pub(super) sread:
        unsafe extern "C" fn(*mut FidEq, *mut u32, *mut c_void, usize, c_int, u64) -> isize,
}

#[repr(C)]
pub(super) struct EqErrEntry {
    pub(super) fid: *mut Fid,
    pub(super) context: *mut c_void,
    pub(super) data: u64,
    pub(super) err: c_int,
    pub(super) prov_errno: c_int,
    pub(super) err_data: *mut c_void,
    pub(super) err_data_size: usize,
}

#[repr(C)]
pub(super) struct CqAttr {
    pub(super) size: usize,
    pub(super) flags: u64,
    pub(super) format: c_int,
    pub(super) wait_obj: c_int,
    pub(super) signaling_vector: c_int,
    pub(super) wait_cond: c_int,
    pub(super) wait_set: *mut c_void,
}

#[repr(C)]
pub(super) struct FidCq {
    pub(super) fid: Fid,
    pub(super) ops: *const OpsCq,
}

#[repr(C)]
pub(super) struct OpsCq {
    pub(super) size: usize,
    pub(super) read: unsafe extern "C" fn(*mut FidCq, *mut c_void, usize) -> isize,
    pub(super) readfrom: Opaque,
    pub(super) readerr: unsafe extern "C" fn(*mut FidCq, *mut CqErrEntry, u64) -> isize,
    pub(super) sread:
        unsafe extern "C" fn(*mut FidCq, *mut c_void, usize, *const c_void, c_int) -> isize,
}

#[repr(C)]
pub(super) struct CqErrEntry {
    pub(super) op_context: *mut c_void,
    pub(super) flags: u64,
    pub(super) len: usize,
    pub(super) buf: *mut c_void,
    pub(super) data: u64,
    pub(super) tag: u64,
    pub(super) olen: usize,
    pub(super) err: c_int,
    pub(super) prov_errno: c_int,
    pub(super) err_data: *mut c_void,
    pub(super) err_data_size: usize,
}

/// `struct fi_fabric_attr`.
#[repr(C)]
pub(super) struct FabricAttr {
    pub(super) fabric: *mut c_void,
    pub(super) name: *mut c_char,
    pub(super) prov_name: *mut c_char,
    pub(super) prov_version: u32,
    pub(super) api_version: u32,
}

/// `struct fi_domain_attr`, up to `mr_key_size`.
#[repr(C)]
pub(super) struct DomainAttr {
    pub(super) domain: *mut c_void,
    pub(super) name: *mut c_char,
    pub(super) threading: c_int,
    pub(super) control_progress: c_int,
    pub(super) data_progress: c_int,
    pub(super) resource_mgmt: c_int,
    pub(super) av_type: c_int,
    pub(super) mr_mode: c_int,
    pub(super) mr_key_size: usize,
}

/// `struct fi_tx_attr`.
#[repr(C)]
pub(super) struct TxAttr {
    pub(super) caps: u64,
    pub(super) mode: u64,
    pub(super) op_flags: u64,
    pub(super) msg_order: u64,
    pub(super) comp_order: u64,
    pub(super) inject_size: usize,
    pub(super) size: usize,
    pub(super) iov_limit: usize,
    pub(super) rma_iov_limit: usize,
    pub(super) tclass: u32,
}

/// `struct fi_ep_attr`, its first field (`enum fi_ep_type type`).
#[repr(C)]
pub(super) struct EpAttr {
    pub(super) ep_type: c_int,
}

/// `struct fi_info` (FABRIC_1.3 and later).
#[repr(C)]
pub(super) struct RawInfo {
    pub(super) next: *mut RawInfo,
    pub(super) caps: u64,
    pub(super) mode: u64,
    pub(super) addr_format: u32,
    pub(super) src_addrlen: usize,
    pub(super) dest_addrlen: usize,
    pub(super) src_addr: *mut c_void,
    pub(super) dest_addr: *mut c_void,
    pub(super) handle: *mut c_void,
    pub(super) tx_attr: *mut TxAttr,
    pub(super) rx_attr: *mut c_void,
    pub(super) ep_attr: *mut EpAttr,
    pub(super) domain_attr: *mut DomainAttr,
    pub(super) fabric_attr: *mut FabricAttr,
    pub(super) nic: *mut c_void,
}

// Constants.

pub(super) const FI_READ: u64 = 1 << 8;
pub(super) const FI_WRITE: u64 = 1 << 9;
pub(super) const FI_RECV: u64 = 1 << 10;
pub(super) const FI_TRANSMIT: u64 = 1 << 11;
pub(super) const FI_REMOTE_READ: u64 = 1 << 12;
pub(super) const FI_REMOTE_WRITE: u64 = 1 << 13;
pub(super) const FI_COMPLETION: u64 = 1 << 24;
pub(super) const FI_DELIVERY_COMPLETE: u64 = 1 << 28;
pub(super) const FI_ENABLE: c_int = 6;
/// `FI_AV_TABLE`: addresses are indexes 0, 1, ... in insertion order.
pub(super) const FI_AV_TABLE: c_int = 2;
pub(super) const FI_WAIT_UNSPEC: c_int = 1;
pub(super) const FI_CQ_FORMAT_CONTEXT: c_int = 1;
pub(super) const FI_CONNREQ: u32 = 1;
pub(super) const FI_CONNECTED: u32 = 2;
pub(super) const FI_SHUTDOWN: u32 = 3;
pub(super) const FI_EAGAIN: c_int = libc::EAGAIN;
pub(super) const FI_EAVAIL: c_int = 259;
/// Bytes of connection data a connect may carry here (every provider with FI_EP_MSG takes at
/// least this many).
pub const CM_DATA_MAX: usize = 56;
