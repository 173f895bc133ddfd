//! [`IbVerbs`]: the Verbs seam over libibverbs, loaded at run time.
//!
//! Ownership mirrors verbs: each object holds an `Arc` to its parent (an MR
//! or a QP to its PD, a PD or a CQ to the device context, the context to the
//! loaded library), so a child can never outlive its parent, whatever order
//! the handles are dropped in, and the library stays loaded until the last
//! object is released. The raw objects and every call into libibverbs live
//! in `ffi` (owning handles with safe methods); this file holds no unsafe
//! code, only the translation between the seam's types and the ABI's.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::ffi::c_int;
use std::fmt;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use hipobj_platform::{
    AccessFlags, BindMwWr, CompletionQueue, Device, DeviceAttr, Gid, LinkLayer, MemRegion, MemoryRegion,
    MemoryWindow, Mtu, PortAttr, PortState, ProtectionDomain, QpAttr, QpAttrMask, QpInitAttr, QpState,
    QueuePair, RecvWr, SendOp, SendWr, Verbs, VerbsError, VerbsErrorKind, WcOpcode, WcStatus, WorkCompletion,
};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::unsupported;
use crate::ffi::context::DeviceList;
use crate::ffi::memory::{DMABUF_MISSING, Mr, Mw};
use crate::ffi::queue::{BindRequest, Qp, SendRequest};
use crate::ffi::table::{LoadError, VerbsFns};
use crate::ffi::{self, context};

/// The soname the backend loads unless told otherwise.
pub const DEFAULT_LIBRARY: &str = "libibverbs.so.1";

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The Verbs backend over libibverbs.
pub struct IbVerbs {
    fns: Arc<VerbsFns>,
    library: String,
}

impl fmt::Debug for IbVerbs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IbVerbs")
            .field("library", &self.library)
            .field("dmabuf", &self.fns.reg_dmabuf_mr.is_some())
            .finish()
    }
}

impl IbVerbs {
    /// Loads [`DEFAULT_LIBRARY`] (`libibverbs.so.1`) with `dlopen`.
    pub fn load() -> Result<Self, VerbsError> {
        Self::load_from(DEFAULT_LIBRARY)
    }

    /// Loads libibverbs from `library` (a soname or a path). A library that
    /// cannot be opened, or lacks a required function, gives an error of kind
    /// [`VerbsErrorKind::LibraryMissing`] that names it.
    pub fn load_from(library: &str) -> Result<Self, VerbsError> {
        let fns = VerbsFns::load(library).map_err(|e| match e {
            LoadError::Open(why) => VerbsError::new(
                "dlopen",
                VerbsErrorKind::LibraryMissing,
                format!("cannot load {library}: {why}"),
            ),
            LoadError::Symbol(name, why) => VerbsError::new(
                "dlsym",
                VerbsErrorKind::LibraryMissing,
                format!("{library} lacks {name}: {why}"),
            ),
        })?;
        Ok(Self {
            fns: Arc::new(fns),
            library: library.to_owned(),
        })
    }

    /// The library this backend loaded.
    pub fn library(&self) -> &str {
        &self.library
    }

    /// Whether the library has `ibv_reg_dmabuf_mr` (rdma-core 34 and later).
    pub fn has_dmabuf(&self) -> bool {
        self.fns.reg_dmabuf_mr.is_some()
    }

