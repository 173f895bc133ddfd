//! The libibverbs ABI, declared here rather than generated from headers.
//!
//! Every structure below mirrors `<infiniband/verbs.h>` of rdma-core's stable
//! ABI (soname `libibverbs.so.1`, the `IBVERBS_1.1` symbol versions), on
//! 64-bit Linux. Only the structures and fields the backend touches are
//! declared field by field; trailing parts it never reads are declared only
//! as far as needed to keep the size and the offsets right. The test in
//! `layout_tests.rs` compiles a C program against the real header and checks
//! every size and offset used here.
//!
//! [`table`] loads the library and resolves the functions. Their default
//! symbol versions are the ones declared: `nm -D` on Debian's libibverbs1
//! (rdma-core 44) shows, for example, `ibv_query_port@@IBVERBS_1.1` (the
//! exported fallback of the inline `ibv_query_port` of newer headers, which
//! fills the fields of `struct ibv_port_attr` up to `link_layer`),
//! `ibv_reg_mr@@IBVERBS_1.1` and `ibv_reg_dmabuf_mr@@IBVERBS_1.12`.

#![allow(non_camel_case_types, missing_docs)]
#![allow(unsafe_code)]

pub(crate) mod context;
#[cfg(test)]
mod layout_tests;
pub(crate) mod memory;
pub(crate) mod queue;
pub(crate) mod table;

use std::ffi::{c_char, c_int, c_uint, c_void};

/// `IBV_SYSFS_NAME_MAX`.
pub(crate) const SYSFS_NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub(crate) const SYSFS_PATH_MAX: usize = 256;

// enum ibv_qp_type
pub(crate) const IBV_QPT_RC: c_uint = 2;

// enum ibv_wr_opcode
pub(crate) const IBV_WR_RDMA_WRITE: c_uint = 0;
pub(crate) const IBV_WR_RDMA_WRITE_WITH_IMM: c_uint = 1;
pub(crate) const IBV_WR_SEND: c_uint = 2;
pub(crate) const IBV_WR_SEND_WITH_IMM: c_uint = 3;
pub(crate) const IBV_WR_RDMA_READ: c_uint = 4;
pub(crate) const IBV_WR_LOCAL_INV: c_uint = 7;
pub(crate) const IBV_WR_BIND_MW: c_uint = 8;

// enum ibv_mw_type
pub(crate) const IBV_MW_TYPE_2: c_uint = 2;

// enum ibv_device_cap_flags: type-2 memory windows
pub(crate) const IBV_DEVICE_MEM_WINDOW_TYPE_2A: c_uint = 1 << 23;
pub(crate) const IBV_DEVICE_MEM_WINDOW_TYPE_2B: c_uint = 1 << 24;

// enum ibv_send_flags
pub(crate) const IBV_SEND_SIGNALED: c_uint = 1 << 1;

// enum ibv_wc_flags
pub(crate) const IBV_WC_WITH_IMM: c_uint = 1 << 1;

// enum ibv_wc_opcode
pub(crate) const IBV_WC_SEND: c_uint = 0;
pub(crate) const IBV_WC_RDMA_WRITE: c_uint = 1;
pub(crate) const IBV_WC_RDMA_READ: c_uint = 2;
pub(crate) const IBV_WC_BIND_MW: c_uint = 5;
pub(crate) const IBV_WC_LOCAL_INV: c_uint = 6;
pub(crate) const IBV_WC_RECV: c_uint = 128;
pub(crate) const IBV_WC_RECV_RDMA_WITH_IMM: c_uint = 129;

// enum ibv_port_state
pub(crate) const IBV_PORT_ACTIVE: c_uint = 4;

// IBV_LINK_LAYER_*
pub(crate) const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
pub(crate) const IBV_LINK_LAYER_ETHERNET: u8 = 2;

// enum ibv_qp_attr_mask: IBV_QP_STATE
pub(crate) const IBV_QP_STATE: c_int = 1;

/// `struct _ibv_device_ops`: two provider entries nobody calls any more.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct _ibv_device_ops {
    pub _dummy1: *mut c_void,
    pub _dummy2: *mut c_void,
}

/// `struct ibv_device`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct ibv_device {
    pub _ops: _ibv_device_ops,
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; SYSFS_NAME_MAX],
    pub dev_name: [c_char; SYSFS_NAME_MAX],
    pub dev_path: [c_char; SYSFS_PATH_MAX],
    pub ibdev_path: [c_char; SYSFS_PATH_MAX],
}

