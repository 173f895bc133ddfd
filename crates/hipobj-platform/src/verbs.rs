//! The Verbs seam: an RDMA device as libibverbs presents one.
//!
//! The traits mirror the verbs objects (device context, protection domain,
//! memory region, completion queue, queue pair) and the value types carry the
//! numeric values of `<infiniband/verbs.h>`, so that the libibverbs backend
//! maps them one to one and the soft NIC behaves the way a program written
//! against real verbs expects.
//!
//! Ownership follows verbs: a child object keeps its parent alive (an MR or a
//! QP holds its PD, a PD holds its device), so dropping handles in any order
//! is safe, and dropping a handle releases the object.

use std::any::Any;
use std::fmt;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use crate::memory::MemRegion;

/// What went wrong in a verbs call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum VerbsErrorKind {
    /// The verbs library itself could not be loaded.
    LibraryMissing,
    /// No device, port or object of that name or number exists.
    NotFound,
    /// The device or library does not support the operation.
    Unsupported,
    /// An argument, attribute mask or state transition was refused.
    InvalidArgument,
    /// The device ran out of a resource (QPs, CQ entries, work requests).
    OutOfResources,
    /// An operating-system call failed.
    Os,
    /// The test double was told to fail this call.
    Injected,
}

/// A failed verbs call: which call, why, and the errno where there is one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{op} failed: {detail}")]
pub struct VerbsError {
    /// The verbs call that failed, such as `"ibv_modify_qp"`.
    pub op: &'static str,
    /// The class of failure.
    pub kind: VerbsErrorKind,
    /// The errno the call reported, if any.
    pub errno: Option<i32>,
    /// A sentence for people.
    pub detail: String,
}

impl VerbsError {
    /// Builds an error with no errno.
    pub fn new(op: &'static str, kind: VerbsErrorKind, detail: impl Into<String>) -> Self {
        Self {
            op,
            kind,
            errno: None,
            detail: detail.into(),
        }
    }

    /// Builds an error that carries an errno.
    pub fn with_errno(op: &'static str, kind: VerbsErrorKind, errno: i32, detail: impl Into<String>) -> Self {
        Self {
            op,
            kind,
            errno: Some(errno),
            detail: detail.into(),
        }
    }
}

/// A 128-bit global identifier, in network byte order as on the wire.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The all-zero GID, which marks an unused table entry.
    pub const ZERO: Gid = Gid([0; 16]);

    /// The IPv4-mapped GID `::ffff:a.b.c.d` of a RoCE v2 IPv4 address.
    pub fn from_ipv4(ip: Ipv4Addr) -> Self {
        let mut raw = [0u8; 16];
        raw[10] = 0xff;
        raw[11] = 0xff;
        raw[12..].copy_from_slice(&ip.octets());
        Gid(raw)
    }

    /// The IPv4 address of an IPv4-mapped GID, or `None` for any other GID.
    pub fn to_ipv4(&self) -> Option<Ipv4Addr> {
        let g = &self.0;
        (g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff)
            .then(|| Ipv4Addr::new(g[12], g[13], g[14], g[15]))
    }

    /// Whether every byte is zero.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// Whether this is an IPv6 link-local GID (`fe80::/64`).
    pub fn is_link_local(&self) -> bool {
        self.0[0] == 0xfe && (self.0[1] & 0xc0) == 0x80
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        std::net::Ipv6Addr::from(self.0).fmt(f)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// Memory access rights (`enum ibv_access_flags`).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct AccessFlags(pub u32);

impl AccessFlags {
    /// The NIC may write the memory for local operations (receives, READ responses).
    pub const LOCAL_WRITE: Self = Self(1);
    /// A peer may RDMA WRITE into the memory.
    pub const REMOTE_WRITE: Self = Self(2);
    /// A peer may RDMA READ from the memory.
    pub const REMOTE_READ: Self = Self(4);
    /// A peer may run atomics on the memory.
    pub const REMOTE_ATOMIC: Self = Self(8);
    /// Memory windows may be bound over the memory (`IBV_ACCESS_MW_BIND`).
    /// A registration with only this right (and `LOCAL_WRITE`) gives a peer
    /// nothing by its own key: access goes through windows alone.
    pub const MW_BIND: Self = Self(16);

    /// Whether every right in `other` is present in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union of two sets of rights.
    #[must_use]
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
}

impl std::ops::BitOr for AccessFlags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}

