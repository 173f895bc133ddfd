//! [`IbVerbs`]: the Verbs seam over libibverbs, loaded at run time.
//!
//! Ownership mirrors verbs: each object holds an `Arc` to its parent (an MR
//! or a QP to its PD, a PD or a CQ to the device context, the context to the
//! loaded library), so a child can never outlive its parent, whatever order
//! the handles are dropped in, and the library stays loaded until the last
//! object is released.
//!
//! Every `unsafe` block here is a call into libibverbs or a provider's ops
//! table, on pointers that the owning object keeps valid.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::collections::VecDeque;
use std::ffi::{CStr, c_int, c_void};
use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use hipobj_platform::{
    AccessFlags, BindMwWr, CompletionQueue, Device, DeviceAttr, Gid, LinkLayer, MemRegion, MemoryRegion,
    MemoryWindow, Mtu, PortAttr, PortState, ProtectionDomain, QpAttr, QpAttrMask, QpInitAttr, QpState,
    QueuePair, RecvWr, SendOp, SendWr, Verbs, VerbsError, VerbsErrorKind, WcOpcode, WcStatus, WorkCompletion,
};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::ffi::table::{LoadError, VerbsFns};
use crate::ffi::{self, Zeroed};

/// The soname the backend loads unless told otherwise.
pub const DEFAULT_LIBRARY: &str = "libibverbs.so.1";

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn kind_of(errno: i32) -> VerbsErrorKind {
    match errno {
        libc::ENOENT | libc::ENODEV | libc::ENXIO => VerbsErrorKind::NotFound,
        libc::EOPNOTSUPP | libc::ENOSYS | libc::EPROTONOSUPPORT => VerbsErrorKind::Unsupported,
        libc::EINVAL | libc::EFAULT | libc::EPERM | libc::EACCES => VerbsErrorKind::InvalidArgument,
        libc::ENOMEM | libc::ENOSPC | libc::EAGAIN | libc::EBUSY => VerbsErrorKind::OutOfResources,
        _ => VerbsErrorKind::Os,
    }
}

fn os_error(op: &'static str, errno: i32) -> VerbsError {
    let text = std::io::Error::from_raw_os_error(errno);
    VerbsError::with_errno(op, kind_of(errno), errno, text.to_string())
}

/// Checks a libibverbs return code (0, or an errno, or -1 with errno set).
fn check(op: &'static str, rc: c_int) -> Result<(), VerbsError> {
    match rc {
        0 => Ok(()),
        -1 => Err(os_error(op, errno())),
        e if e > 0 => Err(os_error(op, e)),
        e => Err(os_error(op, -e)),
    }
}