    /// The device list, or None when the library finds no RDMA subsystem at
    /// all (`ENOSYS`, as on a kernel without InfiniBand support), which
    /// counts as no devices.
    fn devices(&self) -> Result<Option<DeviceList>, VerbsError> {
        match DeviceList::get(&self.fns) {
            Ok(list) => Ok(Some(list)),
            Err(e) if matches!(e.errno, Some(libc::ENOSYS | libc::ENOENT | libc::ENODEV)) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Verbs for IbVerbs {
    fn backend(&self) -> &'static str {
        "ibverbs"
    }

    fn device_names(&self) -> Result<Vec<String>, VerbsError> {
        Ok(self.devices()?.map(|list| list.names()).unwrap_or_default())
    }

    fn open_device(&self, name: &str) -> Result<Arc<dyn Device>, VerbsError> {
        let list = self.devices()?;
        let opened = list.as_ref().and_then(|list| {
            let index = list.names().iter().position(|n| n == name)?;
            list.open(index)
        });
        let Some(raw) = opened else {
            return Err(VerbsError::new(
                "ibv_open_device",
                VerbsErrorKind::NotFound,
                format!("no RDMA device named {name:?}"),
            ));
        };
        let ctx = Arc::new(Context {
            raw: Arc::new(raw?),
            cqs: Mutex::new(HashMap::new()),
        });
        Ok(Arc::new(IbDevice {
            ctx,
            name: name.to_owned(),
        }))
    }
}

/// An open device context; closed when the last handle to it goes.
struct Context {
    raw: Arc<context::Context>,
    /// The CQs created on this context, by the address of their handle, so
    /// that `create_qp` can find the `ibv_cq` behind an `Arc<dyn CompletionQueue>`.
    cqs: Mutex<HashMap<usize, Weak<Cq>>>,
}

/// An open RDMA device.
pub struct IbDevice {
    ctx: Arc<Context>,
    name: String,
}

impl fmt::Debug for IbDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IbDevice").field("name", &self.name).finish()
    }
}

impl IbDevice {
    /// `ibv_device_attr::max_qp_init_rd_atom`, which [`DeviceAttr`] does not carry.
    pub fn max_qp_init_rd_atom(&self) -> Result<u32, VerbsError> {
        Ok(u32::try_from(self.ctx.raw.query_device()?.max_qp_init_rd_atom).unwrap_or(0))
    }
}

fn nonneg(v: c_int) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

fn port_state(v: u32) -> PortState {
    match v {
        1 => PortState::Down,
        2 => PortState::Init,
        3 => PortState::Armed,
        ffi::IBV_PORT_ACTIVE => PortState::Active,
        5 => PortState::ActiveDefer,
        _ => PortState::Nop,
    }
}

impl Device for IbDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn attr(&self) -> Result<DeviceAttr, VerbsError> {
        let a = self.ctx.raw.query_device()?;
        Ok(DeviceAttr {
            vendor_id: a.vendor_id,
            vendor_part_id: a.vendor_part_id,
            phys_port_cnt: a.phys_port_cnt,
            max_qp: nonneg(a.max_qp),
            max_qp_wr: nonneg(a.max_qp_wr),
            max_cqe: nonneg(a.max_cqe),
            max_mr_size: a.max_mr_size,
            max_qp_rd_atom: nonneg(a.max_qp_rd_atom),
            mw_type2: a.device_cap_flags
                & (ffi::IBV_DEVICE_MEM_WINDOW_TYPE_2A | ffi::IBV_DEVICE_MEM_WINDOW_TYPE_2B)
                != 0
                && self.ctx.raw.ops().alloc_mw.is_some(),
        })
    }

    fn query_port(&self, port: u8) -> Result<PortAttr, VerbsError> {
        let a = self.ctx.raw.query_port(port)?;
        let mtu = |v: u32| {
            Mtu::from_raw(v).ok_or_else(|| {
                VerbsError::new(
                    "ibv_query_port",
                    VerbsErrorKind::InvalidArgument,
                    format!("port {port} reports unknown MTU code {v}"),
                )
            })
        };
        Ok(PortAttr {
            state: port_state(a.state),
            max_mtu: mtu(a.max_mtu)?,
            active_mtu: mtu(a.active_mtu)?,
            gid_tbl_len: nonneg(a.gid_tbl_len),
            lid: a.lid,
            link_layer: match a.link_layer {
                ffi::IBV_LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
                ffi::IBV_LINK_LAYER_INFINIBAND => LinkLayer::InfiniBand,
                // Unspecified (0): providers that predate the field are InfiniBand.
                _ => LinkLayer::InfiniBand,
            },
        })
    }

    fn query_gid(&self, port: u8, index: u32) -> Result<Gid, VerbsError> {
        let idx = c_int::try_from(index).map_err(|_| {
            VerbsError::new(
                "ibv_query_gid",
                VerbsErrorKind::InvalidArgument,
                format!("GID index {index} is out of range"),
            )
        })?;
        Ok(Gid(self.ctx.raw.query_gid(port, idx)?.raw))
    }

    fn supports_dmabuf(&self) -> bool {
        self.ctx.raw.has_dmabuf()
    }

    fn alloc_pd(&self) -> Result<Arc<dyn ProtectionDomain>, VerbsError> {
        let raw = context::Pd::alloc(&self.ctx.raw)?;
        Ok(Arc::new(IbPd {
            inner: Arc::new(Pd {
                ctx: self.ctx.clone(),
                raw: Arc::new(raw),
            }),
        }))
    }

    fn create_cq(&self, cqe: u32) -> Result<Arc<dyn CompletionQueue>, VerbsError> {
        let cqe = c_int::try_from(cqe.max(1)).map_err(|_| {
            VerbsError::new(
                "ibv_create_cq",
                VerbsErrorKind::InvalidArgument,
                format!("{cqe} CQ entries is too many"),
            )
        })?;
        let raw = ffi::queue::Cq::create(&self.ctx.raw, cqe)?;
        let inner = Arc::new(Cq {
            ctx: self.ctx.clone(),
            raw: Arc::new(raw),
            state: Mutex::new(CqState::default()),
        });
        let handle = Arc::new(IbCq { inner: inner.clone() });
        lock(&self.ctx.cqs).insert(Arc::as_ptr(&handle) as usize, Arc::downgrade(&inner));
        Ok(handle)
    }
}