impl fmt::Debug for AccessFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Self::LOCAL_WRITE, "LOCAL_WRITE"),
            (Self::REMOTE_WRITE, "REMOTE_WRITE"),
            (Self::REMOTE_READ, "REMOTE_READ"),
            (Self::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
            (Self::MW_BIND, "MW_BIND"),
        ];
        let set: Vec<&str> = names
            .iter()
            .filter(|(flag, _)| self.contains(*flag))
            .map(|(_, name)| *name)
            .collect();
        write!(f, "AccessFlags({})", set.join("|"))
    }
}

/// Queue pair states (`enum ibv_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum QpState {
    /// Freshly created or reset: accepts nothing.
    Reset = 0,
    /// Initialised: receives may be posted, incoming packets are dropped.
    Init = 1,
    /// Ready to receive.
    Rtr = 2,
    /// Ready to send.
    Rts = 3,
    /// Send queue drained.
    Sqd = 4,
    /// Send queue error.
    Sqe = 5,
    /// Error: work requests are flushed.
    Err = 6,
}

impl QpState {
    /// The state with this `ibv_qp_state` value.
    pub fn from_raw(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::Reset,
            1 => Self::Init,
            2 => Self::Rtr,
            3 => Self::Rts,
            4 => Self::Sqd,
            5 => Self::Sqe,
            6 => Self::Err,
            _ => return None,
        })
    }
}

/// Path MTU (`enum ibv_mtu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// The payload size in bytes.
    pub const fn bytes(self) -> usize {
        256 << (self as u32 - 1)
    }

    /// The MTU with this `ibv_mtu` value.
    pub fn from_raw(v: u32) -> Option<Self> {
        Some(match v {
            1 => Self::Mtu256,
            2 => Self::Mtu512,
            3 => Self::Mtu1024,
            4 => Self::Mtu2048,
            5 => Self::Mtu4096,
            _ => return None,
        })
    }

    /// The MTU whose payload is exactly `bytes`.
    pub fn from_bytes(bytes: usize) -> Option<Self> {
        [
            Self::Mtu256,
            Self::Mtu512,
            Self::Mtu1024,
            Self::Mtu2048,
            Self::Mtu4096,
        ]
        .into_iter()
        .find(|m| m.bytes() == bytes)
    }
}

/// Port states (`enum ibv_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum PortState {
    /// No state change.
    Nop = 0,
    /// The link is down.
    Down = 1,
    /// Initialising.
    Init = 2,
    /// Armed.
    Armed = 3,
    /// Up and usable.
    Active = 4,
    /// Active, deferred.
    ActiveDefer = 5,
}

/// The link layer of a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    /// InfiniBand: LIDs route packets.
    InfiniBand,
    /// Ethernet: RoCE, GIDs route packets.
    Ethernet,
}

/// What `ibv_query_device` reports that the library uses.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DeviceAttr {
    /// PCI vendor id (0x14E4 Broadcom, 0x1DD8 Pensando, 0x15B3 Mellanox, 0 soft).
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Physical ports, numbered from 1.
    pub phys_port_cnt: u8,
    /// Most queue pairs.
    pub max_qp: u32,
    /// Most work requests per queue.
    pub max_qp_wr: u32,
    /// Most completion queue entries.
    pub max_cqe: u32,
    /// Largest memory region in bytes.
    pub max_mr_size: u64,
    /// Most outstanding RDMA READs a QP may issue or answer.
    pub max_qp_rd_atom: u32,
    /// Whether the device binds type-2 memory windows by work request
    /// (`IBV_DEVICE_MEM_WINDOW_TYPE_2A` or `_2B` in `device_cap_flags`).
    pub mw_type2: bool,
}

