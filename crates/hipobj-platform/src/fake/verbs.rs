//! A Verbs double: devices described by the test, QPs that enforce the RC
//! state table, MRs with fresh keys, and counts of every live object.

use std::collections::{HashMap, VecDeque};
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::faults::{Fault, Faults};
use crate::memory::MemRegion;
use crate::verbs::{
    AccessFlags, BindMwWr, CompletionQueue, Device, DeviceAttr, Gid, LinkLayer, MemoryRegion, MemoryWindow,
    Mtu, PortAttr, PortState, ProtectionDomain, QpAttr, QpAttrMask, QpInitAttr, QpState, QueuePair, RecvWr,
    SendOp, SendWr, Verbs, VerbsError, VerbsErrorKind, WcOpcode, WcStatus, WorkCompletion,
    check_rc_transition,
};

/// A fake device as a test describes it.
#[derive(Clone, Debug)]
pub struct FakeDeviceSpec {
    /// Device name.
    pub name: String,
    /// GID table of port 1.
    pub gids: Vec<Gid>,
    /// State of port 1.
    pub port_state: PortState,
    /// Active MTU of port 1.
    pub active_mtu: Mtu,
    /// PCI vendor id.
    pub vendor_id: u32,
    /// Whether dma-buf registration works.
    pub dmabuf: bool,
    /// Whether the device has type-2 memory windows (default off: the
    /// library's access-flag fallback; window tests turn it on).
    pub mw_type2: bool,
}

impl Default for FakeDeviceSpec {
    fn default() -> Self {
        Self {
            name: "fake0".into(),
            gids: vec![Gid::from_ipv4(std::net::Ipv4Addr::LOCALHOST)],
            port_state: PortState::Active,
            active_mtu: Mtu::Mtu4096,
            vendor_id: 0,
            dmabuf: false,
            mw_type2: false,
        }
    }
}

/// How many objects of each kind are alive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveCounts {
    /// Open devices.
    pub devices: i64,
    /// Protection domains.
    pub pds: i64,
    /// Completion queues.
    pub cqs: i64,
    /// Queue pairs.
    pub qps: i64,
    /// Memory regions.
    pub mrs: i64,
    /// Memory windows.
    pub mws: i64,
}

impl LiveCounts {
    /// Whether nothing is alive.
    pub fn is_zero(&self) -> bool {
        *self == Self::default()
    }
}

#[derive(Debug, Default)]
struct Counters {
    devices: AtomicI64,
    pds: AtomicI64,
    cqs: AtomicI64,
    qps: AtomicI64,
    mrs: AtomicI64,
    mws: AtomicI64,
    next_key: AtomicU32,
    next_qpn: AtomicU32,
}

type CqEntries = Arc<Mutex<VecDeque<WorkCompletion>>>;

#[derive(Debug)]
struct QpInner {
    state: Mutex<QpState>,
    /// wr_ids of posted receives.
    recvs: Mutex<Vec<u64>>,
    recv_cq: Option<CqEntries>,
    send_cq: Option<CqEntries>,
    /// The remote access flags last set by a modify.
    access: Mutex<AccessFlags>,
    /// What happens the next time a modify moves the QP to RTS.
    armed: Mutex<Option<Armed>>,
}

/// A peer's event that waits for the QP to reach RTS.
#[derive(Clone, Copy, Debug)]
enum Armed {
    WriteWithImm {
        imm: u32,
        byte_len: u32,
    },
    Break,
    /// Not at RTS: at the start of the next bind, send or modify.
    BreakAtNextUse,
}

