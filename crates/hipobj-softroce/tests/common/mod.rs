//! Helpers shared by the tests that run the soft NIC over real UDP.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use hipobj_platform::{
    AccessFlags, CompletionQueue, Device, Gid, MemoryRegion, Mtu, ProtectionDomain, QpAttr, QpAttrMask,
    QpInitAttr, QpState, QueuePair, Sge, Verbs, WcOpcode, WcStatus, WorkCompletion,
};
use hipobj_softroce::{HostBuffer, SoftConfig, SoftDevice, SoftVerbs};

pub(crate) const RW: AccessFlags = AccessFlags(1 | 2 | 4);

/// One device with a PD, two CQs and one RC QP in RESET.
pub(crate) struct Node {
    pub verbs: SoftVerbs,
    pub soft: Arc<SoftDevice>,
    pub dev: Arc<dyn Device>,
    pub pd: Arc<dyn ProtectionDomain>,
    pub scq: Arc<dyn CompletionQueue>,
    pub rcq: Arc<dyn CompletionQueue>,
    pub qp: Box<dyn QueuePair>,
}

/// QP attributes the tests connect with: a 67 ms local ACK timeout (the
/// usual RoCE value), so that 8 timeouts in a row, half a second without
/// progress, only happen when something is wrong, not because a loaded
/// machine did not schedule a worker for a few milliseconds. Tests of the
/// retry rules shorten it.
pub(crate) fn attrs(mtu: Mtu) -> QpAttr {
    QpAttr {
        qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        path_mtu: mtu,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 1,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        ..QpAttr::default()
    }
}

impl Node {
    pub(crate) fn new(config: SoftConfig) -> Node {
        let verbs = SoftVerbs::new(config);
        let name = verbs.device_names().unwrap().remove(0);
        let dev = verbs.open_device(&name).unwrap();
        let soft = verbs.device().unwrap();
        let pd = dev.alloc_pd().unwrap();
        let scq = dev.create_cq(4096).unwrap();
        let rcq = dev.create_cq(4096).unwrap();
        let qp = pd
            .create_qp(&QpInitAttr {
                send_cq: scq.clone(),
                recv_cq: rcq.clone(),
                max_send_wr: 1024,
                max_recv_wr: 1024,
                max_send_sge: 4,
                max_recv_sge: 4,
                sq_sig_all: false,
            })
            .unwrap();
        Node {
            verbs,
            soft,
            dev,
            pd,
            scq,
            rcq,
            qp,
        }
    }

    pub(crate) fn gid(&self) -> Gid {
        self.dev.query_gid(1, 0).unwrap()
    }

    /// RESET -> INIT.
    pub(crate) fn init(&self, attr: &QpAttr) {
        use QpAttrMask as M;
        let a = QpAttr {
            qp_state: QpState::Init,
            ..attr.clone()
        };
        self.qp
            .modify(&a, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS)
            .unwrap();
    }

    /// INIT -> RTR -> RTS towards `(gid, qpn)`; receives from `rq_psn`,
    /// sends from `sq_psn`.
    pub(crate) fn connect(&self, attr: &QpAttr, gid: Gid, qpn: u32, rq_psn: u32, sq_psn: u32) {
        use QpAttrMask as M;
        let a = QpAttr {
            qp_state: QpState::Rtr,
            dgid: gid,
            dest_qp_num: qpn,
            rq_psn,
            sq_psn,
            ..attr.clone()
        };
        self.qp
            .modify(
                &a,
                M::STATE
                    | M::AV
                    | M::PATH_MTU
                    | M::DEST_QPN
                    | M::RQ_PSN
                    | M::MAX_DEST_RD_ATOMIC
                    | M::MIN_RNR_TIMER,
            )
            .unwrap();
        let a = QpAttr {
            qp_state: QpState::Rts,
            ..a
        };
        self.qp
            .modify(
                &a,
                M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC,
            )
            .unwrap();
    }

    pub(crate) fn reg(&self, buf: &HostBuffer, access: AccessFlags) -> Box<dyn MemoryRegion> {
        self.pd.reg_mr(buf.region(), access).unwrap()
    }
}

/// Connects two nodes to each other.
pub(crate) fn pair(a: &Node, b: &Node, attr: &QpAttr) {
    a.init(attr);
    b.init(attr);
    a.connect(attr, b.gid(), b.qp.qp_num(), 0x100, 0x200);
    b.connect(attr, a.gid(), a.qp.qp_num(), 0x200, 0x100);
}

pub(crate) fn sge(buf: &HostBuffer, mr: &dyn MemoryRegion) -> Sge {
    Sge {
        addr: buf.addr(),
        length: buf.len() as u32,
        lkey: mr.lkey(),
    }
}

pub(crate) fn blank() -> WorkCompletion {
    WorkCompletion {
        wr_id: 0,
        status: WcStatus::GeneralErr,
        opcode: WcOpcode::Send,
        vendor_err: 0,
        byte_len: 0,
        imm_data: None,
        qp_num: 0,
    }
}

/// Waits (with `CompletionQueue::wait`) for `n` completions or `timeout`.
pub(crate) fn wait(cq: &dyn CompletionQueue, n: usize, timeout: Duration) -> Vec<WorkCompletion> {
    let end = Instant::now() + timeout;
    let mut got = Vec::new();
    let mut buf = [blank(); 16];
    while got.len() < n {
        let now = Instant::now();
        if now >= end {
            break;
        }
        cq.wait(end - now).unwrap();
        let k = cq.poll(&mut buf).unwrap();
        got.extend_from_slice(&buf[..k]);
    }
    got
}

pub(crate) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(7) as u8 ^ seed)
        .collect()
}