/// What `ibv_query_port` reports that the library uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// Logical port state.
    pub state: PortState,
    /// Largest MTU the port supports.
    pub max_mtu: Mtu,
    /// MTU currently in effect.
    pub active_mtu: Mtu,
    /// Entries in the GID table.
    pub gid_tbl_len: u32,
    /// Local identifier (InfiniBand only; 0 on RoCE).
    pub lid: u16,
    /// Link layer.
    pub link_layer: LinkLayer,
}

/// Attribute mask bits (`enum ibv_qp_attr_mask`).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct QpAttrMask(pub u32);

impl QpAttrMask {
    /// `qp_state`.
    pub const STATE: Self = Self(1 << 0);
    /// `cur_qp_state`.
    pub const CUR_STATE: Self = Self(1 << 1);
    /// `qp_access_flags`.
    pub const ACCESS_FLAGS: Self = Self(1 << 3);
    /// `pkey_index`.
    pub const PKEY_INDEX: Self = Self(1 << 4);
    /// `port_num`.
    pub const PORT: Self = Self(1 << 5);
    /// `qkey`.
    pub const QKEY: Self = Self(1 << 6);
    /// `ah_attr`.
    pub const AV: Self = Self(1 << 7);
    /// `path_mtu`.
    pub const PATH_MTU: Self = Self(1 << 8);
    /// `timeout`.
    pub const TIMEOUT: Self = Self(1 << 9);
    /// `retry_cnt`.
    pub const RETRY_CNT: Self = Self(1 << 10);
    /// `rnr_retry`.
    pub const RNR_RETRY: Self = Self(1 << 11);
    /// `rq_psn`.
    pub const RQ_PSN: Self = Self(1 << 12);
    /// `max_rd_atomic`.
    pub const MAX_QP_RD_ATOMIC: Self = Self(1 << 13);
    /// `alt_ah_attr` and friends.
    pub const ALT_PATH: Self = Self(1 << 14);
    /// `min_rnr_timer`.
    pub const MIN_RNR_TIMER: Self = Self(1 << 15);
    /// `sq_psn`.
    pub const SQ_PSN: Self = Self(1 << 16);
    /// `max_dest_rd_atomic`.
    pub const MAX_DEST_RD_ATOMIC: Self = Self(1 << 17);
    /// `path_mig_state`.
    pub const PATH_MIG_STATE: Self = Self(1 << 18);
    /// `cap`.
    pub const CAP: Self = Self(1 << 19);
    /// `dest_qp_num`.
    pub const DEST_QPN: Self = Self(1 << 20);

    /// Whether every bit of `other` is set.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The bits of `self` that are not in `other`.
    #[must_use]
    pub const fn without(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }

    /// Whether no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl std::ops::BitOr for QpAttrMask {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl fmt::Debug for QpAttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "QpAttrMask({:#x})", self.0)
    }
}