impl QpInner {
    /// Moves to `state`; entering ERR flushes posted receives, RESET drops them.
    fn enter(&self, qpn: u32, state: QpState) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
        let mut recvs = self.recvs.lock().unwrap_or_else(PoisonError::into_inner);
        match state {
            QpState::Err => {
                if let Some(cq) = &self.recv_cq {
                    let mut q = cq.lock().unwrap_or_else(PoisonError::into_inner);
                    for wr_id in recvs.drain(..) {
                        q.push_back(WorkCompletion {
                            wr_id,
                            status: crate::verbs::WcStatus::WrFlushErr,
                            opcode: crate::verbs::WcOpcode::Recv,
                            qp_num: qpn,
                            ..WorkCompletion::EMPTY
                        });
                    }
                }
            }
            QpState::Reset => recvs.clear(),
            _ => {}
        }
    }

    /// Runs the armed event, if any: the QP just reached RTS.
    fn fire_armed(&self, qpn: u32) {
        let armed = {
            let mut slot = self.armed.lock().unwrap_or_else(PoisonError::into_inner);
            match *slot {
                Some(Armed::BreakAtNextUse) => None,
                _ => slot.take(),
            }
        };
        match armed {
            Some(Armed::WriteWithImm { imm, byte_len }) => {
                let Some(cq) = &self.recv_cq else { return };
                let mut recvs = self.recvs.lock().unwrap_or_else(PoisonError::into_inner);
                if recvs.is_empty() {
                    return;
                }
                let wr_id = recvs.remove(0);
                cq.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push_back(WorkCompletion {
                        wr_id,
                        status: crate::verbs::WcStatus::Success,
                        opcode: crate::verbs::WcOpcode::RecvRdmaWithImm,
                        byte_len,
                        imm_data: Some(imm),
                        qp_num: qpn,
                        ..WorkCompletion::EMPTY
                    });
            }
            Some(Armed::Break) => self.enter(qpn, QpState::Err),
            Some(Armed::BreakAtNextUse) | None => {}
        }
    }

    /// The QP is being used (a bind, a send, a modify): a break armed for
    /// that moment happens first.
    fn fire_use(&self, qpn: u32) {
        let mut slot = self.armed.lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(*slot, Some(Armed::BreakAtNextUse)) {
            *slot = None;
            drop(slot);
            self.enter(qpn, QpState::Err);
        }
    }
}

#[derive(Debug)]
struct Shared {
    faults: Faults,
    counters: Counters,
    /// Completion queues by the address of their `Arc`, so QPs find theirs.
    cqs: Mutex<HashMap<usize, CqEntries>>,
    qps: Mutex<HashMap<u32, Arc<QpInner>>>,
    /// Access rights of live MRs, by key.
    mrs: Mutex<HashMap<u32, AccessFlags>>,
    /// Every memory-window bind ever made, oldest first.
    binds: Mutex<Vec<FakeMwBind>>,
}

/// How a fake memory-window binding ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FakeMwEnd {
    /// A local invalidate on the QP that bound it.
    Invalidated,
    /// The QP that bound it was destroyed.
    QpDestroyed,
    /// The window was deallocated.
    Deallocated,
    /// The region under it was deregistered.
    MrDeregistered,
}

/// One bind of a fake memory window, as recorded for tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FakeMwBind {
    /// The window (stable across binds).
    pub window: u32,
    /// The key this bind gave the window.
    pub rkey: u32,
    /// The QP that bound it.
    pub qpn: u32,
    /// The key of the region under it.
    pub mr_rkey: u32,
    /// First byte granted.
    pub addr: u64,
    /// Bytes granted.
    pub len: u64,
    /// Rights granted.
    pub access: AccessFlags,
    /// How the binding ended, or `None` while it grants access.
    pub ended: Option<FakeMwEnd>,
}

impl Shared {
    /// Ends every live binding that `pred` selects.
    fn end_binds(&self, how: FakeMwEnd, pred: impl Fn(&FakeMwBind) -> bool) -> usize {
        let mut binds = self.binds.lock().unwrap_or_else(PoisonError::into_inner);
        let mut n = 0;
        for b in binds.iter_mut().filter(|b| b.ended.is_none() && pred(b)) {
            b.ended = Some(how);
            n += 1;
        }
        n
    }

    fn check(&self, call: &'static str) -> Result<(), VerbsError> {
        match self.faults.hit(call) {
            Some(Fault::Fail) => Err(VerbsError::new(
                call,
                VerbsErrorKind::Injected,
                "injected failure",
            )),
            _ => Ok(()),
        }
    }
}

/// A Verbs double.
#[derive(Debug)]
pub struct FakeVerbs {
    specs: Vec<FakeDeviceSpec>,
    shared: Arc<Shared>,
}