/// A protection domain; deallocated when the last MR, QP and handle go.
struct Pd {
    ctx: Arc<Context>,
    raw: Arc<context::Pd>,
}

/// A protection domain handle.
pub struct IbPd {
    inner: Arc<Pd>,
}

impl fmt::Debug for IbPd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IbPd").finish_non_exhaustive()
    }
}

fn access_bits(op: &'static str, access: AccessFlags) -> Result<c_int, VerbsError> {
    c_int::try_from(access.0)
        .map_err(|_| VerbsError::new(op, VerbsErrorKind::InvalidArgument, "access flags out of range"))
}

impl ProtectionDomain for IbPd {
    fn reg_mr(&self, region: MemRegion, access: AccessFlags) -> Result<Box<dyn MemoryRegion>, VerbsError> {
        let bits = access_bits("ibv_reg_mr", access)?;
        let raw = Mr::register(&self.inner.raw, region, bits)?;
        Ok(Box::new(IbMr::new(self.inner.clone(), raw)))
    }

    fn reg_dmabuf_mr(
        &self,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Box<dyn MemoryRegion>, VerbsError> {
        if !self.inner.ctx.raw.has_dmabuf() {
            return Err(unsupported("ibv_reg_dmabuf_mr", DMABUF_MISSING));
        }
        let bits = access_bits("ibv_reg_dmabuf_mr", access)?;
        let raw = Mr::register_dmabuf(&self.inner.raw, fd, offset, len, iova, bits)?;
        Ok(Box::new(IbMr::new(self.inner.clone(), raw)))
    }

    fn create_qp(&self, init: &QpInitAttr) -> Result<Box<dyn QueuePair>, VerbsError> {
        let ctx = &self.inner.ctx;
        let find = |cq: &Arc<dyn CompletionQueue>| {
            let key = Arc::as_ptr(cq) as *const () as usize;
            lock(&ctx.cqs).get(&key).and_then(Weak::upgrade).ok_or_else(|| {
                VerbsError::new(
                    "ibv_create_qp",
                    VerbsErrorKind::InvalidArgument,
                    "the completion queue does not belong to this device",
                )
            })
        };
        let send_cq = find(&init.send_cq)?;
        let recv_cq = find(&init.recv_cq)?;
        let cap = ffi::ibv_qp_cap {
            max_send_wr: init.max_send_wr,
            max_recv_wr: init.max_recv_wr,
            max_send_sge: init.max_send_sge,
            max_recv_sge: init.max_recv_sge,
            max_inline_data: 0,
        };
        let raw = Qp::create_rc(&self.inner.raw, &send_cq.raw, &recv_cq.raw, cap, init.sq_sig_all)?;
        Ok(Box::new(IbQp {
            pd: self.inner.clone(),
            raw,
        }))
    }

    fn alloc_mw(&self) -> Result<Box<dyn MemoryWindow>, VerbsError> {
        let raw = Mw::alloc(&self.inner.raw)?;
        let rkey = raw.rkey();
        Ok(Box::new(IbMw {
            pd: self.inner.clone(),
            raw,
            rkey: AtomicU32::new(rkey),
        }))
    }
}

/// A type-2 memory window.
pub(crate) struct IbMw {
    pd: Arc<Pd>,
    raw: Mw,
    /// The key of the latest bind posted.
    rkey: AtomicU32,
}

impl fmt::Debug for IbMw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IbMw")
            .field("rkey", &format_args!("{:#x}", self.rkey.load(Ordering::Relaxed)))
            .finish()
    }
}