/// Queue pair attributes for [`QueuePair::modify`] (the RC subset of
/// `struct ibv_qp_attr`). Only the fields named in the mask are read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpAttr {
    /// Target state.
    pub qp_state: QpState,
    /// Remote access rights granted to the peer.
    pub qp_access_flags: AccessFlags,
    /// Partition key index.
    pub pkey_index: u16,
    /// Port number, from 1.
    pub port_num: u8,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// The peer's QP number.
    pub dest_qp_num: u32,
    /// First PSN expected from the peer.
    pub rq_psn: u32,
    /// First PSN this QP sends.
    pub sq_psn: u32,
    /// RDMA READs and atomics this QP answers at once.
    pub max_dest_rd_atomic: u8,
    /// RDMA READs and atomics this QP keeps in flight.
    pub max_rd_atomic: u8,
    /// RNR NAK timer code (0..31) this QP sends.
    pub min_rnr_timer: u8,
    /// Local ACK timeout: 4.096 us x 2^timeout (0 means infinite).
    pub timeout: u8,
    /// Retransmissions after a timeout or sequence error (0..7).
    pub retry_cnt: u8,
    /// Retries after an RNR NAK (0..6; 7 means infinite).
    pub rnr_retry: u8,
    /// The peer's GID.
    pub dgid: Gid,
    /// Index of the local GID to send from.
    pub sgid_index: u8,
    /// IP TTL / GRH hop limit.
    pub hop_limit: u8,
    /// The peer's LID (InfiniBand only).
    pub dlid: u16,
}

impl Default for QpAttr {
    fn default() -> Self {
        Self {
            qp_state: QpState::Reset,
            qp_access_flags: AccessFlags::default(),
            pkey_index: 0,
            port_num: 1,
            path_mtu: Mtu::Mtu1024,
            dest_qp_num: 0,
            rq_psn: 0,
            sq_psn: 0,
            max_dest_rd_atomic: 1,
            max_rd_atomic: 1,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            dgid: Gid::ZERO,
            sgid_index: 0,
            hop_limit: 64,
            dlid: 0,
        }
    }
}

/// Checks a reliable-connected QP state transition and its attribute mask as
/// `ibv_modify_qp` does (the table of required and optional attributes in the
/// InfiniBand specification, section 11.2.5). Backends that enforce the rules
/// themselves (the soft NIC, the fake) share this table.
pub fn check_rc_transition(cur: QpState, attr: &QpAttr, mask: QpAttrMask) -> Result<(), VerbsError> {
    use QpAttrMask as M;
    let invalid = |why: String| {
        Err(VerbsError::new(
            "ibv_modify_qp",
            VerbsErrorKind::InvalidArgument,
            why,
        ))
    };
    if !mask.contains(M::STATE) {
        // Without a state change only attribute updates are allowed; the RC
        // subset we model permits none outside a transition.
        return invalid("attribute mask lacks IBV_QP_STATE".into());
    }
    let next = attr.qp_state;
    let (required, optional) = match (cur, next) {
        (_, QpState::Reset) | (_, QpState::Err) => (M::STATE, M::default()),
        (QpState::Reset, QpState::Init) => {
            (M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS, M::default())
        }
        (QpState::Init, QpState::Init) => (M::STATE, M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS),
        (QpState::Init, QpState::Rtr) => (
            M::STATE
                | M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER,
            M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX,
        ),
        (QpState::Rtr, QpState::Rts) => (
            M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC,
            M::CUR_STATE | M::ACCESS_FLAGS | M::MIN_RNR_TIMER | M::ALT_PATH | M::PATH_MIG_STATE,
        ),
        (QpState::Rts, QpState::Rts) => (
            M::STATE,
            M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE | M::MIN_RNR_TIMER,
        ),
        (from, to) => return invalid(format!("illegal RC transition {from:?} -> {to:?}")),
    };
    if !mask.contains(required) {
        return invalid(format!(
            "{cur:?} -> {next:?} needs attribute mask {:#x}, got {:#x}",
            required.0, mask.0
        ));
    }
    let extra = mask.without(required).without(optional);
    if !extra.is_empty() {
        return invalid(format!(
            "{cur:?} -> {next:?} does not take attribute bits {:#x}",
            extra.0
        ));
    }
    if mask.contains(M::TIMEOUT) && attr.timeout > 31 {
        return invalid(format!("timeout {} is over 31", attr.timeout));
    }
    if mask.contains(M::RETRY_CNT) && attr.retry_cnt > 7 {
        return invalid(format!("retry_cnt {} is over 7", attr.retry_cnt));
    }
    if mask.contains(M::RNR_RETRY) && attr.rnr_retry > 7 {
        return invalid(format!("rnr_retry {} is over 7", attr.rnr_retry));
    }
    if mask.contains(M::MIN_RNR_TIMER) && attr.min_rnr_timer > 31 {
        return invalid(format!("min_rnr_timer {} is over 31", attr.min_rnr_timer));
    }
    if (mask.contains(M::RQ_PSN) && attr.rq_psn > 0xff_ffff)
        || (mask.contains(M::SQ_PSN) && attr.sq_psn > 0xff_ffff)
    {
        return invalid("a PSN is wider than 24 bits".into());
    }
    Ok(())
}