pub(crate) type PollCqFn =
    unsafe extern "C" fn(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int;
pub(crate) type ReqNotifyCqFn = unsafe extern "C" fn(cq: *mut ibv_cq, solicited_only: c_int) -> c_int;
pub(crate) type PostSendFn =
    unsafe extern "C" fn(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad_wr: *mut *mut ibv_send_wr) -> c_int;
pub(crate) type AllocMwFn = unsafe extern "C" fn(pd: *mut ibv_pd, mw_type: c_uint) -> *mut ibv_mw;
pub(crate) type DeallocMwFn = unsafe extern "C" fn(mw: *mut ibv_mw) -> c_int;
pub(crate) type PostRecvFn =
    unsafe extern "C" fn(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int;

/// `struct ibv_context_ops`: the provider's entry points. The inline
/// functions of verbs.h (`ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_post_send`,
/// `ibv_post_recv`, `ibv_alloc_mw`, `ibv_dealloc_mw`) call through this
/// table; so does the backend.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct ibv_context_ops {
    pub _compat_query_device: *mut c_void,
    pub _compat_query_port: *mut c_void,
    pub _compat_alloc_pd: *mut c_void,
    pub _compat_dealloc_pd: *mut c_void,
    pub _compat_reg_mr: *mut c_void,
    pub _compat_rereg_mr: *mut c_void,
    pub _compat_dereg_mr: *mut c_void,
    pub alloc_mw: Option<AllocMwFn>,
    pub bind_mw: *mut c_void,
    pub dealloc_mw: Option<DeallocMwFn>,
    pub _compat_create_cq: *mut c_void,
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyCqFn>,
    pub _compat_cq_event: *mut c_void,
    pub _compat_resize_cq: *mut c_void,
    pub _compat_destroy_cq: *mut c_void,
    pub _compat_create_srq: *mut c_void,
    pub _compat_modify_srq: *mut c_void,
    pub _compat_query_srq: *mut c_void,
    pub _compat_destroy_srq: *mut c_void,
    pub post_srq_recv: *mut c_void,
    pub _compat_create_qp: *mut c_void,
    pub _compat_query_qp: *mut c_void,
    pub _compat_modify_qp: *mut c_void,
    pub _compat_destroy_qp: *mut c_void,
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    pub _compat_create_ah: *mut c_void,
    pub _compat_destroy_ah: *mut c_void,
    pub _compat_attach_mcast: *mut c_void,
    pub _compat_detach_mcast: *mut c_void,
    pub _compat_async_event: *mut c_void,
}

/// `struct ibv_context`.
#[repr(C)]
pub(crate) struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub abi_compat: *mut c_void,
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_uint,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr`. The exported `ibv_query_port` (the compat symbol
/// that the inline wrapper of newer headers falls back to) fills the fields
/// up to `link_layer`; the backend zeroes the rest first.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct ibv_port_attr {
    pub state: c_uint,
    pub max_mtu: c_uint,
    pub active_mtu: c_uint,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// `union ibv_gid`, as its raw bytes (the union's other member has the same
/// size; its 8-byte alignment is kept by `align(8)`).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ibv_gid {
    pub raw: [u8; 16],
}

/// `struct ibv_pd`.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_mw`.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    pub mw_type: c_uint,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: c_uint,
}

/// `bind_mw` of `struct ibv_send_wr`: the window, its new key, and what it
/// grants.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct ibv_send_wr_bind_mw {
    pub mw: *mut ibv_mw,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// `union { bind_mw; tso; }` of `struct ibv_send_wr` (`tso` is never used
/// here; `_raw` keeps the union's size).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union ibv_send_wr_bind_mw_tso {
    pub bind_mw: ibv_send_wr_bind_mw,
    pub _raw: [u64; 6],
}

/// `struct ibv_comp_channel`.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub(crate) struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
pub(crate) struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_uint,
    pub qp_type: c_uint,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    pub qp_type: c_uint,
    pub sq_sig_all: c_int,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ibv_qp_attr {
    pub qp_state: c_uint,
    pub cur_qp_state: c_uint,
    pub path_mtu: c_uint,
    pub path_mig_state: c_uint,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `wr.rdma` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ibv_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// `wr.atomic` of `struct ibv_send_wr` (declared for the union's size).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ibv_send_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// `wr.ud` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct ibv_send_wr_ud {
    pub ah: *mut c_void,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union ibv_send_wr_wr {
    pub rdma: ibv_send_wr_rdma,
    pub atomic: ibv_send_wr_atomic,
    pub ud: ibv_send_wr_ud,
}

/// `struct ibv_send_wr`. The `qp_type.xrc` union is only ever zero here;
/// `bind_mw` carries a memory-window bind.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_uint,
    pub send_flags: c_uint,
    /// `imm_data` (network byte order) or `invalidate_rkey`.
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    /// `union { struct { uint32_t remote_srqn; } xrc; } qp_type`.
    pub qp_type_xrc_remote_srqn: u32,
    /// `union { bind_mw; tso; }`: 48 bytes, 8-aligned.
    pub bind_mw_tso: ibv_send_wr_bind_mw_tso,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ibv_wc {
    pub wr_id: u64,
    pub status: c_uint,
    pub opcode: c_uint,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `imm_data` (network byte order) or `invalidated_rkey`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// Zero-initialised values of the plain-data structures the backend fills
/// in before a call.
pub(crate) trait Zeroed: Sized {
    /// The all-zero value.
    fn zeroed() -> Self;
}

macro_rules! zeroed {
    ($($t:ty),* $(,)?) => {$(
        impl Zeroed for $t {
            fn zeroed() -> Self {
                // SAFETY: the type is a #[repr(C)] aggregate of integers,
                // arrays, raw pointers and `Option<fn>`s, for all of which
                // the all-zero bit pattern is a valid value (0 or null/None).
                unsafe { std::mem::zeroed() }
            }
        }
    )*};
}

zeroed!(
    ibv_device_attr,
    ibv_port_attr,
    ibv_qp_init_attr,
    ibv_send_wr,
    ibv_recv_wr
);