fn non_null<T>(op: &'static str, p: *mut T) -> Result<NonNull<T>, VerbsError> {
    NonNull::new(p).ok_or_else(|| os_error(op, errno()))
}

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

    /// Runs `f` over the device list, which is freed afterwards. A library
    /// that finds no RDMA subsystem at all (`ENOSYS`, as on a kernel without
    /// InfiniBand support) reports an empty list.
    fn with_devices<R>(
        &self,
        f: impl FnOnce(&[*mut ffi::ibv_device]) -> Result<R, VerbsError>,
    ) -> Result<R, VerbsError> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-pointer for the count.
        let list = unsafe { (self.fns.get_device_list)(&mut n) };
        if list.is_null() {
            let e = errno();
            return match e {
                libc::ENOSYS | libc::ENOENT | libc::ENODEV => f(&[]),
                _ => Err(os_error("ibv_get_device_list", e)),
            };
        }
        let len = usize::try_from(n).unwrap_or(0);
        // SAFETY: libibverbs returned an array of `n` device pointers
        // (followed by a NULL), valid until ibv_free_device_list.
        let devices = unsafe { std::slice::from_raw_parts(list, len) };
        let result = f(devices);
        // SAFETY: `list` came from ibv_get_device_list and is freed once;
        // `devices` is not used past this point.
        unsafe { (self.fns.free_device_list)(list) };
        result
    }

    fn device_name(&self, dev: *mut ffi::ibv_device) -> String {
        // SAFETY: `dev` is an entry of a live device list.
        let p = unsafe { (self.fns.get_device_name)(dev) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: libibverbs returns the NUL-terminated name stored in the
        // device, valid while the list is.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl Verbs for IbVerbs {
    fn backend(&self) -> &'static str {
        "ibverbs"
    }

    fn device_names(&self) -> Result<Vec<String>, VerbsError> {
        self.with_devices(|devs| Ok(devs.iter().map(|&d| self.device_name(d)).collect()))
    }

    fn open_device(&self, name: &str) -> Result<Arc<dyn Device>, VerbsError> {
        let ctx = self.with_devices(|devs| {
            let Some(&dev) = devs.iter().find(|&&d| self.device_name(d) == name) else {
                return Err(VerbsError::new(
                    "ibv_open_device",
                    VerbsErrorKind::NotFound,
                    format!("no RDMA device named {name:?}"),
                ));
            };
            // SAFETY: `dev` is an entry of the live device list; the context
            // keeps its own reference to the device after the list is freed.
            non_null("ibv_open_device", unsafe { (self.fns.open_device)(dev) })
        })?;
        let ctx = Arc::new(Context {
            fns: self.fns.clone(),
            ctx,
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
    fns: Arc<VerbsFns>,
    ctx: NonNull<ffi::ibv_context>,
    /// The CQs created on this context, by the address of their handle, so
    /// that `create_qp` can find the `ibv_cq` behind an `Arc<dyn CompletionQueue>`.
    cqs: Mutex<HashMap<usize, Weak<Cq>>>,
}

// SAFETY: libibverbs objects may be used from any thread (verbs calls are
// thread-safe, as rdma-core documents); the pointer is only released in Drop.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every child holds an Arc to this context, so none is left.
        unsafe { (self.fns.close_device)(self.ctx.as_ptr()) };
    }
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
    fn raw_attr(&self) -> Result<ffi::ibv_device_attr, VerbsError> {
        let mut attr = ffi::ibv_device_attr::zeroed();
        // SAFETY: the context is open and `attr` is a writable ibv_device_attr.
        check("ibv_query_device", unsafe {
            (self.ctx.fns.query_device)(self.ctx.ctx.as_ptr(), &mut attr)
        })?;
        Ok(attr)
    }

    /// `ibv_device_attr::max_qp_init_rd_atom`, which [`DeviceAttr`] does not carry.
    pub fn max_qp_init_rd_atom(&self) -> Result<u32, VerbsError> {
        Ok(u32::try_from(self.raw_attr()?.max_qp_init_rd_atom).unwrap_or(0))
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
        let a = self.raw_attr()?;
        Ok(DeviceAttr {
            vendor_id: a.vendor_id,
            vendor_part_id: a.vendor_part_id,
            phys_port_cnt: a.phys_port_cnt,
            max_qp: nonneg(a.max_qp),
            max_qp_wr: nonneg(a.max_qp_wr),
            max_cqe: nonneg(a.max_cqe),
            max_mr_size: a.max_mr_size,
            max_qp_rd_atom: nonneg(a.max_qp_rd_atom),
            mw_type2: a.device_cap_flags & (ffi::IBV_DEVICE_MEM_WINDOW_TYPE_2A | ffi::IBV_DEVICE_MEM_WINDOW_TYPE_2B)
                != 0
                // SAFETY: see `Cq::ctx_ops`: the context is open.
                && unsafe { (*self.ctx.ctx.as_ptr()).ops }.alloc_mw.is_some(),
        })
    }

    fn query_port(&self, port: u8) -> Result<PortAttr, VerbsError> {
        let mut a = ffi::ibv_port_attr::zeroed();
        // SAFETY: the context is open; `a` is a zeroed ibv_port_attr, at
        // least as large as the compat structure the exported symbol fills.
        check("ibv_query_port", unsafe {
            (self.ctx.fns.query_port)(self.ctx.ctx.as_ptr(), port, &mut a)
        })?;
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
        let mut gid = ffi::ibv_gid::default();
        // SAFETY: the context is open and `gid` is a writable union ibv_gid.
        check("ibv_query_gid", unsafe {
            (self.ctx.fns.query_gid)(self.ctx.ctx.as_ptr(), port, idx, &mut gid)
        })?;
        Ok(Gid(gid.raw))
    }

    fn supports_dmabuf(&self) -> bool {
        self.ctx.fns.reg_dmabuf_mr.is_some()
    }

    fn alloc_pd(&self) -> Result<Arc<dyn ProtectionDomain>, VerbsError> {
        // SAFETY: the context is open.
        let pd = non_null("ibv_alloc_pd", unsafe {
            (self.ctx.fns.alloc_pd)(self.ctx.ctx.as_ptr())
        })?;
        Ok(Arc::new(IbPd {
            inner: Arc::new(Pd {
                ctx: self.ctx.clone(),
                pd,
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
        let fns = &self.ctx.fns;
        // SAFETY: the context is open.
        let channel = non_null("ibv_create_comp_channel", unsafe {
            (fns.create_comp_channel)(self.ctx.ctx.as_ptr())
        })?;
        // SAFETY: `channel` is live; its fd is owned by libibverbs and stays
        // open until ibv_destroy_comp_channel. Making it non-blocking means a
        // second waiter that loses the race for an event gets EAGAIN rather
        // than blocking in ibv_get_cq_event.
        unsafe {
            let fd = (*channel.as_ptr()).fd;
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
        }
        // SAFETY: the context and the channel are live.
        let cq = unsafe { (fns.create_cq)(self.ctx.ctx.as_ptr(), cqe, ptr::null_mut(), channel.as_ptr(), 0) };
        let cq = match NonNull::new(cq) {
            Some(cq) => cq,
            None => {
                let e = errno();
                // SAFETY: the channel is live and no CQ uses it.
                unsafe { (fns.destroy_comp_channel)(channel.as_ptr()) };
                return Err(os_error("ibv_create_cq", e));
            }
        };
        let inner = Arc::new(Cq {
            ctx: self.ctx.clone(),
            cq,
            channel,
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
    pd: NonNull<ffi::ibv_pd>,
}

// SAFETY: see `Context`.
unsafe impl Send for Pd {}
// SAFETY: see `Context`.
unsafe impl Sync for Pd {}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: every MR and QP on this PD holds an Arc to it, so none is left.
        unsafe { (self.ctx.fns.dealloc_pd)(self.pd.as_ptr()) };
    }
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
        // SAFETY: the PD is live. The memory itself is vouched for by
        // `MemRegion`'s contract: it stays allocated until this MR is dropped.
        let mr = non_null("ibv_reg_mr", unsafe {
            (self.inner.ctx.fns.reg_mr)(
                self.inner.pd.as_ptr(),
                region.addr() as *mut c_void,
                region.len(),
                bits,
            )
        })?;
        Ok(Box::new(IbMr::new(self.inner.clone(), mr)))
    }

    fn reg_dmabuf_mr(
        &self,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Box<dyn MemoryRegion>, VerbsError> {
        let Some(reg) = self.inner.ctx.fns.reg_dmabuf_mr else {
            return Err(VerbsError::new(
                "ibv_reg_dmabuf_mr",
                VerbsErrorKind::Unsupported,
                "this libibverbs has no ibv_reg_dmabuf_mr (rdma-core 34 or later needed)",
            ));
        };
        let bits = access_bits("ibv_reg_dmabuf_mr", access)?;
        // SAFETY: the PD is live and `fd` is an open dma-buf for the duration
        // of the call; the kernel takes its own reference to the buffer.
        let mr = non_null("ibv_reg_dmabuf_mr", unsafe {
            reg(self.inner.pd.as_ptr(), offset, len, iova, fd.as_raw_fd(), bits)
        })?;
        Ok(Box::new(IbMr::new(self.inner.clone(), mr)))
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
        let mut attr = ffi::ibv_qp_init_attr::zeroed();
        attr.send_cq = send_cq.cq.as_ptr();
        attr.recv_cq = recv_cq.cq.as_ptr();
        attr.cap = ffi::ibv_qp_cap {
            max_send_wr: init.max_send_wr,
            max_recv_wr: init.max_recv_wr,
            max_send_sge: init.max_send_sge,
            max_recv_sge: init.max_recv_sge,
            max_inline_data: 0,
        };
        attr.qp_type = ffi::IBV_QPT_RC;
        attr.sq_sig_all = c_int::from(init.sq_sig_all);
        // SAFETY: the PD and both CQs are live (held below for the QP's life).
        let qp = non_null("ibv_create_qp", unsafe {
            (ctx.fns.create_qp)(self.inner.pd.as_ptr(), &mut attr)
        })?;
        // SAFETY: `qp` was just created and is live.
        let qp_num = unsafe { (*qp.as_ptr()).qp_num };
        Ok(Box::new(IbQp {
            pd: self.inner.clone(),
            _send_cq: send_cq,
            _recv_cq: recv_cq,
            qp,
            qp_num,
        }))
    }

    fn alloc_mw(&self) -> Result<Box<dyn MemoryWindow>, VerbsError> {
        // SAFETY: see `Cq::ctx_ops`: the context is open.
        let ops = unsafe { (*self.inner.ctx.ctx.as_ptr()).ops };
        let (Some(alloc), Some(_)) = (ops.alloc_mw, ops.dealloc_mw) else {
            return Err(VerbsError::new(
                "ibv_alloc_mw",
                VerbsErrorKind::Unsupported,
                "the provider has no memory windows",
            ));
        };
        // SAFETY: the PD is live; this is what the inline `ibv_alloc_mw` of
        // verbs.h does.
        let mw = non_null("ibv_alloc_mw", unsafe {
            alloc(self.inner.pd.as_ptr(), ffi::IBV_MW_TYPE_2)
        })?;
        // SAFETY: `mw` was just allocated and is live.
        let rkey = unsafe { (*mw.as_ptr()).rkey };
        Ok(Box::new(IbMw {
            pd: self.inner.clone(),
            mw,
            rkey: AtomicU32::new(rkey),
        }))
    }
}

/// A type-2 memory window.
pub struct IbMw {
    pd: Arc<Pd>,
    mw: NonNull<ffi::ibv_mw>,
    /// The key of the latest bind posted.
    rkey: AtomicU32,
}

// SAFETY: see `Context`.
unsafe impl Send for IbMw {}
// SAFETY: see `Context`.
unsafe impl Sync for IbMw {}

impl fmt::Debug for IbMw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IbMw")
            .field("rkey", &format_args!("{:#x}", self.rkey.load(Ordering::Relaxed)))
            .finish()
    }
}

impl Drop for IbMw {
    fn drop(&mut self) {
        // SAFETY: see `Cq::ctx_ops`: the context is open.
        let ops = unsafe { (*self.pd.ctx.ctx.as_ptr()).ops };
        if let Some(dealloc) = ops.dealloc_mw {
            // SAFETY: the window is live and deallocated once, before its PD
            // (as the inline `ibv_dealloc_mw` of verbs.h does).
            unsafe { dealloc(self.mw.as_ptr()) };
        }
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
    mr: NonNull<ffi::ibv_mr>,
    lkey: u32,
    rkey: u32,
    addr: u64,
    len: usize,
}

// SAFETY: see `Context`.
unsafe impl Send for IbMr {}
// SAFETY: see `Context`.
unsafe impl Sync for IbMr {}

impl IbMr {
    fn new(pd: Arc<Pd>, mr: NonNull<ffi::ibv_mr>) -> Self {
        // SAFETY: `mr` was just returned by a registration and is live.
        let m = unsafe { mr.as_ref() };
        Self {
            lkey: m.lkey,
            rkey: m.rkey,
            addr: m.addr as u64,
            len: m.length,
            pd,
            mr,
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

impl Drop for IbMr {
    fn drop(&mut self) {
        // SAFETY: the MR is live and deregistered once; its PD outlives it.
        unsafe { (self.pd.ctx.fns.dereg_mr)(self.mr.as_ptr()) };
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
    cq: NonNull<ffi::ibv_cq>,
    channel: NonNull<ffi::ibv_comp_channel>,
    state: Mutex<CqState>,
}

// SAFETY: see `Context`.
unsafe impl Send for Cq {}
// SAFETY: see `Context`.
unsafe impl Sync for Cq {}

impl Drop for Cq {
    fn drop(&mut self) {
        let fns = &self.ctx.fns;
        // Every event read by `wait` was acknowledged at once, so destroying
        // the CQ cannot block on unacknowledged events.
        // SAFETY: every QP using this CQ holds an Arc to it, so none is left;
        // the channel is destroyed after the only CQ on it.
        unsafe {
            (fns.destroy_cq)(self.cq.as_ptr());
            (fns.destroy_comp_channel)(self.channel.as_ptr());
        }
    }
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
    /// `ibv_poll_cq`, through the provider's ops table as verbs.h does.
    fn poll_raw(&self, out: &mut Vec<WorkCompletion>, max: usize) -> Result<(), VerbsError> {
        let Some(poll) = self.ctx_ops().poll_cq else {
            return Err(VerbsError::new(
                "ibv_poll_cq",
                VerbsErrorKind::Unsupported,
                "the provider has no poll_cq",
            ));
        };
        let mut wcs = [ffi::ibv_wc::default(); 16];
        let mut left = max;
        while left > 0 {
            let n = c_int::try_from(left.min(wcs.len())).unwrap_or(1);
            // SAFETY: the CQ is live and `wcs` has room for `n` completions.
            let got = unsafe { poll(self.cq.as_ptr(), n, wcs.as_mut_ptr()) };
            if got < 0 {
                return Err(os_error("ibv_poll_cq", if got == -1 { errno() } else { -got }));
            }
            let got = usize::try_from(got).unwrap_or(0);
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
            if got < n as usize {
                break;
            }
            left -= got;
        }
        Ok(())
    }

    fn ctx_ops(&self) -> ffi::ibv_context_ops {
        // SAFETY: the context is open; its ops table is filled in by the
        // provider when the device is opened and never changes afterwards.
        unsafe { (*self.ctx.ctx.as_ptr()).ops }
    }

    /// Reads and acknowledges one pending completion event, if any.
    fn take_event(&self) {
        let fns = &self.ctx.fns;
        let mut cq: *mut ffi::ibv_cq = ptr::null_mut();
        let mut cq_ctx: *mut c_void = ptr::null_mut();
        // SAFETY: the channel is live and non-blocking; the out-pointers are valid.
        let rc = unsafe { (fns.get_cq_event)(self.channel.as_ptr(), &mut cq, &mut cq_ctx) };
        if rc == 0 && !cq.is_null() {
            // SAFETY: `cq` is the CQ the event was for (ours: one CQ per channel).
            unsafe { (fns.ack_cq_events)(cq, 1) };
        }
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
        let Some(arm) = cq.ctx_ops().req_notify_cq else {
            return Err(VerbsError::new(
                "ibv_req_notify_cq",
                VerbsErrorKind::Unsupported,
                "the provider has no req_notify_cq",
            ));
        };
        // SAFETY: the CQ is live.
        check("ibv_req_notify_cq", unsafe { arm(cq.cq.as_ptr(), 0) })?;
        {
            let mut fresh = Vec::new();
            cq.poll_raw(&mut fresh, 16)?;
            let mut st = lock(&cq.state);
            st.stash.extend(fresh);
            if !st.stash.is_empty() {
                return Ok(true);
            }
        }
        // SAFETY: the channel is live; its fd stays open while it is.
        let fd = unsafe { (*cq.channel.as_ptr()).fd };
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ms = c_int::try_from(left.as_millis().min(i32::MAX as u128)).unwrap_or(c_int::MAX);
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: `pfd` is one valid pollfd.
            let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
            if rc > 0 {
                cq.take_event();
                return Ok(true);
            }
            if rc == 0 {
                return Ok(false);
            }
            let e = errno();
            if e != libc::EINTR {
                return Err(os_error("poll", e));
            }
        }
    }
}

/// An RC queue pair.
pub struct IbQp {
    pd: Arc<Pd>,
    _send_cq: Arc<Cq>,
    _recv_cq: Arc<Cq>,
    qp: NonNull<ffi::ibv_qp>,
    qp_num: u32,
}

// SAFETY: see `Context`.
unsafe impl Send for IbQp {}
// SAFETY: see `Context`.
unsafe impl Sync for IbQp {}

impl fmt::Debug for IbQp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IbQp").field("qp_num", &self.qp_num).finish()
    }
}

impl Drop for IbQp {
    fn drop(&mut self) {
        // SAFETY: the QP is live and destroyed once, before its PD and CQs.
        unsafe { (self.pd.ctx.fns.destroy_qp)(self.qp.as_ptr()) };
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

fn sge_count(op: &'static str, n: usize) -> Result<c_int, VerbsError> {
    c_int::try_from(n).map_err(|_| VerbsError::new(op, VerbsErrorKind::InvalidArgument, "too many SGEs"))
}

impl QueuePair for IbQp {
    fn qp_num(&self) -> u32 {
        self.qp_num
    }

    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), VerbsError> {
        let mut raw = raw_qp_attr(attr);
        let bits = c_int::try_from(mask.0).map_err(|_| {
            VerbsError::new(
                "ibv_modify_qp",
                VerbsErrorKind::InvalidArgument,
                "mask out of range",
            )
        })?;
        // SAFETY: the QP is live and `raw` is a complete ibv_qp_attr.
        check("ibv_modify_qp", unsafe {
            (self.pd.ctx.fns.modify_qp)(self.qp.as_ptr(), &mut raw, bits)
        })
    }

    fn state(&self) -> Result<QpState, VerbsError> {
        let mut attr = ffi::ibv_qp_attr::default();
        let mut init = ffi::ibv_qp_init_attr::zeroed();
        // SAFETY: the QP is live; both out-structures are writable.
        check("ibv_query_qp", unsafe {
            (self.pd.ctx.fns.query_qp)(self.qp.as_ptr(), &mut attr, ffi::IBV_QP_STATE, &mut init)
        })?;
        QpState::from_raw(attr.qp_state).ok_or_else(|| {
            VerbsError::new(
                "ibv_query_qp",
                VerbsErrorKind::InvalidArgument,
                format!("unknown QP state {}", attr.qp_state),
            )
        })
    }

    fn post_send(&self, wr: &SendWr<'_>) -> Result<(), VerbsError> {
        let Some(post) = self.ops().post_send else {
            return Err(VerbsError::new(
                "ibv_post_send",
                VerbsErrorKind::Unsupported,
                "the provider has no post_send",
            ));
        };
        let mut list = sges(wr.sg_list);
        let mut raw = ffi::ibv_send_wr::zeroed();
        raw.wr_id = wr.wr_id;
        raw.sg_list = if list.is_empty() {
            ptr::null_mut()
        } else {
            list.as_mut_ptr()
        };
        raw.num_sge = sge_count("ibv_post_send", list.len())?;
        raw.send_flags = if wr.signaled { ffi::IBV_SEND_SIGNALED } else { 0 };
        let rdma = |remote_addr, rkey| ffi::ibv_send_wr_wr {
            rdma: ffi::ibv_send_wr_rdma { remote_addr, rkey },
        };
        match wr.op {
            SendOp::Send => raw.opcode = ffi::IBV_WR_SEND,
            SendOp::SendWithImm { imm } => {
                raw.opcode = ffi::IBV_WR_SEND_WITH_IMM;
                raw.imm_data = imm.to_be();
            }
            SendOp::Write { remote_addr, rkey } => {
                raw.opcode = ffi::IBV_WR_RDMA_WRITE;
                raw.wr = rdma(remote_addr, rkey);
            }
            SendOp::WriteWithImm {
                remote_addr,
                rkey,
                imm,
            } => {
                raw.opcode = ffi::IBV_WR_RDMA_WRITE_WITH_IMM;
                raw.wr = rdma(remote_addr, rkey);
                raw.imm_data = imm.to_be();
            }
            SendOp::Read { remote_addr, rkey } => {
                raw.opcode = ffi::IBV_WR_RDMA_READ;
                raw.wr = rdma(remote_addr, rkey);
            }
            SendOp::LocalInv { rkey } => {
                raw.opcode = ffi::IBV_WR_LOCAL_INV;
                // `invalidate_rkey`, in host order (unlike `imm_data`).
                raw.imm_data = rkey;
            }
        }
        let mut bad: *mut ffi::ibv_send_wr = ptr::null_mut();
        // SAFETY: the QP is live; `raw` and the SGE array it points to live
        // across the call (the provider copies them into its queue). The NIC
        // accesses only memory the SGEs' lkeys were registered over.
        check("ibv_post_send", unsafe {
            post(self.qp.as_ptr(), &mut raw, &mut bad)
        })
    }

    fn bind_mw(&self, wr: &BindMwWr<'_>) -> Result<u32, VerbsError> {
        self.bind(wr)
    }

    fn post_recv(&self, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        let Some(post) = self.ops().post_recv else {
            return Err(VerbsError::new(
                "ibv_post_recv",
                VerbsErrorKind::Unsupported,
                "the provider has no post_recv",
            ));
        };
        let mut list = sges(wr.sg_list);
        let mut raw = ffi::ibv_recv_wr::zeroed();
        raw.wr_id = wr.wr_id;
        raw.sg_list = if list.is_empty() {
            ptr::null_mut()
        } else {
            list.as_mut_ptr()
        };
        raw.num_sge = sge_count("ibv_post_recv", list.len())?;
        let mut bad: *mut ffi::ibv_recv_wr = ptr::null_mut();
        // SAFETY: as for post_send.
        check("ibv_post_recv", unsafe {
            post(self.qp.as_ptr(), &mut raw, &mut bad)
        })
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
        let Some(post) = self.ops().post_send else {
            return Err(VerbsError::new(
                "ibv_post_send",
                VerbsErrorKind::Unsupported,
                "the provider has no post_send",
            ));
        };
        let old = mw.rkey.load(Ordering::Relaxed);
        let key = match wr.rkey {
            Some(k) if k >> 8 == old >> 8 => k,
            Some(_) => return Err(foreign("key (another window's index)")),
            None => (old & !0xff) | u32::from(fresh_key_byte(old as u8)),
        };
        let mut raw = ffi::ibv_send_wr::zeroed();
        raw.wr_id = wr.wr_id;
        raw.opcode = ffi::IBV_WR_BIND_MW;
        raw.send_flags = if wr.signaled { ffi::IBV_SEND_SIGNALED } else { 0 };
        raw.bind_mw_tso = ffi::ibv_send_wr_bind_mw_tso {
            bind_mw: ffi::ibv_send_wr_bind_mw {
                mw: mw.mw.as_ptr(),
                rkey: key,
                bind_info: ffi::ibv_mw_bind_info {
                    mr: mr.mr.as_ptr(),
                    addr: wr.addr,
                    length: wr.length,
                    mw_access_flags: wr.access.0,
                },
            },
        };
        let mut bad: *mut ffi::ibv_send_wr = ptr::null_mut();
        // SAFETY: the QP, the window and the MR are live (the caller holds
        // them); `raw` lives across the call (the provider copies it).
        check("ibv_post_send", unsafe {
            post(self.qp.as_ptr(), &mut raw, &mut bad)
        })?;
        // For a type-2 window the application keeps `ibv_mw.rkey` current:
        // providers (rxe) put it in the next bind as the key the window has,
        // and the kernel refuses a bind that names a stale one.
        // SAFETY: the window is live and owned by `mw`; nothing else writes it.
        unsafe { (*mw.mw.as_ptr()).rkey = key };
        mw.rkey.store(key, Ordering::Relaxed);
        Ok(key)
    }

    fn ops(&self) -> ffi::ibv_context_ops {
        // SAFETY: see `Cq::ctx_ops`.
        unsafe { (*self.pd.ctx.ctx.as_ptr()).ops }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_kinds() {
        assert_eq!(kind_of(libc::EINVAL), VerbsErrorKind::InvalidArgument);
        assert_eq!(kind_of(libc::ENOMEM), VerbsErrorKind::OutOfResources);
        assert_eq!(kind_of(libc::EOPNOTSUPP), VerbsErrorKind::Unsupported);
        assert_eq!(kind_of(libc::EIO), VerbsErrorKind::Os);
        assert!(check("x", 0).is_ok());
        assert_eq!(
            check("x", libc::EINVAL).map_err(|e| e.errno),
            Err(Some(libc::EINVAL))
        );
    }

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