/// Sizes and completion queues of a new RC queue pair (`ibv_qp_init_attr`).
#[derive(Clone, Debug)]
pub struct QpInitAttr {
    /// Where send work requests complete.
    pub send_cq: Arc<dyn CompletionQueue>,
    /// Where receive work requests complete.
    pub recv_cq: Arc<dyn CompletionQueue>,
    /// Most outstanding send work requests.
    pub max_send_wr: u32,
    /// Most outstanding receive work requests.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send work request.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive work request.
    pub max_recv_sge: u32,
    /// Whether every send work request completes (`sq_sig_all`).
    pub sq_sig_all: bool,
}

/// One scatter/gather entry (`struct ibv_sge`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// Local address, inside a memory region registered with `lkey`.
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// The local key of that memory region.
    pub lkey: u32,
}

/// The operation of a send work request, with its remote operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// SEND: consumes a receive at the peer.
    Send,
    /// SEND with immediate data.
    SendWithImm {
        /// Immediate data, delivered in the peer's completion.
        imm: u32,
    },
    /// RDMA WRITE into the peer's memory.
    Write {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// RDMA WRITE with immediate data: also consumes a receive at the peer.
    WriteWithImm {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate data.
        imm: u32,
    },
    /// RDMA READ from the peer's memory.
    Read {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// Local invalidate (`IBV_WR_LOCAL_INV`): the memory window bound under
    /// `rkey` on this QP stops granting access once this request completes.
    LocalInv {
        /// The window's current key.
        rkey: u32,
    },
}

/// A type-2 memory window bind (`IBV_WR_BIND_MW`), posted on a send queue.
#[derive(Clone, Copy, Debug)]
pub struct BindMwWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The window to bind. A type-2 window is bound to the QP that binds it.
    pub mw: &'a dyn MemoryWindow,
    /// The registration the window covers; it must allow `MW_BIND`.
    pub mr: &'a dyn MemoryRegion,
    /// First byte the window grants, inside `mr`.
    pub addr: u64,
    /// Bytes the window grants.
    pub length: u64,
    /// The remote rights the window grants (a subset of REMOTE_READ, REMOTE_WRITE).
    pub access: AccessFlags,
    /// The key to bind under. `None`: the backend draws a fresh key byte that
    /// differs from the window's current one. `Some(k)`: the caller chose it
    /// (as `ibv_post_send` lets it), because it had to hand the key out
    /// before the QP could bind (a token minted while the QP is not in RTS
    /// yet); `k` must keep the window's index (`k >> 8 == rkey() >> 8`).
    pub rkey: Option<u32>,
    /// Whether the bind completes on the send CQ when it succeeds.
    pub signaled: bool,
}

/// A send work request (`struct ibv_send_wr`, one at a time).
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// Local memory: the source of a SEND or WRITE, the target of a READ.
    pub sg_list: &'a [Sge],
    /// Whether this request completes on the send CQ (`IBV_SEND_SIGNALED`).
    pub signaled: bool,
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Clone, Copy, Debug)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where an incoming SEND's payload goes.
    pub sg_list: &'a [Sge],
}