impl MemoryWindow for IbMw {
    fn rkey(&self) -> u32 {
        self.rkey.load(Ordering::Relaxed)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A key byte other than `not`, hard to guess: SipHash under the process's
/// random keys (std's `RandomState`) over a counter.
fn fresh_key_byte(not: u8) -> u8 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static STATE: std::sync::OnceLock<std::collections::hash_map::RandomState> = std::sync::OnceLock::new();
    let state = STATE.get_or_init(std::collections::hash_map::RandomState::new);
    loop {
        let mut h = state.build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        let b = h.finish() as u8;
        if b != not {
            return b;
        }
    }
}

/// A registered memory region.
pub struct IbMr {
    pd: Arc<Pd>,
    raw: Mr,
    lkey: u32,
    rkey: u32,
    addr: u64,
    len: usize,
}

impl IbMr {
    fn new(pd: Arc<Pd>, raw: Mr) -> Self {
        let m = raw.info();
        Self {
            lkey: m.lkey,
            rkey: m.rkey,
            addr: m.addr,
            len: m.len,
            pd,
            raw,
        }
    }
}

impl fmt::Debug for IbMr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IbMr")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .finish()
    }
}

impl MemoryRegion for IbMr {
    fn lkey(&self) -> u32 {
        self.lkey
    }
    fn rkey(&self) -> u32 {
        self.rkey
    }
    fn addr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[derive(Default)]
struct CqState {
    /// Completions taken from the CQ by `wait` before it slept, handed out
    /// first by `poll`.
    stash: VecDeque<WorkCompletion>,
}

/// A completion queue with its own completion channel.
struct Cq {
    ctx: Arc<Context>,
    raw: Arc<ffi::queue::Cq>,
    state: Mutex<CqState>,
}

fn wc_opcode(v: u32) -> WcOpcode {
    match v {
        ffi::IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
        ffi::IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
        ffi::IBV_WC_RECV => WcOpcode::Recv,
        ffi::IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
        ffi::IBV_WC_SEND => WcOpcode::Send,
        ffi::IBV_WC_BIND_MW => WcOpcode::BindMw,
        ffi::IBV_WC_LOCAL_INV => WcOpcode::LocalInv,
        // Anything else: the opcode of a failed completion is
        // undefined, and RC work requests this backend posts are one of
        // the five above.
        _ => WcOpcode::Send,
    }
}

impl Cq {
    /// Up to `max` completions from the CQ, in batches of 16.
    fn poll_raw(&self, out: &mut Vec<WorkCompletion>, max: usize) -> Result<(), VerbsError> {
        let mut wcs = [ffi::ibv_wc::default(); 16];
        let mut left = max;
        while left > 0 {
            let n = left.min(wcs.len());
            let got = self.raw.poll(&mut wcs[..n])?;
            for wc in wcs.iter().take(got) {
                out.push(WorkCompletion {
                    wr_id: wc.wr_id,
                    status: WcStatus::from_raw(wc.status),
                    opcode: wc_opcode(wc.opcode),
                    vendor_err: wc.vendor_err,
                    byte_len: wc.byte_len,
                    imm_data: (wc.wc_flags & ffi::IBV_WC_WITH_IMM != 0).then(|| u32::from_be(wc.imm_data)),
                    qp_num: wc.qp_num,
                });
            }
            if got < n {
                break;
            }
            left -= got;
        }
        Ok(())
    }
}

/// A completion queue handle.
pub struct IbCq {
    inner: Arc<Cq>,
}

impl fmt::Debug for IbCq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IbCq").finish_non_exhaustive()
    }
}

impl Drop for IbCq {
    fn drop(&mut self) {
        // Forget this handle's address, so that another object allocated at
        // it later can never be mistaken for this CQ by `create_qp`.
        let key = self as *const Self as usize;
        let mut cqs = lock(&self.inner.ctx.cqs);
        if cqs
            .get(&key)
            .is_some_and(|w| w.as_ptr() == Arc::as_ptr(&self.inner))
        {
            cqs.remove(&key);
        }
    }
}