impl FakeVerbs {
    /// A backend with these devices, consulting `faults` at every call.
    pub fn new(specs: Vec<FakeDeviceSpec>, faults: Faults) -> Self {
        let counters = Counters {
            next_key: AtomicU32::new(0x100),
            next_qpn: AtomicU32::new(0x11),
            ..Counters::default()
        };
        Self {
            specs,
            shared: Arc::new(Shared {
                faults,
                counters,
                cqs: Mutex::new(HashMap::new()),
                qps: Mutex::new(HashMap::new()),
                mrs: Mutex::new(HashMap::new()),
                binds: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Objects handed out and not yet dropped.
    pub fn live(&self) -> LiveCounts {
        let c = &self.shared.counters;
        LiveCounts {
            devices: c.devices.load(Ordering::SeqCst),
            pds: c.pds.load(Ordering::SeqCst),
            cqs: c.cqs.load(Ordering::SeqCst),
            qps: c.qps.load(Ordering::SeqCst),
            mrs: c.mrs.load(Ordering::SeqCst),
            mws: c.mws.load(Ordering::SeqCst),
        }
    }

    /// Every memory-window bind made so far, oldest first, with how each ended.
    pub fn mw_binds(&self) -> Vec<FakeMwBind> {
        self.shared
            .binds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The latest bind that gave a window the key `rkey`, if any.
    pub fn mw_bind(&self, rkey: u32) -> Option<FakeMwBind> {
        self.mw_binds().into_iter().rev().find(|b| b.rkey == rkey)
    }

    /// The bindings that still grant access.
    pub fn live_mw_binds(&self) -> Vec<FakeMwBind> {
        self.mw_binds()
            .into_iter()
            .filter(|b| b.ended.is_none())
            .collect()
    }

    /// The state of a live QP, or `None` if no QP has that number.
    pub fn qp_state(&self, qpn: u32) -> Option<QpState> {
        let qps = self.shared.qps.lock().unwrap_or_else(PoisonError::into_inner);
        qps.get(&qpn)
            .map(|q| *q.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The access flags a live QP was last given by a modify.
    pub fn qp_access(&self, qpn: u32) -> Option<AccessFlags> {
        let qps = self.shared.qps.lock().unwrap_or_else(PoisonError::into_inner);
        qps.get(&qpn)
            .map(|q| *q.access.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Numbers of the live QPs.
    pub fn qp_nums(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .shared
            .qps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .copied()
            .collect();
        v.sort_unstable();
        v
    }

    /// The access rights of the live MR with this rkey.
    pub fn mr_access(&self, rkey: u32) -> Option<AccessFlags> {
        self.shared
            .mrs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&rkey)
            .copied()
    }

    /// What the QP numbered `qpn` sees when a peer's RDMA WRITE WITH
    /// IMMEDIATE arrives (the fake moves no bytes): its oldest posted receive
    /// completes successfully on its receive CQ, with opcode
    /// `RecvRdmaWithImm`, immediate value `imm` and `byte_len`. Returns
    /// `false`, changing nothing, when there is no such QP, it is not in
    /// RTR or RTS, or no receive is posted (a real NIC answers RNR).
    pub fn deliver_write_with_imm(&self, qpn: u32, imm: u32, byte_len: u32) -> bool {
        let Some(qp) = self
            .shared
            .qps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&qpn)
            .cloned()
        else {
            return false;
        };
        let state = *qp.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !matches!(state, QpState::Rtr | QpState::Rts) {
            return false;
        }
        let Some(cq) = &qp.recv_cq else { return false };
        let mut recvs = qp.recvs.lock().unwrap_or_else(PoisonError::into_inner);
        if recvs.is_empty() {
            return false;
        }
        let wr_id = recvs.remove(0);
        cq.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(WorkCompletion {
                wr_id,
                status: crate::verbs::WcStatus::Success,
                opcode: crate::verbs::WcOpcode::RecvRdmaWithImm,
                byte_len,
                imm_data: Some(imm),
                qp_num: qpn,
                ..WorkCompletion::EMPTY
            });
        true
    }

    /// [`FakeVerbs::deliver_write_with_imm`] at the moment a modify next
    /// moves the QP numbered `qpn` to RTS (a peer that writes as soon as
    /// the connection is up), for code that connects and then waits in one
    /// call. Needs a receive posted by then, or nothing happens. Returns
    /// `false` when there is no such QP.
    pub fn arm_write_with_imm(&self, qpn: u32, imm: u32, byte_len: u32) -> bool {
        self.arm(qpn, Armed::WriteWithImm { imm, byte_len })
    }

    /// [`FakeVerbs::break_qp`] at the moment a modify next moves the QP
    /// numbered `qpn` to RTS. Returns `false` when there is no such QP.
    pub fn arm_break(&self, qpn: u32) -> bool {
        self.arm(qpn, Armed::Break)
    }

    /// [`FakeVerbs::break_qp`] at the start of the next window bind, send
    /// or modify on the QP numbered `qpn`: a connection that dies while
    /// idle, after its user checked its CQ and before its first work
    /// request. Returns `false` when there is no such QP.
    pub fn arm_break_at_next_use(&self, qpn: u32) -> bool {
        self.arm(qpn, Armed::BreakAtNextUse)
    }

    fn arm(&self, qpn: u32, event: Armed) -> bool {
        let qp = self
            .shared
            .qps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&qpn)
            .cloned();
        qp.map(|q| *q.armed.lock().unwrap_or_else(PoisonError::into_inner) = Some(event))
            .is_some()
    }

    /// Puts a QP into the error state, as a NIC does after a fatal error on
    /// the connection: posted receives are flushed to its receive CQ.
    pub fn break_qp(&self, qpn: u32) -> bool {
        let qp = self
            .shared
            .qps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&qpn)
            .cloned();
        qp.map(|q| q.enter(qpn, QpState::Err)).is_some()
    }
}

impl Verbs for FakeVerbs {
    fn backend(&self) -> &'static str {
        "fake"
    }

    fn device_names(&self) -> Result<Vec<String>, VerbsError> {
        self.shared.check("device_names")?;
        Ok(self.specs.iter().map(|s| s.name.clone()).collect())
    }

    fn open_device(&self, name: &str) -> Result<Arc<dyn Device>, VerbsError> {
        self.shared.check("open_device")?;
        let spec = self.specs.iter().find(|s| s.name == name).ok_or_else(|| {
            VerbsError::new(
                "ibv_open_device",
                VerbsErrorKind::NotFound,
                format!("no device named {name}"),
            )
        })?;
        self.shared.counters.devices.fetch_add(1, Ordering::SeqCst);
        Ok(Arc::new(FakeDevice {
            spec: spec.clone(),
            shared: self.shared.clone(),
        }))
    }
}

#[derive(Debug)]
struct FakeDevice {
    spec: FakeDeviceSpec,
    shared: Arc<Shared>,
}

impl Drop for FakeDevice {
    fn drop(&mut self) {
        self.shared.counters.devices.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Device for FakeDevice {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn attr(&self) -> Result<DeviceAttr, VerbsError> {
        self.shared.check("query_device")?;
        Ok(DeviceAttr {
            vendor_id: self.spec.vendor_id,
            vendor_part_id: 0,
            phys_port_cnt: 1,
            max_qp: 4096,
            max_qp_wr: 1024,
            max_cqe: 65536,
            max_mr_size: u64::MAX,
            max_qp_rd_atom: 16,
            mw_type2: self.spec.mw_type2,
        })
    }

    fn query_port(&self, port: u8) -> Result<PortAttr, VerbsError> {
        self.shared.check("query_port")?;
        if port != 1 {
            return Err(VerbsError::new(
                "ibv_query_port",
                VerbsErrorKind::NotFound,
                format!("no port {port}"),
            ));
        }
        Ok(PortAttr {
            state: self.spec.port_state,
            max_mtu: Mtu::Mtu4096,
            active_mtu: self.spec.active_mtu,
            gid_tbl_len: self.spec.gids.len() as u32,
            lid: 0,
            link_layer: LinkLayer::Ethernet,
        })
    }

    fn query_gid(&self, port: u8, index: u32) -> Result<Gid, VerbsError> {
        self.shared.check("query_gid")?;
        if port != 1 {
            return Err(VerbsError::new(
                "ibv_query_gid",
                VerbsErrorKind::NotFound,
                format!("no port {port}"),
            ));
        }
        self.spec.gids.get(index as usize).copied().ok_or_else(|| {
            VerbsError::new(
                "ibv_query_gid",
                VerbsErrorKind::InvalidArgument,
                format!("no GID index {index}"),
            )
        })
    }

    fn supports_dmabuf(&self) -> bool {
        self.spec.dmabuf
    }

    fn alloc_pd(&self) -> Result<Arc<dyn ProtectionDomain>, VerbsError> {
        self.shared.check("alloc_pd")?;
        self.shared.counters.pds.fetch_add(1, Ordering::SeqCst);
        Ok(Arc::new(FakePd {
            shared: self.shared.clone(),
            dmabuf: self.spec.dmabuf,
            mw_type2: self.spec.mw_type2,
        }))
    }

    fn create_cq(&self, cqe: u32) -> Result<Arc<dyn CompletionQueue>, VerbsError> {
        self.shared.check("create_cq")?;
        self.shared.counters.cqs.fetch_add(1, Ordering::SeqCst);
        let entries: CqEntries = Arc::new(Mutex::new(VecDeque::new()));
        let cq: Arc<dyn CompletionQueue> = Arc::new(FakeCq {
            shared: self.shared.clone(),
            _depth: cqe,
            entries: entries.clone(),
        });
        let key = Arc::as_ptr(&cq).cast::<()>() as usize;
        self.shared
            .cqs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, entries);
        Ok(cq)
    }
}

#[derive(Debug)]
struct FakePd {
    shared: Arc<Shared>,
    dmabuf: bool,
    mw_type2: bool,
}

impl Drop for FakePd {
    fn drop(&mut self) {
        self.shared.counters.pds.fetch_sub(1, Ordering::SeqCst);
    }
}

impl FakePd {
    fn new_mr(&self, addr: u64, len: usize, access: AccessFlags) -> Box<dyn MemoryRegion> {
        let key = self.shared.counters.next_key.fetch_add(1, Ordering::SeqCst);
        self.shared.counters.mrs.fetch_add(1, Ordering::SeqCst);
        self.shared
            .mrs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, access);
        Box::new(FakeMr {
            shared: self.shared.clone(),
            key,
            addr,
            len,
            access,
        })
    }
}

impl ProtectionDomain for FakePd {
    fn reg_mr(&self, region: MemRegion, access: AccessFlags) -> Result<Box<dyn MemoryRegion>, VerbsError> {
        self.shared.check("reg_mr")?;
        Ok(self.new_mr(region.addr() as u64, region.len(), access))
    }

    fn reg_dmabuf_mr(
        &self,
        _fd: BorrowedFd<'_>,
        _offset: u64,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Box<dyn MemoryRegion>, VerbsError> {
        self.shared.check("reg_dmabuf_mr")?;
        if !self.dmabuf {
            return Err(VerbsError::with_errno(
                "ibv_reg_dmabuf_mr",
                VerbsErrorKind::Unsupported,
                95,
                "the fake device has no dma-buf support",
            ));
        }
        Ok(self.new_mr(iova, len, access))
    }

    fn create_qp(&self, init: &QpInitAttr) -> Result<Box<dyn QueuePair>, VerbsError> {
        self.shared.check("create_qp")?;
        self.shared.counters.qps.fetch_add(1, Ordering::SeqCst);
        let qpn = self.shared.counters.next_qpn.fetch_add(1, Ordering::SeqCst);
        let find = |cq: &Arc<dyn CompletionQueue>| {
            let key = Arc::as_ptr(cq).cast::<()>() as usize;
            self.shared
                .cqs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&key)
                .cloned()
        };
        let recv_cq = find(&init.recv_cq);
        let send_cq = find(&init.send_cq);
        let inner = Arc::new(QpInner {
            state: Mutex::new(QpState::Reset),
            recvs: Mutex::new(Vec::new()),
            recv_cq,
            send_cq,
            access: Mutex::new(AccessFlags::default()),
            armed: Mutex::new(None),
        });
        self.shared
            .qps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(qpn, inner.clone());
        Ok(Box::new(FakeQp {
            shared: self.shared.clone(),
            qpn,
            inner,
        }))
    }

    fn alloc_mw(&self) -> Result<Box<dyn MemoryWindow>, VerbsError> {
        self.shared.check("alloc_mw")?;
        if !self.mw_type2 {
            return Err(VerbsError::new(
                "ibv_alloc_mw",
                VerbsErrorKind::Unsupported,
                "this fake device has no type-2 memory windows",
            ));
        }
        self.shared.counters.mws.fetch_add(1, Ordering::SeqCst);
        let id = self.shared.counters.next_key.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(FakeMw {
            shared: self.shared.clone(),
            id,
            key: AtomicU32::new(id << 8),
        }))
    }
}

/// A fake type-2 memory window. Keys are `id << 8 | byte`; each bind moves
/// the byte on.
#[derive(Debug)]
struct FakeMw {
    shared: Arc<Shared>,
    id: u32,
    key: AtomicU32,
}

impl Drop for FakeMw {
    fn drop(&mut self) {
        let id = self.id;
        self.shared.end_binds(FakeMwEnd::Deallocated, |b| b.window == id);
        self.shared.counters.mws.fetch_sub(1, Ordering::SeqCst);
    }
}

impl MemoryWindow for FakeMw {
    fn rkey(&self) -> u32 {
        self.key.load(Ordering::SeqCst)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[derive(Debug)]
struct FakeMr {
    shared: Arc<Shared>,
    key: u32,
    addr: u64,
    len: usize,
    access: AccessFlags,
}

impl Drop for FakeMr {
    fn drop(&mut self) {
        let key = self.key;
        self.shared
            .end_binds(FakeMwEnd::MrDeregistered, |b| b.mr_rkey == key);
        self.shared.counters.mrs.fetch_sub(1, Ordering::SeqCst);
        self.shared
            .mrs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.key);
    }
}

impl MemoryRegion for FakeMr {
    fn lkey(&self) -> u32 {
        self.key
    }
    fn rkey(&self) -> u32 {
        self.key
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

#[derive(Debug)]
struct FakeCq {
    shared: Arc<Shared>,
    _depth: u32,
    entries: CqEntries,
}

impl Drop for FakeCq {
    fn drop(&mut self) {
        self.shared.counters.cqs.fetch_sub(1, Ordering::SeqCst);
        let key = std::ptr::from_ref(self).cast::<()>() as usize;
        self.shared
            .cqs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key);
    }
}

impl CompletionQueue for FakeCq {
    fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize, VerbsError> {
        self.shared.check("poll_cq")?;
        let mut q = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let n = out.len().min(q.len());
        for slot in out.iter_mut().take(n) {
            if let Some(wc) = q.pop_front() {
                *slot = wc;
            }
        }
        Ok(n)
    }

    fn wait(&self, _timeout: Duration) -> Result<bool, VerbsError> {
        self.shared.check("wait_cq")?;
        Ok(!self
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty())
    }
}

#[derive(Debug)]
struct FakeQp {
    shared: Arc<Shared>,
    qpn: u32,
    inner: Arc<QpInner>,
}

impl Drop for FakeQp {
    fn drop(&mut self) {
        let qpn = self.qpn;
        self.shared.end_binds(FakeMwEnd::QpDestroyed, |b| b.qpn == qpn);
        self.shared.counters.qps.fetch_sub(1, Ordering::SeqCst);
        self.shared
            .qps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.qpn);
    }
}

impl FakeQp {
    /// Send work requests need RTS; in ERR they flush (the caller completes
    /// nothing more).
    fn need_rts(&self) -> Result<(), VerbsError> {
        match *self.inner.state.lock().unwrap_or_else(PoisonError::into_inner) {
            QpState::Rts => Ok(()),
            _ => Err(VerbsError::with_errno(
                "ibv_post_send",
                VerbsErrorKind::InvalidArgument,
                22,
                "the QP is not in RTS",
            )),
        }
    }

    fn complete(&self, wr_id: u64, opcode: WcOpcode, status: WcStatus) {
        if let Some(cq) = &self.inner.send_cq {
            cq.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push_back(WorkCompletion {
                    wr_id,
                    status,
                    opcode,
                    qp_num: self.qpn,
                    ..WorkCompletion::EMPTY
                });
        }
    }
}

impl QueuePair for FakeQp {
    fn qp_num(&self) -> u32 {
        self.qpn
    }

    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), VerbsError> {
        self.shared.check("modify_qp")?;
        self.inner.fire_use(self.qpn);
        let cur = *self.inner.state.lock().unwrap_or_else(PoisonError::into_inner);
        check_rc_transition(cur, attr, mask)?;
        if mask.contains(QpAttrMask::ACCESS_FLAGS) {
            *self.inner.access.lock().unwrap_or_else(PoisonError::into_inner) = attr.qp_access_flags;
        }
        self.inner.enter(self.qpn, attr.qp_state);
        if attr.qp_state == QpState::Rts {
            self.inner.fire_armed(self.qpn);
        }
        Ok(())
    }

    fn state(&self) -> Result<QpState, VerbsError> {
        self.shared.check("query_qp")?;
        Ok(*self.inner.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn post_send(&self, wr: &SendWr<'_>) -> Result<(), VerbsError> {
        self.shared.check("post_send")?;
        self.inner.fire_use(self.qpn);
        let SendOp::LocalInv { rkey } = wr.op else {
            return Err(VerbsError::new(
                "ibv_post_send",
                VerbsErrorKind::Unsupported,
                "the fake NIC moves no data",
            ));
        };
        self.need_rts()?;
        let qpn = self.qpn;
        let ended = self
            .shared
            .end_binds(FakeMwEnd::Invalidated, |b| b.rkey == rkey && b.qpn == qpn);
        if ended == 0 {
            self.complete(wr.wr_id, WcOpcode::LocalInv, WcStatus::LocQpOpErr);
            self.inner.enter(self.qpn, QpState::Err);
        } else if wr.signaled {
            self.complete(wr.wr_id, WcOpcode::LocalInv, WcStatus::Success);
        }
        Ok(())
    }

    fn bind_mw(&self, wr: &BindMwWr<'_>) -> Result<u32, VerbsError> {
        self.shared.check("bind_mw")?;
        self.inner.fire_use(self.qpn);
        let invalid =
            |why: &str| VerbsError::new("ibv_post_send", VerbsErrorKind::InvalidArgument, why.to_string());
        let mw = wr
            .mw
            .as_any()
            .downcast_ref::<FakeMw>()
            .ok_or_else(|| invalid("not a fake memory window"))?;
        let mr = wr
            .mr
            .as_any()
            .downcast_ref::<FakeMr>()
            .ok_or_else(|| invalid("not a fake memory region"))?;
        self.need_rts()?;
        let old = mw.key.load(Ordering::SeqCst);
        let key = match wr.rkey {
            Some(k) if k >> 8 == old >> 8 => k,
            Some(_) => return Err(invalid("the key names another window")),
            None => (old & !0xff) | u32::from((old as u8).wrapping_add(0x3b)),
        };
        mw.key.store(key, Ordering::SeqCst);
        let remote = AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
        let end = wr.addr.checked_add(wr.length);
        let busy = self
            .shared
            .binds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|b| b.window == mw.id && b.ended.is_none());
        let fits = end.is_some_and(|e| wr.addr >= mr.addr && e <= mr.addr + mr.len as u64);
        let ok = !busy
            && fits
            && mr.access.contains(AccessFlags::MW_BIND)
            && wr.access.0 & !remote.0 == 0
            && (!wr.access.contains(AccessFlags::REMOTE_WRITE)
                || mr.access.contains(AccessFlags::LOCAL_WRITE));
        if !ok {
            self.complete(wr.wr_id, WcOpcode::BindMw, WcStatus::MwBindErr);
            self.inner.enter(self.qpn, QpState::Err);
            return Ok(key);
        }
        self.shared
            .binds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(FakeMwBind {
                window: mw.id,
                rkey: key,
                qpn: self.qpn,
                mr_rkey: mr.key,
                addr: wr.addr,
                len: wr.length,
                access: wr.access,
                ended: None,
            });
        if wr.signaled {
            self.complete(wr.wr_id, WcOpcode::BindMw, WcStatus::Success);
        }
        Ok(key)
    }

    fn post_recv(&self, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        self.shared.check("post_recv")?;
        let state = *self.inner.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state == QpState::Reset {
            return Err(VerbsError::with_errno(
                "ibv_post_recv",
                VerbsErrorKind::InvalidArgument,
                22,
                "a QP in RESET takes no receives",
            ));
        }
        self.inner
            .recvs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(wr.wr_id);
        if state == QpState::Err {
            // A QP in error completes new receives at once, flushed.
            self.inner.enter(self.qpn, QpState::Err);
        }
        Ok(())
    }
}