/// Completion status (`enum ibv_wc_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
#[allow(missing_docs)]
pub enum WcStatus {
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocEecOpErr = 3,
    LocProtErr = 4,
    WrFlushErr = 5,
    MwBindErr = 6,
    BadRespErr = 7,
    LocAccessErr = 8,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
    LocRddViolErr = 14,
    RemInvRdReqErr = 15,
    RemAbortErr = 16,
    InvEecnErr = 17,
    InvEecStateErr = 18,
    FatalErr = 19,
    RespTimeoutErr = 20,
    GeneralErr = 21,
}

impl WcStatus {
    /// The status with this `ibv_wc_status` value ([`WcStatus::GeneralErr`] for unknown values).
    pub fn from_raw(v: u32) -> Self {
        use WcStatus::*;
        const ALL: [WcStatus; 22] = [
            Success,
            LocLenErr,
            LocQpOpErr,
            LocEecOpErr,
            LocProtErr,
            WrFlushErr,
            MwBindErr,
            BadRespErr,
            LocAccessErr,
            RemInvReqErr,
            RemAccessErr,
            RemOpErr,
            RetryExcErr,
            RnrRetryExcErr,
            LocRddViolErr,
            RemInvRdReqErr,
            RemAbortErr,
            InvEecnErr,
            InvEecStateErr,
            FatalErr,
            RespTimeoutErr,
            GeneralErr,
        ];
        ALL.get(v as usize).copied().unwrap_or(GeneralErr)
    }
}

/// Completion opcode (`enum ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcOpcode {
    /// A SEND completed.
    Send = 0,
    /// An RDMA WRITE completed.
    RdmaWrite = 1,
    /// An RDMA READ completed.
    RdmaRead = 2,
    /// A memory window bind completed.
    BindMw = 5,
    /// A local invalidate completed.
    LocalInv = 6,
    /// A SEND arrived into a posted receive.
    Recv = 128,
    /// An RDMA WRITE with immediate arrived and consumed a posted receive.
    RecvRdmaWithImm = 129,
}

/// One work completion (`struct ibv_wc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The work request's id.
    pub wr_id: u64,
    /// How it ended.
    pub status: WcStatus,
    /// What it was. Only meaningful when `status` is success.
    pub opcode: WcOpcode,
    /// Vendor-specific error syndrome.
    pub vendor_err: u32,
    /// Bytes received (receives) or transferred (READ).
    pub byte_len: u32,
    /// Immediate data, when the incoming operation carried some.
    pub imm_data: Option<u32>,
    /// The local QP the work request belonged to.
    pub qp_num: u32,
}

impl WorkCompletion {
    /// A placeholder to fill arrays that [`CompletionQueue::poll`] writes into.
    pub const EMPTY: Self = Self {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        vendor_err: 0,
        byte_len: 0,
        imm_data: None,
        qp_num: 0,
    };
}

/// Access to RDMA devices: the root of the seam.
pub trait Verbs: Send + Sync + fmt::Debug {
    /// A short name of the backend ("ibverbs", "softroce", "fake").
    fn backend(&self) -> &'static str;

    /// The names of the devices this backend can open (as `ibv_devices` lists them).
    fn device_names(&self) -> Result<Vec<String>, VerbsError>;

    /// Opens a device by name (`ibv_open_device`).
    fn open_device(&self, name: &str) -> Result<Arc<dyn Device>, VerbsError>;
}

/// An open device context (`struct ibv_context`).
pub trait Device: Send + Sync + fmt::Debug {
    /// The device's name.
    fn name(&self) -> &str;

    /// Device attributes (`ibv_query_device`).
    fn attr(&self) -> Result<DeviceAttr, VerbsError>;

    /// Port attributes (`ibv_query_port`), ports numbered from 1.
    fn query_port(&self, port: u8) -> Result<PortAttr, VerbsError>;

    /// One GID table entry (`ibv_query_gid`).
    fn query_gid(&self, port: u8, index: u32) -> Result<Gid, VerbsError>;