impl CompletionQueue for IbCq {
    fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize, VerbsError> {
        let mut n = 0;
        {
            let mut st = lock(&self.inner.state);
            while n < out.len() {
                let Some(wc) = st.stash.pop_front() else { break };
                out[n] = wc;
                n += 1;
            }
        }
        if n < out.len() {
            let mut fresh = Vec::new();
            self.inner.poll_raw(&mut fresh, out.len() - n)?;
            for wc in fresh {
                out[n] = wc;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Arms the CQ (`ibv_req_notify_cq`), takes any completion that arrived
    /// before arming into a stash that `poll` hands out first, and otherwise
    /// sleeps in `poll(2)` on the completion channel's fd until an event or
    /// the timeout.
    fn wait(&self, timeout: Duration) -> Result<bool, VerbsError> {
        let cq = &self.inner;
        cq.raw.req_notify()?;
        {
            let mut fresh = Vec::new();
            cq.poll_raw(&mut fresh, 16)?;
            let mut st = lock(&cq.state);
            st.stash.extend(fresh);
            if !st.stash.is_empty() {
                return Ok(true);
            }
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ms = c_int::try_from(left.as_millis().min(i32::MAX as u128)).unwrap_or(c_int::MAX);
            match cq.raw.poll_channel(ms) {
                Ok(true) => {
                    cq.raw.take_event();
                    return Ok(true);
                }
                Ok(false) => return Ok(false),
                Err(e) if e.errno == Some(libc::EINTR) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// An RC queue pair.
pub struct IbQp {
    pd: Arc<Pd>,
    raw: Qp,
}

impl fmt::Debug for IbQp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IbQp")
            .field("qp_num", &self.raw.qp_num())
            .finish()
    }
}

fn raw_qp_attr(attr: &QpAttr) -> ffi::ibv_qp_attr {
    let mut a = ffi::ibv_qp_attr {
        qp_state: attr.qp_state as u32,
        path_mtu: attr.path_mtu as u32,
        rq_psn: attr.rq_psn,
        sq_psn: attr.sq_psn,
        dest_qp_num: attr.dest_qp_num,
        qp_access_flags: attr.qp_access_flags.0,
        pkey_index: attr.pkey_index,
        max_rd_atomic: attr.max_rd_atomic,
        max_dest_rd_atomic: attr.max_dest_rd_atomic,
        min_rnr_timer: attr.min_rnr_timer,
        port_num: attr.port_num,
        timeout: attr.timeout,
        retry_cnt: attr.retry_cnt,
        rnr_retry: attr.rnr_retry,
        ..ffi::ibv_qp_attr::default()
    };
    a.ah_attr.dlid = attr.dlid;
    a.ah_attr.port_num = attr.port_num;
    if !attr.dgid.is_zero() {
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid.raw = attr.dgid.0;
        a.ah_attr.grh.sgid_index = attr.sgid_index;
        a.ah_attr.grh.hop_limit = attr.hop_limit;
    }
    a
}

fn sges(list: &[hipobj_platform::Sge]) -> Vec<ffi::ibv_sge> {
    list.iter()
        .map(|s| ffi::ibv_sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
        .collect()
}

fn send_flags(signaled: bool) -> u32 {
    if signaled { ffi::IBV_SEND_SIGNALED } else { 0 }
}

impl QueuePair for IbQp {
    fn qp_num(&self) -> u32 {
        self.raw.qp_num()
    }

    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), VerbsError> {
        let raw = raw_qp_attr(attr);
        let bits = c_int::try_from(mask.0).map_err(|_| {
            VerbsError::new(
                "ibv_modify_qp",
                VerbsErrorKind::InvalidArgument,
                "mask out of range",
            )
        })?;
        self.raw.modify(&raw, bits)
    }

    fn state(&self) -> Result<QpState, VerbsError> {
        let state = self.raw.query_state()?;
        QpState::from_raw(state).ok_or_else(|| {
            VerbsError::new(
                "ibv_query_qp",
                VerbsErrorKind::InvalidArgument,
                format!("unknown QP state {state}"),
            )
        })
    }

    fn post_send(&self, wr: &SendWr<'_>) -> Result<(), VerbsError> {
        let list = sges(wr.sg_list);
        let rdma = |remote_addr, rkey| Some(ffi::ibv_send_wr_rdma { remote_addr, rkey });
        let (opcode, imm_data, rdma) = match wr.op {
            SendOp::Send => (ffi::IBV_WR_SEND, 0, None),
            SendOp::SendWithImm { imm } => (ffi::IBV_WR_SEND_WITH_IMM, imm.to_be(), None),
            SendOp::Write { remote_addr, rkey } => (ffi::IBV_WR_RDMA_WRITE, 0, rdma(remote_addr, rkey)),
            SendOp::WriteWithImm {
                remote_addr,
                rkey,
                imm,
            } => (
                ffi::IBV_WR_RDMA_WRITE_WITH_IMM,
                imm.to_be(),
                rdma(remote_addr, rkey),
            ),
            SendOp::Read { remote_addr, rkey } => (ffi::IBV_WR_RDMA_READ, 0, rdma(remote_addr, rkey)),
            // `invalidate_rkey`, in host order (unlike `imm_data`).
            SendOp::LocalInv { rkey } => (ffi::IBV_WR_LOCAL_INV, rkey, None),
        };
        self.raw.post_send(&SendRequest {
            wr_id: wr.wr_id,
            opcode,
            send_flags: send_flags(wr.signaled),
            imm_data,
            rdma,
            sges: &list,
        })
    }

    fn bind_mw(&self, wr: &BindMwWr<'_>) -> Result<u32, VerbsError> {
        self.bind(wr)
    }

    fn post_recv(&self, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        self.raw.post_recv(wr.wr_id, &sges(wr.sg_list))
    }
}

impl IbQp {
    fn bind(&self, wr: &BindMwWr<'_>) -> Result<u32, VerbsError> {
        let foreign = |what: &str| {
            VerbsError::new(
                "ibv_post_send",
                VerbsErrorKind::InvalidArgument,
                format!("the {what} does not belong to the libibverbs backend"),
            )
        };
        let mw = wr
            .mw
            .as_any()
            .downcast_ref::<IbMw>()
            .ok_or_else(|| foreign("memory window"))?;
        let mr = wr
            .mr
            .as_any()
            .downcast_ref::<IbMr>()
            .ok_or_else(|| foreign("memory region"))?;
        if !Arc::ptr_eq(&mw.pd.ctx, &self.pd.ctx) || !Arc::ptr_eq(&mr.pd.ctx, &self.pd.ctx) {
            return Err(foreign("window or region"));
        }
        if !self.raw.can_post_send() {
            return Err(unsupported("ibv_post_send", "the provider has no post_send"));
        }
        let old = mw.rkey.load(Ordering::Relaxed);
        let key = match wr.rkey {
            Some(k) if k >> 8 == old >> 8 => k,
            Some(_) => return Err(foreign("key (another window's index)")),
            None => (old & !0xff) | u32::from(fresh_key_byte(old as u8)),
        };
        self.raw.post_bind(&BindRequest {
            wr_id: wr.wr_id,
            send_flags: send_flags(wr.signaled),
            mw: &mw.raw,
            mr: &mr.raw,
            rkey: key,
            addr: wr.addr,
            length: wr.length,
            access: wr.access.0,
        })?;
        mw.rkey.store(key, Ordering::Relaxed);
        Ok(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qp_attr_conversion() {
        let attr = QpAttr {
            qp_state: QpState::Rtr,
            dgid: Gid::from_ipv4(std::net::Ipv4Addr::new(192, 0, 2, 1)),
            sgid_index: 3,
            dest_qp_num: 0x42,
            path_mtu: Mtu::Mtu2048,
            ..QpAttr::default()
        };
        let raw = raw_qp_attr(&attr);
        assert_eq!((raw.qp_state, raw.path_mtu, raw.dest_qp_num), (2, 4, 0x42));
        assert_eq!(raw.ah_attr.is_global, 1);
        assert_eq!(raw.ah_attr.grh.sgid_index, 3);
        assert_eq!(raw.ah_attr.grh.dgid.raw, attr.dgid.0);
        let local = raw_qp_attr(&QpAttr::default());
        assert_eq!(local.ah_attr.is_global, 0);
    }

    #[test]
    fn wc_opcodes() {
        assert_eq!(wc_opcode(2), WcOpcode::RdmaRead);
        assert_eq!(wc_opcode(129), WcOpcode::RecvRdmaWithImm);
        assert_eq!(wc_opcode(77), WcOpcode::Send);
    }
}