    /// Whether `ProtectionDomain::reg_dmabuf_mr` can work at all.
    fn supports_dmabuf(&self) -> bool;

    /// Allocates a protection domain (`ibv_alloc_pd`).
    fn alloc_pd(&self) -> Result<Arc<dyn ProtectionDomain>, VerbsError>;

    /// Creates a completion queue with room for at least `cqe` entries (`ibv_create_cq`).
    fn create_cq(&self, cqe: u32) -> Result<Arc<dyn CompletionQueue>, VerbsError>;
}

/// A protection domain (`struct ibv_pd`).
pub trait ProtectionDomain: Send + Sync + fmt::Debug {
    /// Registers memory (`ibv_reg_mr`).
    fn reg_mr(&self, region: MemRegion, access: AccessFlags) -> Result<Box<dyn MemoryRegion>, VerbsError>;

    /// Registers a dma-buf (`ibv_reg_dmabuf_mr`). `iova` is the address peers
    /// use for the first byte. The fd is only borrowed: the MR keeps its own
    /// reference to the buffer.
    fn reg_dmabuf_mr(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Box<dyn MemoryRegion>, VerbsError>;

    /// Creates a reliable-connected queue pair in RESET (`ibv_create_qp`).
    fn create_qp(&self, init: &QpInitAttr) -> Result<Box<dyn QueuePair>, VerbsError>;

    /// Allocates a type-2 memory window (`ibv_alloc_mw(pd, IBV_MW_TYPE_2)`),
    /// unbound: its key grants nothing until a QP binds it.
    fn alloc_mw(&self) -> Result<Box<dyn MemoryWindow>, VerbsError> {
        Err(VerbsError::new(
            "ibv_alloc_mw",
            VerbsErrorKind::Unsupported,
            "this device has no type-2 memory windows",
        ))
    }
}

/// A type-2 memory window (`struct ibv_mw`). Dropping it deallocates it,
/// which also ends any binding.
pub trait MemoryWindow: Send + Sync + fmt::Debug {
    /// The key of the window's latest binding (before the first bind: the
    /// key it was allocated with, which grants nothing).
    fn rkey(&self) -> u32;
    /// The backend's own object, so that the backend that made it can find
    /// its handle in [`QueuePair::bind_mw`].
    fn as_any(&self) -> &dyn Any;
}

/// A registered memory region (`struct ibv_mr`). Dropping it deregisters.
pub trait MemoryRegion: Send + Sync + fmt::Debug {
    /// The local key, for scatter/gather entries.
    fn lkey(&self) -> u32;
    /// The remote key, for peers.
    fn rkey(&self) -> u32;
    /// The address peers use for the first byte.
    fn addr(&self) -> u64;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// Whether the region is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The backend's own object, so that the backend that made it can find
    /// its handle in [`QueuePair::bind_mw`].
    fn as_any(&self) -> &dyn Any;
}

/// A completion queue (`struct ibv_cq`).
pub trait CompletionQueue: Send + Sync + fmt::Debug {
    /// Moves up to `out.len()` completions into `out`, oldest first, and says
    /// how many (`ibv_poll_cq`). Never blocks.
    fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize, VerbsError>;

    /// Blocks until the queue may hold a completion or `timeout` passes, and
    /// says which. A backend without a completion channel may return `true`
    /// early; callers always poll afterwards.
    fn wait(&self, timeout: Duration) -> Result<bool, VerbsError>;
}

/// A reliable-connected queue pair (`struct ibv_qp`). Dropping it destroys it.
pub trait QueuePair: Send + Sync + fmt::Debug {
    /// The QP number peers address it by.
    fn qp_num(&self) -> u32;

    /// Changes state and attributes (`ibv_modify_qp`).
    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), VerbsError>;

    /// The current state (`ibv_query_qp`).
    fn state(&self) -> Result<QpState, VerbsError>;

    /// Posts one send work request (`ibv_post_send`).
    fn post_send(&self, wr: &SendWr<'_>) -> Result<(), VerbsError>;

    /// Posts one receive work request (`ibv_post_recv`).
    fn post_recv(&self, wr: &RecvWr<'_>) -> Result<(), VerbsError>;

    /// Posts a type-2 memory window bind (`IBV_WR_BIND_MW`) and returns the
    /// window's new key. Unless the request names the key, the backend picks
    /// the key's low byte so that it differs from the window's previous key
    /// and is hard to guess; the key
    /// grants access only through this QP, and only once the bind has
    /// executed (it is ordered before later send work requests).
    fn bind_mw(&self, wr: &BindMwWr<'_>) -> Result<u32, VerbsError> {
        let _ = wr;
        Err(VerbsError::new(
            "ibv_post_send",
            VerbsErrorKind::Unsupported,
            "this device has no type-2 memory windows",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_ipv4_round_trip() {
        let ip = Ipv4Addr::new(127, 0, 3, 9);
        let g = Gid::from_ipv4(ip);
        assert_eq!(g.to_ipv4(), Some(ip));
        assert_eq!(g.to_string(), "::ffff:127.0.3.9");
        let mut ll = Gid::ZERO;
        ll.0[0] = 0xfe;
        ll.0[1] = 0x80;
        assert!(ll.is_link_local());
        assert_eq!(ll.to_ipv4(), None);
    }

    #[test]
    fn mtu_values() {
        assert_eq!(Mtu::Mtu1024.bytes(), 1024);
        assert_eq!(Mtu::Mtu4096.bytes(), 4096);
        assert_eq!(Mtu::from_bytes(2048), Some(Mtu::Mtu2048));
        assert_eq!(Mtu::from_raw(5), Some(Mtu::Mtu4096));
        assert_eq!(Mtu::from_raw(6), None);
    }

    fn rtr_mask() -> QpAttrMask {
        use QpAttrMask as M;
        M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER
    }

    #[test]
    fn rc_transitions_follow_the_table() {
        use QpAttrMask as M;
        let mut a = QpAttr {
            qp_state: QpState::Init,
            ..QpAttr::default()
        };
        let init_mask = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
        assert!(check_rc_transition(QpState::Reset, &a, init_mask).is_ok());
        assert!(check_rc_transition(QpState::Reset, &a, M::STATE | M::PORT).is_err());
        a.qp_state = QpState::Rtr;
        assert!(check_rc_transition(QpState::Init, &a, rtr_mask()).is_ok());
        assert!(check_rc_transition(QpState::Reset, &a, rtr_mask()).is_err());
        assert!(check_rc_transition(QpState::Init, &a, rtr_mask() | M::SQ_PSN).is_err());
        a.qp_state = QpState::Rts;
        assert!(check_rc_transition(QpState::Init, &a, M::STATE).is_err());
        let rts = M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
        assert!(check_rc_transition(QpState::Rtr, &a, rts).is_ok());
        a.retry_cnt = 8;
        assert!(check_rc_transition(QpState::Rtr, &a, rts).is_err());
        a.qp_state = QpState::Err;
        assert!(check_rc_transition(QpState::Rts, &a, M::STATE).is_ok());
        a.qp_state = QpState::Reset;
        assert!(check_rc_transition(QpState::Err, &a, M::STATE).is_ok());
        assert!(check_rc_transition(QpState::Err, &a, M::PORT).is_err());
    }

    #[test]
    fn wc_status_from_raw() {
        assert_eq!(WcStatus::from_raw(12), WcStatus::RetryExcErr);
        assert_eq!(WcStatus::from_raw(13), WcStatus::RnrRetryExcErr);
        assert_eq!(WcStatus::from_raw(10), WcStatus::RemAccessErr);
        assert_eq!(WcStatus::from_raw(999), WcStatus::GeneralErr);
    }
}
