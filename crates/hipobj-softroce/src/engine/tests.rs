//! The RC rules of `docs/soft-roce.md`, each in memory with virtual time:
//! two engines joined by a [`SimNet`].
#![allow(clippy::unwrap_used)]

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

use hipobj_platform::{
    AccessFlags, Gid, Mtu, QpAttr, QpAttrMask, QpState, RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus,
    WorkCompletion,
};

use super::{Cq, Engine, EngineConfig, QpConfig, Time};
use crate::link::faults::FaultConfig;
use crate::link::mem::SimNet;
use crate::mem::HostBuffer;
use crate::wire::aeth::AethRepr;
use crate::wire::bth::{BthRepr, DEFAULT_PKEY};
use crate::wire::reth::RethRepr;
use crate::wire::{Headers, Opcode, Packet, PseudoHeader, ROCE_PORT};

const A: usize = 0;
const B: usize = 1;
const LATENCY: Duration = Duration::from_micros(5);
/// Local ACK timeout code of the tests: 4.096 us x 2^10 = 4.19 ms.
const TIMEOUT: u8 = 10;
const RW: AccessFlags = AccessFlags(1 | 2 | 4);

fn ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 10, 0, 1 + i as u8)
}

fn addr(i: usize) -> SocketAddrV4 {
    SocketAddrV4::new(ip(i), ROCE_PORT)
}

struct Side {
    pd: u32,
    scq: Arc<Cq>,
    rcq: Arc<Cq>,
    qpn: u32,
}

struct Fx {
    net: SimNet,
    s: [Side; 2],
    /// Attributes both QPs get on the way to RTS.
    attr: QpAttr,
}

fn side(e: &mut Engine, cqe: usize) -> Side {
    let pd = e.alloc_pd();
    let scq = Arc::new(Cq::new(cqe));
    let rcq = Arc::new(Cq::new(cqe));
    let qpn = e
        .create_qp(QpConfig {
            pd,
            send_cq: scq.clone(),
            recv_cq: rcq.clone(),
            max_send_wr: 1024,
            max_recv_wr: 1024,
            max_send_sge: 4,
            max_recv_sge: 4,
            sq_sig_all: false,
        })
        .unwrap();
    Side { pd, scq, rcq, qpn }
}

impl Fx {
    fn with(mtu: Mtu, faults: FaultConfig, cqe: usize) -> Self {
        let mut engines: Vec<Engine> = (0..2)
            .map(|i| {
                let mut c = EngineConfig::new(ip(i));
                c.mtu = mtu;
                Engine::new(c)
            })
            .collect();
        let s = [side(&mut engines[0], cqe), side(&mut engines[1], cqe)];
        let attr = QpAttr {
            qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            path_mtu: mtu,
            timeout: TIMEOUT,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            ..QpAttr::default()
        };
        Self {
            net: SimNet::new(engines, LATENCY, faults),
            s,
            attr,
        }
    }

    fn new() -> Self {
        Self::with(Mtu::Mtu4096, FaultConfig::NONE, 4096)
    }

    fn e(&mut self, i: usize) -> &mut Engine {
        self.net.engine(i)
    }

    /// `ibv_modify_qp` on engine `i` at the network's time.
    fn modify_qp(
        &mut self,
        i: usize,
        qpn: u32,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), hipobj_platform::VerbsError> {
        let now = self.net.now();
        self.e(i).modify_qp(now, qpn, attr, mask)
    }

    /// Walks QP `qpn` of engine `i` through INIT, RTR and RTS with `attr`.
    fn bring_up(&mut self, i: usize, qpn: u32, attr: &QpAttr) {
        for (state, mask) in [
            (QpState::Init, init_mask()),
            (QpState::Rtr, rtr_mask()),
            (QpState::Rts, rts_mask()),
        ] {
            let attr = QpAttr {
                qp_state: state,
                ..attr.clone()
            };
            self.modify_qp(i, qpn, &attr, mask).unwrap();
        }
    }

    /// `ibv_post_send` on engine `i` at the network's time.
    fn post_send(&mut self, i: usize, qpn: u32, wr: &SendWr<'_>) -> Result<(), hipobj_platform::VerbsError> {
        let now = self.net.now();
        self.e(i).post_send(now, qpn, wr)
    }

    /// A window bind on engine `i` at the network's time.
    fn bind_mw(&mut self, i: usize, qpn: u32, b: &super::MwBind) -> Result<u32, hipobj_platform::VerbsError> {
        let now = self.net.now();
        self.e(i).bind_mw(now, qpn, b)
    }

    fn modify(
        &mut self,
        i: usize,
        state: QpState,
        mask: QpAttrMask,
    ) -> Result<(), hipobj_platform::VerbsError> {
        let other = 1 - i;
        let attr = QpAttr {
            qp_state: state,
            dest_qp_num: self.s[other].qpn,
            dgid: Gid::from_ipv4(ip(other)),
            ..self.attr.clone()
        };
        let qpn = self.s[i].qpn;
        self.modify_qp(i, qpn, &attr, mask)
    }

    fn move_to_init(&mut self, i: usize) {
        self.modify(i, QpState::Init, init_mask()).unwrap();
    }

    fn move_to_rtr(&mut self, i: usize) {
        self.modify(i, QpState::Rtr, rtr_mask()).unwrap();
    }

    fn move_to_rts(&mut self, i: usize) {
        self.modify(i, QpState::Rts, rts_mask()).unwrap();
    }

    fn connect(&mut self) {
        for i in [A, B] {
            self.move_to_init(i);
            self.move_to_rtr(i);
            self.move_to_rts(i);
        }
    }

    fn state(&mut self, i: usize) -> QpState {
        let qpn = self.s[i].qpn;
        self.e(i).qp_state(qpn).unwrap()
    }

    fn reg(&mut self, i: usize, buf: &HostBuffer, access: AccessFlags) -> u32 {
        let pd = self.s[i].pd;
        self.e(i).reg_mr(pd, buf.region(), access).unwrap()
    }

    /// A transfer's buffers: `len` bytes of pattern `seed` and a source
    /// buffer holding them registered on A, a destination of as many zeroes
    /// registered on B, and A's send CQ, as (bytes, source, destination,
    /// source key, destination key, CQ).
    fn bufs(&mut self, len: usize, seed: u8) -> (Vec<u8>, HostBuffer, HostBuffer, u32, u32, Arc<Cq>) {
        let data = pattern(len, seed);
        let src = HostBuffer::from_bytes(&data);
        let dst = HostBuffer::new(len);
        let ks = self.reg(A, &src, RW);
        let kd = self.reg(B, &dst, RW);
        let scq = self.s[A].scq.clone();
        (data, src, dst, ks, kd, scq)
    }

    fn post(&mut self, i: usize, wr_id: u64, op: SendOp, sge: Sge) {
        let qpn = self.s[i].qpn;
        let wr = SendWr {
            wr_id,
            op,
            sg_list: &[sge],
            signaled: true,
        };
        self.post_send(i, qpn, &wr).unwrap();
    }

    fn recv(&mut self, i: usize, wr_id: u64, sge: Sge) {
        let qpn = self.s[i].qpn;
        self.e(i)
            .post_recv(
                qpn,
                &RecvWr {
                    wr_id,
                    sg_list: &[sge],
                },
            )
            .unwrap();
    }

    /// Runs until `cq` holds `n` completions (or a minute of virtual time).
    fn wait(&mut self, cq: &Arc<Cq>, n: usize) -> Vec<WorkCompletion> {
        let cq2 = cq.clone();
        self.net
            .run_until(Duration::from_secs(60), move |_| cq2.len() >= n);
        drain(cq)
    }

    fn qpn(&self, i: usize) -> u32 {
        self.s[i].qpn
    }
}

fn drain(cq: &Cq) -> Vec<WorkCompletion> {
    let mut out = vec![blank(); 64];
    let mut all = Vec::new();
    loop {
        let n = cq.poll(&mut out).unwrap();
        if n == 0 {
            return all;
        }
        all.extend_from_slice(&out[..n]);
    }
}

fn blank() -> WorkCompletion {
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

fn init_mask() -> QpAttrMask {
    use QpAttrMask as M;
    M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS
}

fn rtr_mask() -> QpAttrMask {
    use QpAttrMask as M;
    M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER
}

fn rts_mask() -> QpAttrMask {
    use QpAttrMask as M;
    M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC
}

fn sge(buf: &HostBuffer, key: u32) -> Sge {
    Sge {
        addr: buf.addr(),
        length: buf.len() as u32,
        lkey: key,
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(7) as u8 ^ seed)
        .collect()
}

fn ok(wc: &WorkCompletion, wr_id: u64, opcode: WcOpcode) {
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (wr_id, WcStatus::Success, opcode),
        "{wc:?}"
    );
}

fn write_op(buf: &HostBuffer, rkey: u32) -> SendOp {
    SendOp::Write {
        remote_addr: buf.addr(),
        rkey,
    }
}

fn read_op(buf: &HostBuffer, rkey: u32) -> SendOp {
    SendOp::Read {
        remote_addr: buf.addr(),
        rkey,
    }
}

#[test]
fn qp_state_machine_refuses_illegal_transitions_and_masks() {
    let mut f = Fx::new();
    // Skipping INIT, or a short mask, fails as ibv_modify_qp does.
    assert!(f.modify(A, QpState::Rtr, rtr_mask()).is_err());
    assert!(
        f.modify(A, QpState::Init, QpAttrMask::STATE | QpAttrMask::PORT)
            .is_err()
    );
    assert_eq!(f.state(A), QpState::Reset);
    // Posting needs the right state.
    let buf = HostBuffer::new(8);
    let key = f.reg(A, &buf, RW);
    let qpn = f.qpn(A);
    let recv = RecvWr {
        wr_id: 1,
        sg_list: &[sge(&buf, key)],
    };
    assert!(f.e(A).post_recv(qpn, &recv).is_err(), "post_recv in RESET");
    f.move_to_init(A);
    assert!(f.e(A).post_recv(qpn, &recv).is_ok(), "post_recv in INIT");
    let wr = SendWr {
        wr_id: 2,
        op: SendOp::Send,
        sg_list: &[sge(&buf, key)],
        signaled: true,
    };
    assert!(f.post_send(A, qpn, &wr).is_err(), "post_send in INIT");
    assert!(f.modify(A, QpState::Rts, rts_mask()).is_err(), "INIT -> RTS");
    f.move_to_rtr(A);
    assert!(f.post_send(A, qpn, &wr).is_err(), "post_send in RTR");
    // RTR -> RTS needs its attributes.
    assert!(f.modify(A, QpState::Rts, QpAttrMask::STATE).is_err());
    f.move_to_rts(A);
    assert_eq!(f.state(A), QpState::Rts);
    assert!(f.modify(A, QpState::Init, init_mask()).is_err(), "RTS -> INIT");
    // A destination GID that is not IPv4-mapped cannot be reached over RoCE v2.
    let mut g = Fx::new();
    g.move_to_init(A);
    let attr = QpAttr {
        qp_state: QpState::Rtr,
        dgid: Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
        ..g.attr.clone()
    };
    let qpn = g.qpn(A);
    assert!(g.modify_qp(A, qpn, &attr, rtr_mask()).is_err());
    // Anything -> ERR -> RESET.
    f.modify(A, QpState::Err, QpAttrMask::STATE).unwrap();
    assert_eq!(f.state(A), QpState::Err);
    f.modify(A, QpState::Reset, QpAttrMask::STATE).unwrap();
    assert_eq!(f.state(A), QpState::Reset);
}

fn unreachable_responder(state: QpState) {
    let mut f = Fx::new();
    f.move_to_init(A);
    f.move_to_rtr(A);
    f.move_to_rts(A);
    if state == QpState::Init {
        f.move_to_init(B);
    }
    let buf = HostBuffer::new(100);
    let key = f.reg(A, &buf, RW);
    let remote = HostBuffer::new(100);
    let rkey = f.reg(B, &remote, RW);
    let start = f.net.now();
    f.post(A, 7, write_op(&remote, rkey), sge(&buf, key));
    let scq = f.s[A].scq.clone();
    let wcs = f.wait(&scq, 1);
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (7, WcStatus::RetryExcErr));
    assert_eq!(wcs[0].qp_num, f.qpn(A));
    // The responder dropped the first try and each of retry_cnt retries, silently.
    let c = f.e(B).counters();
    assert_eq!(c.drop_qp_state, 1 + 7);
    assert_eq!(c.tx_datagrams, 0);
    assert_eq!(f.e(A).counters().timeouts, 1 + 7);
    // Each try waited one local ACK timeout, 4.096 us x 2^timeout.
    let per_try = Duration::from_nanos(4096 << TIMEOUT);
    let took = f.net.now().saturating_since(start);
    assert!(
        took >= per_try * 8 && took < per_try * 8 + Duration::from_millis(1),
        "{took:?}"
    );
    assert_eq!(f.state(A), QpState::Err);
    assert_eq!(remote.to_vec(), vec![0; 100]);
}

#[test]
fn reset_responder_drops_silently_and_requester_fails_with_retry_exceeded() {
    unreachable_responder(QpState::Reset);
}

#[test]
fn init_responder_drops_silently_and_requester_fails_with_retry_exceeded() {
    unreachable_responder(QpState::Init);
}

#[test]
fn one_sided_write_and_read_complete_only_at_the_requester() {
    let mut f = Fx::new();
    f.connect();
    let data = pattern(10_000, 1);
    let src = HostBuffer::from_bytes(&data);
    let dst = HostBuffer::new(10_000);
    let back = HostBuffer::new(10_000);
    let (ks, kb) = (f.reg(A, &src, RW), f.reg(A, &back, RW));
    let kd = f.reg(B, &dst, RW);
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    f.post(A, 2, read_op(&dst, kd), sge(&back, kb));
    let scq = f.s[A].scq.clone();
    let wcs = f.wait(&scq, 2);
    ok(&wcs[0], 1, WcOpcode::RdmaWrite);
    ok(&wcs[1], 2, WcOpcode::RdmaRead);
    assert_eq!(wcs[1].byte_len, 10_000);
    assert_eq!(dst.to_vec(), data);
    assert_eq!(back.to_vec(), data);
    f.net.drive(Duration::from_secs(1));
    assert!(
        f.s[B].scq.is_empty() && f.s[B].rcq.is_empty(),
        "no responder completion"
    );
}

/// A server's device holds a QP per binding, most of them idle. The
/// transmit path looks only at QPs an event gave something to send: three
/// hundred idle QPs in RTS on the responder's device are out of that queue
/// once they have been looked at, and a transfer on the one busy QP runs
/// as on a device of its own.
#[test]
fn idle_qps_leave_the_transmit_queue_and_a_busy_one_still_runs() {
    let mut f = Fx::new();
    f.connect();
    for n in 0..300u32 {
        let idle = side(f.e(B), 16);
        let attr = QpAttr {
            dest_qp_num: 0x1000 + n,
            dgid: Gid::from_ipv4(ip(A)),
            ..f.attr.clone()
        };
        f.bring_up(B, idle.qpn, &attr);
    }
    assert!(f.e(B).ready_qps() >= 300, "a state change wakes a QP");
    let data = pattern(1 << 20, 3);
    let src = HostBuffer::from_bytes(&data);
    let dst = HostBuffer::new(1 << 20);
    let back = HostBuffer::new(1 << 20);
    let (ks, kb) = (f.reg(A, &src, RW), f.reg(A, &back, RW));
    let kd = f.reg(B, &dst, RW);
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    f.post(A, 2, read_op(&dst, kd), sge(&back, kb));
    let scq = f.s[A].scq.clone();
    let wcs = f.wait(&scq, 2);
    ok(&wcs[0], 1, WcOpcode::RdmaWrite);
    ok(&wcs[1], 2, WcOpcode::RdmaRead);
    assert_eq!(dst.to_vec(), data);
    assert_eq!(back.to_vec(), data);
    f.net.drive(Duration::from_secs(1));
    assert_eq!(f.e(B).ready_qps(), 0, "idle QPs stayed in the transmit queue");
    assert_eq!(f.e(A).ready_qps(), 0);
}

#[test]
fn write_with_imm_and_send_consume_posted_receives() {
    let mut f = Fx::new();
    f.connect();
    let src = HostBuffer::from_bytes(&pattern(6000, 2));
    let dst = HostBuffer::new(6000);
    let rbuf = HostBuffer::new(8192);
    let ks = f.reg(A, &src, RW);
    let kd = f.reg(B, &dst, RW);
    let kr = f.reg(B, &rbuf, RW);
    f.recv(B, 100, sge(&rbuf, kr));
    f.recv(B, 101, sge(&rbuf, kr));
    f.post(
        A,
        1,
        SendOp::WriteWithImm {
            remote_addr: dst.addr(),
            rkey: kd,
            imm: 0xfeed,
        },
        sge(&src, ks),
    );
    f.post(A, 2, SendOp::SendWithImm { imm: 0xbeef }, sge(&src, ks));
    let rcq = f.s[B].rcq.clone();
    let wcs = f.wait(&rcq, 2);
    assert_eq!(wcs.len(), 2);
    ok(&wcs[0], 100, WcOpcode::RecvRdmaWithImm);
    assert_eq!(
        (wcs[0].byte_len, wcs[0].imm_data, wcs[0].qp_num),
        (6000, Some(0xfeed), f.qpn(B))
    );
    ok(&wcs[1], 101, WcOpcode::Recv);
    assert_eq!((wcs[1].byte_len, wcs[1].imm_data), (6000, Some(0xbeef)));
    assert_eq!(dst.to_vec(), src.to_vec());
    assert_eq!(&rbuf.to_vec()[..6000], &src.to_vec()[..]);
    let scq = f.s[A].scq.clone();
    let wcs = f.wait(&scq, 2);
    ok(&wcs[0], 1, WcOpcode::RdmaWrite);
    ok(&wcs[1], 2, WcOpcode::Send);
}

#[test]
fn send_without_receive_gets_rnr_naks_then_rnr_retry_exceeded() {
    let mut f = Fx::new();
    f.attr.rnr_retry = 2;
    f.connect();
    let src = HostBuffer::from_bytes(b"ping");
    let ks = f.reg(A, &src, RW);
    f.post(A, 9, SendOp::Send, sge(&src, ks));
    let scq = f.s[A].scq.clone();
    let wcs = f.wait(&scq, 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (9, WcStatus::RnrRetryExcErr));
    assert_eq!(
        f.e(B).counters().naks_rnr,
        3,
        "the first try and rnr_retry retries"
    );
    assert_eq!(f.state(A), QpState::Err);
    // The responder is fine: an RNR is not an error there.
    assert_eq!(f.state(B), QpState::Rts);
}

#[test]
fn a_receive_posted_during_rnr_backoff_is_used() {
    let mut f = Fx::new();
    f.connect();
    let src = HostBuffer::from_bytes(b"late receive");
    let rbuf = HostBuffer::new(64);
    let ks = f.reg(A, &src, RW);
    let kr = f.reg(B, &rbuf, RW);
    f.post(A, 1, SendOp::Send, sge(&src, ks));
    f.net
        .run_until(Duration::from_secs(1), |n| n.engine(B).counters().naks_rnr >= 2);
    f.recv(B, 5, sge(&rbuf, kr));
    let rcq = f.s[B].rcq.clone();
    let wcs = f.wait(&rcq, 1);
    ok(&wcs[0], 5, WcOpcode::Recv);
    assert_eq!(wcs[0].byte_len, 12);
    assert_eq!(&rbuf.to_vec()[..12], b"late receive");
}

/// Expects the WRITE or READ to fail with a remote access error at the
/// requester, the responder QP in ERR, and the remote memory untouched.
fn expect_access_error(f: &mut Fx, remote: &HostBuffer) {
    let scq = f.s[A].scq.clone();
    let wcs = f.wait(&scq, 1);
    assert_eq!(wcs[0].status, WcStatus::RemAccessErr, "{wcs:?}");
    assert_eq!(f.state(B), QpState::Err);
    assert_eq!(f.state(A), QpState::Err);
    assert_eq!(f.e(B).counters().naks_fatal, 1);
    assert!(remote.to_vec().iter().all(|&b| b == 0));
}

#[test]
fn bad_rkey_naks_with_remote_access_error() {
    let mut f = Fx::new();
    f.connect();
    let src = HostBuffer::from_bytes(&[1; 64]);
    let dst = HostBuffer::new(64);
    let ks = f.reg(A, &src, RW);
    let kd = f.reg(B, &dst, RW);
    f.post(A, 1, write_op(&dst, kd ^ 0x300), sge(&src, ks));
    expect_access_error(&mut f, &dst);
}

#[test]
fn out_of_bounds_write_naks_and_touches_nothing() {
    let mut f = Fx::new();
    f.connect();
    let src = HostBuffer::from_bytes(&[1; 64]);
    let dst = HostBuffer::new(64);
    let ks = f.reg(A, &src, RW);
    let kd = f.reg(B, &dst, RW);
    let op = SendOp::Write {
        remote_addr: dst.addr() + 1,
        rkey: kd,
    };
    f.post(A, 1, op, sge(&src, ks));
    expect_access_error(&mut f, &dst);
}

#[test]
fn write_needs_remote_write_on_the_mr() {
    let mut f = Fx::new();
    f.connect();
    let src = HostBuffer::from_bytes(&[1; 64]);
    let dst = HostBuffer::new(64);
    let ks = f.reg(A, &src, RW);
    let kd = f.reg(B, &dst, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ);
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    expect_access_error(&mut f, &dst);
}

#[test]
fn read_needs_remote_read_on_the_mr() {
    let mut f = Fx::new();
    f.connect();
    let back = HostBuffer::new(64);
    let remote = HostBuffer::new(64);
    let kb = f.reg(A, &back, RW);
    let kr = f.reg(B, &remote, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
    f.post(A, 1, read_op(&remote, kr), sge(&back, kb));
    expect_access_error(&mut f, &remote);
}

#[test]
fn write_needs_remote_write_on_the_responder_qp() {
    let mut f = Fx::new();
    f.attr.qp_access_flags = AccessFlags::REMOTE_READ;
    f.connect();
    let src = HostBuffer::from_bytes(&[1; 64]);
    let dst = HostBuffer::new(64);
    let ks = f.reg(A, &src, RW);
    let kd = f.reg(B, &dst, RW);
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    expect_access_error(&mut f, &dst);
}

#[test]
fn an_mr_of_another_pd_is_refused() {
    let mut f = Fx::new();
    f.connect();
    let src = HostBuffer::from_bytes(&[1; 64]);
    let dst = HostBuffer::new(64);
    let ks = f.reg(A, &src, RW);
    let other_pd = f.e(B).alloc_pd();
    let kd = f.e(B).reg_mr(other_pd, dst.region(), RW).unwrap();
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    expect_access_error(&mut f, &dst);
}

#[test]
fn a_deregistered_mr_accepts_nothing() {
    let mut f = Fx::new();
    f.connect();
    let src = HostBuffer::from_bytes(&[1; 64]);
    let dst = HostBuffer::new(64);
    let ks = f.reg(A, &src, RW);
    let kd = f.reg(B, &dst, RW);
    assert!(f.e(B).dereg_mr(kd));
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    expect_access_error(&mut f, &dst);
}

#[test]
fn deregistering_midway_stops_a_write() {
    let mut f = Fx::new();
    f.connect();
    let src = HostBuffer::from_bytes(&vec![7; 8 << 20]);
    let dst = HostBuffer::new(8 << 20);
    let ks = f.reg(A, &src, RW);
    let kd = f.reg(B, &dst, RW);
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    // Let some packets land, then deregister.
    f.net.run_until(Duration::from_secs(1), |n| {
        n.engine(B).counters().rx_datagrams >= 10
    });
    assert!(f.e(B).dereg_mr(kd));
    let landed = dst.to_vec().iter().filter(|&&b| b == 7).count();
    let scq = f.s[A].scq.clone();
    let wcs = f.wait(&scq, 1);
    assert_eq!(wcs[0].status, WcStatus::RemAccessErr);
    assert_eq!(
        dst.to_vec().iter().filter(|&&b| b == 7).count(),
        landed,
        "nothing after dereg"
    );
    assert!(landed > 0 && landed < 8 << 20, "{landed}");
}

#[test]
fn a_reset_qp_accepts_nothing() {
    let mut f = Fx::new();
    f.connect();
    let src = HostBuffer::from_bytes(&[1; 64]);
    let dst = HostBuffer::new(64);
    let ks = f.reg(A, &src, RW);
    let kd = f.reg(B, &dst, RW);
    f.modify(B, QpState::Reset, QpAttrMask::STATE).unwrap();
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    let scq = f.s[A].scq.clone();
    let wcs = f.wait(&scq, 1);
    assert_eq!(wcs[0].status, WcStatus::RetryExcErr);
    assert_eq!(dst.to_vec(), vec![0; 64]);
}

#[test]
fn psns_start_where_rtr_and_rts_set_them_and_wrap() {
    let mut f = Fx::new();
    f.attr.sq_psn = 0xff_fff0;
    f.attr.rq_psn = 0xff_fff0;
    f.connect();
    let data = pattern(40 * 4096, 3);
    let src = HostBuffer::from_bytes(&data);
    let dst = HostBuffer::new(data.len());
    let ks = f.reg(A, &src, RW);
    let kd = f.reg(B, &dst, RW);
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    let scq = f.s[A].scq.clone();
    ok(&f.wait(&scq, 1)[0], 1, WcOpcode::RdmaWrite);
    assert_eq!(dst.to_vec(), data);
}

/// A responder whose expected PSN is not where the requester starts never
/// executes anything: behind it, the packets are duplicates (acknowledged
/// with a PSN the requester never sent); ahead of it, they are sequence
/// errors (NAKed with a PSN the requester never sent). Either way the
/// requester ends in RETRY_EXC_ERR.
fn mismatched_psns(rq_psn: u32) -> crate::engine::Counters {
    let mut f = Fx::new();
    f.attr.sq_psn = 1000;
    f.attr.rq_psn = 1000;
    for i in [A, B] {
        f.move_to_init(i);
    }
    f.move_to_rtr(A);
    f.move_to_rts(A);
    let attr = QpAttr {
        qp_state: QpState::Rtr,
        rq_psn,
        dest_qp_num: f.qpn(A),
        dgid: Gid::from_ipv4(ip(A)),
        ..f.attr.clone()
    };
    let qpn = f.qpn(B);
    f.modify_qp(B, qpn, &attr, rtr_mask()).unwrap();
    let src = HostBuffer::from_bytes(&[1; 64]);
    let dst = HostBuffer::new(64);
    let ks = f.reg(A, &src, RW);
    let kd = f.reg(B, &dst, RW);
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    let scq = f.s[A].scq.clone();
    let wcs = f.wait(&scq, 1);
    assert_eq!(wcs[0].status, WcStatus::RetryExcErr);
    assert_eq!(dst.to_vec(), vec![0; 64]);
    f.e(B).counters()
}

#[test]
fn a_responder_expecting_a_later_psn_treats_packets_as_duplicates() {
    let c = mismatched_psns(5000);
    assert_eq!((c.duplicates, c.out_of_sequence), (8, 0), "{c:?}");
}

#[test]
fn a_responder_expecting_an_earlier_psn_naks_a_sequence_error_once() {
    let c = mismatched_psns(10);
    assert_eq!((c.out_of_sequence, c.naks_sequence), (8, 1), "{c:?}");
}

/// Builds a request datagram from A to B's QP.
fn request(f: &Fx, opcode: Opcode, psn: u32, reth: Option<RethRepr>, payload: &[u8]) -> Vec<u8> {
    let h = Headers {
        bth: BthRepr {
            opcode,
            solicited: false,
            pad_count: 0,
            pkey: DEFAULT_PKEY,
            dest_qp: f.qpn(B),
            ack_req: true,
            psn,
        },
        reth,
        aeth: None,
        imm: None,
    };
    let mut buf = vec![0; h.datagram_len(payload.len())];
    let pseudo = PseudoHeader {
        src: addr(A),
        dst: addr(B),
    };
    h.emit(payload.len(), &pseudo, &mut buf, |p| p.copy_from_slice(payload))
        .unwrap();
    buf
}

/// The ACKs and NAKs B sends, as (PSN, AETH), by taking them off B directly.
fn acks_from_b(f: &mut Fx) -> Vec<(u32, AethRepr)> {
    let mut out = Vec::new();
    let mut buf = vec![0; crate::wire::MAX_PACKET];
    let now = f.net.now();
    while let Some(t) = f.e(B).poll_transmit(now, &mut buf) {
        let pseudo = PseudoHeader {
            src: addr(B),
            dst: t.dst,
        };
        let p = Packet::parse(&buf[..t.len], &pseudo).unwrap();
        if let Some(a) = p.headers.aeth {
            out.push((p.headers.bth.psn, a));
        }
    }
    out
}

#[test]
fn responder_checks_psns_expected_duplicate_and_ahead() {
    use crate::wire::Syndrome;
    let mut f = Fx::new();
    f.attr.rq_psn = 50;
    f.connect();
    let dst = HostBuffer::new(16);
    let kd = f.reg(B, &dst, RW);
    let reth = |len| {
        Some(RethRepr {
            va: dst.addr(),
            rkey: kd,
            dma_len: len,
        })
    };
    let now = f.net.now();
    // Expected PSN: executed and acknowledged.
    let d = request(&f, Opcode::WriteOnly, 50, reth(4), b"abcd");
    f.e(B).handle_datagram(now, addr(A), &d);
    assert_eq!(&dst.to_vec()[..4], b"abcd");
    let acks = acks_from_b(&mut f);
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].0, 50);
    assert!(matches!(acks[0].1.syndrome, Syndrome::Ack { .. }));
    // Duplicate (PSN 50 again, other bytes): acknowledged, not executed.
    let d = request(&f, Opcode::WriteOnly, 50, reth(4), b"XXXX");
    f.e(B).handle_datagram(now, addr(A), &d);
    assert_eq!(&dst.to_vec()[..4], b"abcd");
    assert_eq!(f.e(B).counters().duplicates, 1);
    // A duplicate is a sign of loss: from now on each ACK goes out twice.
    let acks = acks_from_b(&mut f);
    assert_eq!(acks.len(), 2);
    assert!(acks.iter().all(|a| a.0 == 50));
    // Ahead (PSN 53 and 54): one sequence-error NAK naming 51, nothing executed.
    for p in [53, 54] {
        let d = request(&f, Opcode::WriteOnly, p, reth(4), b"YYYY");
        f.e(B).handle_datagram(now, addr(A), &d);
    }
    assert_eq!(&dst.to_vec()[..4], b"abcd");
    let acks = acks_from_b(&mut f);
    assert_eq!(
        acks.len(),
        2,
        "one NAK, sent twice on a link that loses: {acks:?}"
    );
    assert!(
        acks.iter()
            .all(|a| (a.0, a.1.syndrome) == (51, Syndrome::NakSequence))
    );
    let c = f.e(B).counters();
    assert_eq!((c.out_of_sequence, c.naks_sequence), (2, 1));
    // The expected PSN then goes through, and the next gap NAKs again.
    let d = request(&f, Opcode::WriteOnly, 51, reth(4), b"efgh");
    f.e(B).handle_datagram(now, addr(A), &d);
    assert_eq!(&dst.to_vec()[..4], b"efgh");
    let d = request(&f, Opcode::WriteOnly, 60, reth(4), b"ZZZZ");
    f.e(B).handle_datagram(now, addr(A), &d);
    let acks = acks_from_b(&mut f);
    assert_eq!(
        acks.last().map(|a| (a.0, a.1.syndrome)),
        Some((52, Syndrome::NakSequence))
    );
}

#[test]
fn a_bad_opcode_sequence_is_an_invalid_request() {
    let mut f = Fx::new();
    f.connect();
    let dst = HostBuffer::new(8192);
    let kd = f.reg(B, &dst, RW);
    let _ = kd;
    let now = f.net.now();
    // A WRITE Middle with no First before it.
    let d = request(&f, Opcode::WriteMiddle, 0, None, &[1; 4096]);
    f.e(B).handle_datagram(now, addr(A), &d);
    assert_eq!(f.state(B), QpState::Err);
    let acks = acks_from_b(&mut f);
    assert_eq!(acks[0].1.syndrome, crate::wire::Syndrome::NakInvalidRequest);
    assert!(dst.to_vec().iter().all(|&b| b == 0));
}

#[test]
fn malformed_datagrams_are_dropped_counted_and_touch_nothing() {
    let mut f = Fx::new();
    f.connect();
    let dst = HostBuffer::new(64);
    let kd = f.reg(B, &dst, RW);
    let now = f.net.now();
    let reth = Some(RethRepr {
        va: dst.addr(),
        rkey: kd,
        dma_len: 4,
    });
    let good = request(&f, Opcode::WriteOnly, 0, reth, b"good");
    // Truncated at every length.
    for cut in 0..good.len() {
        f.e(B).handle_datagram(now, addr(A), &good[..cut]);
    }
    // Wrong ICRC.
    let mut bad = good.clone();
    bad[20] ^= 1;
    f.e(B).handle_datagram(now, addr(A), &bad);
    // The right bytes from the wrong source address fail the ICRC too.
    f.e(B)
        .handle_datagram(now, SocketAddrV4::new(Ipv4Addr::new(127, 9, 9, 9), 4791), &good);
    // Unknown opcode (resealed so that only the opcode is wrong).
    let mut bad = good.clone();
    bad[0] = 0x14;
    PseudoHeader {
        src: addr(A),
        dst: addr(B),
    }
    .seal(&mut bad);
    f.e(B).handle_datagram(now, addr(A), &bad);
    // Oversized.
    f.e(B).handle_datagram(now, addr(A), &vec![0; 9000]);
    let c = f.e(B).counters();
    // A cut datagram fails the size check or, past it, the ICRC.
    assert_eq!(c.malformed(), good.len() as u64 + 2 + 1 + 1, "{c:?}");
    assert!(c.drop_truncated >= 16 && c.drop_bad_icrc >= 2, "{c:?}");
    assert_eq!(c.drop_bad_opcode, 1);
    assert_eq!(c.drop_oversized, 1);
    assert_eq!(dst.to_vec(), vec![0; 64]);
    assert_eq!(f.state(B), QpState::Rts);
    // The good one still works afterwards.
    f.e(B).handle_datagram(now, addr(A), &good);
    assert_eq!(&dst.to_vec()[..4], b"good");
}

#[test]
fn err_flushes_outstanding_work_requests_in_order() {
    let mut f = Fx::new();
    f.connect();
    let src = HostBuffer::from_bytes(&[1; 64]);
    let dst = HostBuffer::new(64);
    let ks = f.reg(A, &src, RW);
    let kd = f.reg(B, &dst, RW);
    for id in 1..=3 {
        f.post(A, id, write_op(&dst, kd), sge(&src, ks));
    }
    f.recv(A, 10, sge(&src, ks));
    f.modify(A, QpState::Err, QpAttrMask::STATE).unwrap();
    let wcs = drain(&f.s[A].scq);
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert!(wcs.iter().all(|w| w.status == WcStatus::WrFlushErr));
    let wcs = drain(&f.s[A].rcq);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (10, WcStatus::WrFlushErr));
    // Posting in ERR completes at once with a flush error.
    f.post(A, 4, write_op(&dst, kd), sge(&src, ks));
    let wcs = drain(&f.s[A].scq);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (4, WcStatus::WrFlushErr));
    f.net.drive(Duration::from_secs(1));
    assert_eq!(dst.to_vec(), vec![0; 64]);
}

#[test]
fn a_cq_overrun_is_an_error() {
    let mut f = Fx::with(Mtu::Mtu4096, FaultConfig::NONE, 2);
    f.connect();
    let src = HostBuffer::from_bytes(&[1; 64]);
    let dst = HostBuffer::new(64);
    let ks = f.reg(A, &src, RW);
    let kd = f.reg(B, &dst, RW);
    for id in 1..=3 {
        f.post(A, id, write_op(&dst, kd), sge(&src, ks));
    }
    f.net.drive(Duration::from_secs(1));
    let mut out = [blank(); 4];
    assert!(f.s[A].scq.poll(&mut out).is_err());
    assert_eq!(f.e(A).counters().cq_overruns, 1);
}

#[test]
fn a_send_longer_than_the_receive_is_a_local_length_error() {
    let mut f = Fx::new();
    f.connect();
    let src = HostBuffer::from_bytes(&[1; 100]);
    let small = HostBuffer::new(10);
    let ks = f.reg(A, &src, RW);
    let kr = f.reg(B, &small, RW);
    f.recv(B, 3, sge(&small, kr));
    f.post(A, 1, SendOp::Send, sge(&src, ks));
    let scq = f.s[A].scq.clone();
    let wcs = f.wait(&scq, 1);
    assert_eq!(wcs[0].status, WcStatus::RemInvReqErr);
    let wcs = drain(&f.s[B].rcq);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (3, WcStatus::LocLenErr));
    assert_eq!(small.to_vec(), vec![0; 10]);
}

#[test]
fn multi_packet_send_scatters_over_several_entries() {
    let mut f = Fx::with(Mtu::Mtu1024, FaultConfig::NONE, 64);
    f.connect();
    let data = pattern(5000, 9);
    let src = HostBuffer::from_bytes(&data);
    let r1 = HostBuffer::new(3000);
    let r2 = HostBuffer::new(3000);
    let ks = f.reg(A, &src, RW);
    let (k1, k2) = (f.reg(B, &r1, RW), f.reg(B, &r2, RW));
    let qpn = f.qpn(B);
    let sg = [sge(&r1, k1), sge(&r2, k2)];
    f.e(B)
        .post_recv(
            qpn,
            &RecvWr {
                wr_id: 1,
                sg_list: &sg,
            },
        )
        .unwrap();
    f.post(A, 1, SendOp::Send, sge(&src, ks));
    let rcq = f.s[B].rcq.clone();
    let wcs = f.wait(&rcq, 1);
    ok(&wcs[0], 1, WcOpcode::Recv);
    assert_eq!(wcs[0].byte_len, 5000);
    let mut got = r1.to_vec();
    got.extend_from_slice(&r2.to_vec()[..2000]);
    assert_eq!(got, data);
}

/// WRITEs `len` bytes from A to B and READs them back, checking every byte.
fn round_trip(mtu: Mtu, loss: f64, len: usize, seed: u64) {
    let faults = FaultConfig::loss(loss, seed);
    let mut f = Fx::with(mtu, faults, 64);
    f.net.trace = std::env::var_os("SOFTROCE_TRACE").is_some();
    f.connect();
    let data = pattern(len, seed as u8);
    let src = HostBuffer::from_bytes(&data);
    let dst = HostBuffer::new(len);
    let back = HostBuffer::new(len);
    let (ks, kb) = (f.reg(A, &src, RW), f.reg(A, &back, RW));
    let kd = f.reg(B, &dst, RW);
    // A first message, so that the requester has heard the responder once
    // (before that only the local ACK timeout can recover a loss).
    let scq = f.s[A].scq.clone();
    let one = Sge {
        length: 1,
        ..sge(&src, ks)
    };
    f.post(A, 9, write_op(&dst, kd), one);
    assert_eq!(f.wait(&scq, 1)[0].status, WcStatus::Success);
    let timeouts_before = f.e(A).counters().timeouts;
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    f.post(A, 2, read_op(&dst, kd), sge(&back, kb));
    let wcs = f.wait(&scq, 2);
    let what = format!(
        "mtu {} loss {loss} len {len}\nA {:?}\nB {:?}",
        mtu.bytes(),
        f.e(A).counters(),
        f.e(B).counters()
    );
    assert_eq!(wcs.len(), 2, "{what}: {wcs:?}");
    assert!(
        wcs.iter().all(|w| w.status == WcStatus::Success),
        "{what}: {wcs:?}"
    );
    ok(&wcs[0], 1, WcOpcode::RdmaWrite);
    ok(&wcs[1], 2, WcOpcode::RdmaRead);
    assert!(dst.to_vec() == data, "{what}: WRITE bytes differ");
    assert!(back.to_vec() == data, "{what}: READ bytes differ");
    if loss > 0.0 && len > 100_000 {
        assert!(
            f.net.faults().counts().dropped > 0,
            "{what}: loss knob did nothing"
        );
    }
    // Loss is recovered from by NAKs and the round-trip timer; the local
    // ACK timeout (4.2 ms here, 67 ms in hipObject) is for a peer that
    // stopped answering, and a lossy link that answers never reaches it.
    assert_eq!(f.e(A).counters().timeouts, timeouts_before, "{what}");
}

#[test]
fn transfers_are_exact_from_1_byte_to_4_mib_at_each_mtu_and_loss() {
    for mtu in [Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096] {
        for loss in [0.0, 0.01, 0.1] {
            for (i, len) in [1, 3, 1023, 1024, 1025, 4096 * 3 + 5, 1 << 20, 4 << 20]
                .into_iter()
                .enumerate()
            {
                round_trip(mtu, loss, len, 1 + i as u64);
            }
        }
    }
}

#[test]
fn transfers_of_64_mib_are_exact_at_0_1_and_10_percent_loss() {
    for loss in [0.0, 0.01, 0.1] {
        round_trip(Mtu::Mtu4096, loss, 64 << 20, 77);
    }
}

#[test]
fn duplication_and_reordering_still_deliver_exact_bytes() {
    let faults = FaultConfig {
        loss: 0.02,
        dup: 0.05,
        reorder: 0.05,
        seed: 5,
    };
    let mut f = Fx::with(Mtu::Mtu2048, faults, 64);
    f.connect();
    let data = pattern(3 << 20, 4);
    let src = HostBuffer::from_bytes(&data);
    let dst = HostBuffer::new(data.len());
    let back = HostBuffer::new(data.len());
    let (ks, kb) = (f.reg(A, &src, RW), f.reg(A, &back, RW));
    let kd = f.reg(B, &dst, RW);
    for round in 0..3 {
        f.post(A, round * 2, write_op(&dst, kd), sge(&src, ks));
        f.post(A, round * 2 + 1, read_op(&dst, kd), sge(&back, kb));
    }
    let scq = f.s[A].scq.clone();
    let wcs = f.wait(&scq, 6);
    assert_eq!(wcs.len(), 6, "{wcs:?}");
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(
        wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        (0..6).collect::<Vec<_>>()
    );
    assert!(dst.to_vec() == data && back.to_vec() == data);
    let c = f.net.faults().counts();
    assert!(c.duplicated > 0 && c.delayed > 0, "{c:?}");
}

#[test]
fn the_requester_keeps_a_window_in_flight() {
    let mut f = Fx::new();
    f.connect();
    let src = HostBuffer::new(4 << 20);
    let dst = HostBuffer::new(4 << 20);
    let ks = f.reg(A, &src, RW);
    let kd = f.reg(B, &dst, RW);
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    let scq = f.s[A].scq.clone();
    let start = f.net.now();
    f.wait(&scq, 1);
    // 1024 packets with a 256-packet window take a few round trips, not 1024.
    let rtts = f.net.now().saturating_since(start).as_nanos() / (2 * LATENCY.as_nanos());
    assert!(rtts <= 8, "{rtts} round trips");
}

#[test]
fn virtual_time_starts_at_zero() {
    let f = Fx::new();
    assert_eq!(f.net.now(), Time::ZERO);
}

/// An ACK or NAK datagram from B's QP to A's.
fn ack_to_a(f: &Fx, psn: u32, syndrome: crate::wire::Syndrome, msn: u32) -> Vec<u8> {
    let h = Headers {
        bth: BthRepr {
            opcode: Opcode::Acknowledge,
            solicited: false,
            pad_count: 0,
            pkey: DEFAULT_PKEY,
            dest_qp: f.qpn(A),
            ack_req: false,
            psn,
        },
        reth: None,
        aeth: Some(AethRepr { syndrome, msn }),
        imm: None,
    };
    let mut buf = vec![0; h.datagram_len(0)];
    let pseudo = PseudoHeader {
        src: addr(B),
        dst: addr(A),
    };
    h.emit(0, &pseudo, &mut buf, |_| {}).unwrap();
    buf
}

/// Takes the next datagram engine `from` has to send now, if any, and hands
/// it to the other engine if `keep` accepts it; returns its (opcode, PSN).
fn step(f: &mut Fx, from: usize, keep: impl FnOnce(Opcode, u32) -> bool) -> Option<(Opcode, u32)> {
    let now = f.net.now();
    let mut buf = vec![0; crate::wire::MAX_PACKET];
    let t = f.e(from).poll_transmit(now, &mut buf)?;
    let pseudo = PseudoHeader {
        src: addr(from),
        dst: t.dst,
    };
    let bth = Packet::parse(&buf[..t.len], &pseudo).unwrap().headers.bth;
    if keep(bth.opcode, bth.psn) {
        f.e(1 - from).handle_datagram(now, addr(from), &buf[..t.len]);
    }
    Some((bth.opcode, bth.psn))
}

/// Takes every datagram engine `from` has to send now and hands to the other
/// engine those `keep` accepts; returns (opcode, PSN) of each taken.
fn pump(f: &mut Fx, from: usize, mut keep: impl FnMut(Opcode, u32) -> bool) -> Vec<(Opcode, u32)> {
    let mut taken = Vec::new();
    while let Some(x) = step(f, from, &mut keep) {
        taken.push(x);
    }
    taken
}

#[test]
fn a_duplicate_does_not_overwrite_a_queued_sequence_nak() {
    use crate::wire::Syndrome;
    let mut f = Fx::new();
    f.attr.rq_psn = 10;
    f.connect();
    let dst = HostBuffer::new(16);
    let kd = f.reg(B, &dst, RW);
    let reth = Some(RethRepr {
        va: dst.addr(),
        rkey: kd,
        dma_len: 4,
    });
    let now = f.net.now();
    let d = request(&f, Opcode::WriteOnly, 10, reth, b"abcd");
    f.e(B).handle_datagram(now, addr(A), &d);
    acks_from_b(&mut f);
    // One batch: 12 (11 was lost), then a duplicate of 10.
    for p in [12, 10] {
        let d = request(&f, Opcode::WriteOnly, p, reth, b"XXXX");
        f.e(B).handle_datagram(now, addr(A), &d);
    }
    let acks: Vec<_> = acks_from_b(&mut f)
        .into_iter()
        .map(|(p, a)| (p, a.syndrome))
        .collect();
    // The NAK for the gap goes out (it acknowledges 10 too); it is the only
    // one this gap gets, so losing it would leave the requester to its timer.
    assert!(acks.contains(&(11, Syndrome::NakSequence)), "{acks:?}");
    assert_eq!(f.e(B).counters().naks_sequence, 1);
    assert_eq!(&dst.to_vec()[..4], b"abcd");
}

#[test]
fn an_ack_past_a_read_with_lost_responses_sends_the_read_again() {
    let mut f = Fx::new();
    f.connect();
    let data = pattern(8192, 3);
    let remote = HostBuffer::from_bytes(&data);
    let back = HostBuffer::new(8192);
    let small = HostBuffer::from_bytes(b"tail");
    let sink = HostBuffer::new(4);
    let kr = f.reg(B, &remote, RW);
    let ks = f.reg(B, &sink, RW);
    let kb = f.reg(A, &back, RW);
    let kl = f.reg(A, &small, RW);
    // A READ of two response packets (PSNs 0 and 1), then a WRITE (PSN 2).
    f.post(A, 1, read_op(&remote, kr), sge(&back, kb));
    f.post(A, 2, write_op(&sink, ks), sge(&small, kl));
    let sent = pump(&mut f, A, |_, _| true);
    assert_eq!(sent, vec![(Opcode::ReadRequest, 0), (Opcode::WriteOnly, 2)]);
    // The READ's last response is lost; the ACK of the WRITE arrives.
    let got = pump(&mut f, B, |op, _| op != Opcode::ReadResponseLast);
    assert_eq!(
        got,
        vec![
            (Opcode::ReadResponseFirst, 0),
            (Opcode::ReadResponseLast, 1),
            (Opcode::Acknowledge, 2)
        ]
    );
    // That ACK says the response was lost: the READ goes out again from it,
    // at once, not after the local ACK timeout (go-back-N: the WRITE too).
    let again = pump(&mut f, A, |_, _| true);
    assert_eq!(again[0], (Opcode::ReadRequest, 1));
    pump(&mut f, B, |_, _| true);
    let wcs = drain(&f.s[A].scq);
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    ok(&wcs[0], 1, WcOpcode::RdmaRead);
    ok(&wcs[1], 2, WcOpcode::RdmaWrite);
    assert!(back.to_vec() == data);
    assert_eq!(&sink.to_vec(), b"tail");
    assert_eq!(f.e(A).counters().timeouts, 0);
}

#[test]
fn a_later_reads_response_does_not_complete_an_earlier_read_with_a_hole() {
    let mut f = Fx::new();
    f.connect();
    let one = pattern(8192, 5);
    let two = pattern(4096, 6);
    let (r1, r2) = (HostBuffer::from_bytes(&one), HostBuffer::from_bytes(&two));
    let (b1, b2) = (HostBuffer::new(8192), HostBuffer::new(4096));
    let (k1, k2) = (f.reg(B, &r1, RW), f.reg(B, &r2, RW));
    let (kb1, kb2) = (f.reg(A, &b1, RW), f.reg(A, &b2, RW));
    f.post(A, 1, read_op(&r1, k1), sge(&b1, kb1));
    f.post(A, 2, read_op(&r2, k2), sge(&b2, kb2));
    pump(&mut f, A, |_, _| true);
    // The first READ's last response (PSN 1) is lost; the second's arrives.
    pump(&mut f, B, |_, p| p != 1);
    assert!(drain(&f.s[A].scq).is_empty(), "the first READ has a hole");
    let again = pump(&mut f, A, |_, _| true);
    assert_eq!(again[0], (Opcode::ReadRequest, 1));
    pump(&mut f, B, |_, _| true);
    pump(&mut f, A, |_, _| true);
    pump(&mut f, B, |_, _| true);
    let wcs = drain(&f.s[A].scq);
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    ok(&wcs[0], 1, WcOpcode::RdmaRead);
    ok(&wcs[1], 2, WcOpcode::RdmaRead);
    assert!(b1.to_vec() == one && b2.to_vec() == two);
}

#[test]
fn a_sequence_nak_spends_a_retry() {
    use crate::wire::Syndrome;
    // With retry_cnt 0 the requester may not retry at all: a sequence NAK
    // ends the work request with RETRY_EXC_ERR at once.
    let mut f = Fx::new();
    f.attr.retry_cnt = 0;
    f.connect();
    let src = HostBuffer::from_bytes(&[7; 64]);
    let dst = HostBuffer::new(64);
    let ks = f.reg(A, &src, RW);
    let kd = f.reg(B, &dst, RW);
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    f.post(A, 2, write_op(&dst, kd), sge(&src, ks));
    // PSN 0 is lost, PSN 1 arrives: B NAKs with PSN 0.
    pump(&mut f, A, |_, p| p != 0);
    let back = pump(&mut f, B, |_, _| true);
    // The NAK goes out twice (B has seen loss); the copy is not a new retry.
    assert_eq!(back, vec![(Opcode::Acknowledge, 0), (Opcode::Acknowledge, 0)]);
    let wcs = drain(&f.s[A].scq);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(f.e(A).counters().timeouts, 0);
    // With retry_cnt 1, the NAK spends the one retry and the next local ACK
    // timeout ends it (one timeout, where a NAK that spent nothing would
    // leave two).
    let mut f = Fx::new();
    f.attr.retry_cnt = 1;
    f.connect();
    let ks = f.reg(A, &src, RW);
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    pump(&mut f, A, |_, _| false);
    let nak = ack_to_a(&f, 0, Syndrome::NakSequence, 0);
    let now = f.net.now();
    f.e(A).handle_datagram(now, addr(B), &nak);
    // A duplicate of the same NAK, before any progress, is not a new retry.
    f.e(A).handle_datagram(now, addr(B), &nak);
    // The one retry: its packet goes out twice (the first one sent again).
    assert_eq!(
        pump(&mut f, A, |_, _| false),
        vec![(Opcode::WriteOnly, 0), (Opcode::WriteOnly, 0)]
    );
    let scq = f.s[A].scq.clone();
    let wcs = f.wait(&scq, 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::RetryExcErr));
    assert_eq!(f.e(A).counters().timeouts, 1);
}

#[test]
fn a_duplicate_reads_responses_carry_the_msn_it_was_executed_with() {
    let mut f = Fx::new();
    f.connect();
    let src = HostBuffer::from_bytes(&pattern(64, 2));
    let dst = HostBuffer::new(16);
    let (ks, kd) = (f.reg(B, &src, RW), f.reg(B, &dst, RW));
    let now = f.net.now();
    let read = request(
        &f,
        Opcode::ReadRequest,
        0,
        Some(RethRepr {
            va: src.addr(),
            rkey: ks,
            dma_len: 64,
        }),
        &[],
    );
    f.e(B).handle_datagram(now, addr(A), &read);
    let first = acks_from_b(&mut f);
    assert_eq!((first[0].0, first[0].1.msn), (0, 1));
    // Two WRITEs complete messages 2 and 3.
    for p in [1, 2] {
        let reth = Some(RethRepr {
            va: dst.addr(),
            rkey: kd,
            dma_len: 4,
        });
        let d = request(&f, Opcode::WriteOnly, p, reth, b"abcd");
        f.e(B).handle_datagram(now, addr(A), &d);
    }
    let acks = acks_from_b(&mut f);
    assert_eq!(acks.last().map(|a| (a.0, a.1.msn)), Some((2, 3)));
    // The READ again (its response was lost): answered with MSN 1 again
    // (its one response twice, as the first response to a READ asked again
    // always goes out).
    f.e(B).handle_datagram(now, addr(A), &read);
    let again = acks_from_b(&mut f);
    assert_eq!(again.len(), 2);
    assert!(again.iter().all(|a| (a.0, a.1.msn) == (0, 1)), "{again:?}");
    assert_eq!(f.e(B).counters().duplicates, 1);
}

#[test]
fn a_lost_tail_is_sent_again_after_a_few_round_trips_not_the_ack_timeout() {
    let mut f = Fx::new();
    f.connect();
    let data = pattern(8192, 8);
    let src = HostBuffer::from_bytes(&data);
    let dst = HostBuffer::new(8192);
    let ks = f.reg(A, &src, RW);
    let kd = f.reg(B, &dst, RW);
    // A first WRITE measures the round trip (10 us on this link).
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    let scq = f.s[A].scq.clone();
    ok(&f.wait(&scq, 1)[0], 1, WcOpcode::RdmaWrite);
    dst.write(0, &[0; 8192]);
    // The second WRITE's last packet is lost: nothing after it can make the
    // responder NAK, and no ACK comes.
    f.post(A, 2, write_op(&dst, kd), sge(&src, ks));
    let sent = pump(&mut f, A, |_, p| p != 3);
    assert_eq!(sent, vec![(Opcode::WriteFirst, 2), (Opcode::WriteLast, 3)]);
    let start = f.net.now();
    let wcs = f.wait(&scq, 1);
    ok(&wcs[0], 2, WcOpcode::RdmaWrite);
    assert!(dst.to_vec() == data);
    // Sent again from the gap after the retransmission timeout (at least
    // 100 us), long before the local ACK timeout (4.096 us x 2^10 = 4.2 ms),
    // and without spending a retry.
    let took = f.net.now().saturating_since(start);
    assert!(took < Duration::from_millis(1), "{took:?}");
    let c = f.e(A).counters();
    assert_eq!((c.timeouts, c.rto_rewinds), (0, 1), "{c:?}");
}

/// The attacker's test at the requester: an ACK sealed by another address
/// for the PSN of an outstanding WRITE completes nothing and is counted;
/// the same ACK from the peer's address is what completes it.
#[test]
fn an_ack_from_a_foreign_address_completes_nothing() {
    use crate::wire::Syndrome;
    let mut f = Fx::new();
    f.connect();
    let (src, dst) = (HostBuffer::from_bytes(b"data"), HostBuffer::new(4));
    let (ks, kd) = (f.reg(A, &src, RW), f.reg(B, &dst, RW));
    f.post(
        A,
        1,
        SendOp::Write {
            remote_addr: dst.addr(),
            rkey: kd,
        },
        sge(&src, ks),
    );
    // Take the WRITE off the wire: it never reaches B.
    let now = f.net.now();
    let mut buf = vec![0; crate::wire::MAX_PACKET];
    let t = f.e(A).poll_transmit(now, &mut buf).unwrap();
    let psn = Packet::parse(
        &buf[..t.len],
        &PseudoHeader {
            src: addr(A),
            dst: t.dst,
        },
    )
    .unwrap()
    .headers
    .bth
    .psn;
    let qpn_a = f.qpn(A);
    let ack = |from: SocketAddrV4| {
        let h = Headers {
            bth: BthRepr {
                opcode: Opcode::Acknowledge,
                solicited: false,
                pad_count: 0,
                pkey: DEFAULT_PKEY,
                dest_qp: qpn_a,
                ack_req: false,
                psn,
            },
            reth: None,
            aeth: Some(AethRepr {
                syndrome: Syndrome::Ack { credits: 0x1f },
                msn: 1,
            }),
            imm: None,
        };
        let mut d = vec![0; h.datagram_len(0)];
        h.emit(
            0,
            &PseudoHeader {
                src: from,
                dst: addr(A),
            },
            &mut d,
            |_| {},
        )
        .unwrap();
        d
    };
    let foreign = SocketAddrV4::new(Ipv4Addr::new(127, 10, 0, 99), ROCE_PORT);
    let forged = ack(foreign);
    f.e(A).handle_datagram(now, foreign, &forged);
    assert_eq!(f.e(A).counters().drop_foreign_source, 1);
    assert!(drain(&f.s[A].scq).is_empty(), "a forged ACK completed the WRITE");
    let real = ack(addr(B));
    f.e(A).handle_datagram(now, addr(B), &real);
    let wcs = drain(&f.s[A].scq);
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::Success));
}
mod windows;

/// What one 16 MiB transfer under loss cost (see `lossy_transfer`).
struct LossRun {
    /// Virtual time it took, in nanoseconds.
    nanos: u64,
    /// Data packets sent (by A for a WRITE, by B's READ responses for a
    /// READ), and how many the transfer needs without loss.
    sent: u64,
    need: u64,
    /// The requester's retransmissions, go-back-N rewinds and
    /// retransmission timer rewinds.
    retransmits: u64,
    rewinds: u64,
    rto: u64,
    what: String,
}

/// Moves 16 MiB A -> B by WRITE (or B -> A by READ) at `loss` on SimNet and
/// says what it cost. With `paced`, the links carry 2 GB/s each way, 25 us
/// apart: what a requester sends beyond what the link carries in a round
/// trip waits in a queue, and go-back-N sends all of it again after a loss,
/// a model of the cost of a loss in time, not only in packets. Without,
/// every datagram arrives at once.
fn lossy_transfer(loss: f64, read: bool, paced: bool) -> LossRun {
    let len = 16 << 20;
    let mut f = Fx::with(Mtu::Mtu4096, FaultConfig::loss(loss, 5), 64);
    if paced {
        f.net.set_latency(Duration::from_micros(25));
        f.net.rate = Some(2_000_000_000);
    }
    f.connect();
    let (data, src, dst, ks, kd, scq) = f.bufs(len, 3);
    // One packet first, so that the requester has a round-trip sample.
    let one = Sge {
        length: 1,
        ..sge(&src, ks)
    };
    f.post(A, 9, write_op(&dst, kd), one);
    f.wait(&scq, 1);
    dst.write(0, &[0]);
    let t0 = f.net.now();
    let (a0, b0) = (f.e(A).counters(), f.e(B).counters());
    if read {
        dst.write(0, &data);
        src.write(0, &vec![0; len]);
        f.post(A, 1, read_op(&dst, kd), sge(&src, ks));
    } else {
        f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    }
    let wc = f.wait(&scq, 1);
    assert_eq!(wc[0].status, WcStatus::Success);
    let nanos = f.net.now().as_nanos() - t0.as_nanos();
    let (a, b) = (f.e(A).counters(), f.e(B).counters());
    let sent = if read {
        assert!(src.to_vec() == data, "READ bytes differ at loss {loss}");
        b.tx_datagrams - b0.tx_datagrams
    } else {
        assert!(dst.to_vec() == data, "WRITE bytes differ at loss {loss}");
        a.tx_datagrams - a0.tx_datagrams
    };
    let (retransmits, rewinds, rto) = (
        a.retransmits - a0.retransmits,
        a.rewinds - a0.rewinds,
        a.rto_rewinds - a0.rto_rewinds,
    );
    let what = format!(
        "{} at loss {loss}: {} us, {sent} data packets sent for 4096, {retransmits} retransmits, \
         {rewinds} rewinds, {rto} retransmission timeouts\nA {a:?}\nB {b:?}",
        if read { "READ" } else { "WRITE" },
        nanos / 1000,
    );
    LossRun {
        nanos,
        sent,
        need: (len / 4096) as u64,
        retransmits,
        rewinds,
        rto,
        what,
    }
}

/// What go-back-N costs under random loss, counted in packets rather than
/// timed: every packet the responder drops after a gap is sent again, so
/// the packets in flight when a loss is found are the price of each loss,
/// and each wait for the retransmission timer leaves the link idle. (The
/// engine before the first fixes sent 1.81x and 1.69x the packets at 1 %
/// and met the timer 135 times for the READ at 10 %; with a window halved
/// on every loss it sent 1.19x and 1.16x, and met the timer 46 times.) The
/// window now follows the gap between losses (`Qp::on_loss`), which spends
/// more packets at 1 % (this link has no rate, so the whole window is in
/// flight at every loss) to keep a real link busy
/// (`loss_costs_little_time_on_a_paced_link`).
#[test]
fn go_back_n_resends_little_under_random_loss() {
    for read in [false, true] {
        let r = lossy_transfer(0.01, read, false);
        assert!(r.sent * 10 <= r.need * 17, "{}", r.what);
        assert!(r.rto <= 4, "{}", r.what);
        let r = lossy_transfer(0.1, read, false);
        assert!(r.sent * 10 <= r.need * 24, "{}", r.what);
        assert!(r.rto <= 24, "{}: {} retransmission timeouts", r.what, r.rto);
    }
}

/// When the retransmission timer fires because an ACK was lost, the
/// responder already has everything: the requester sends one packet (twice)
/// that asks for an ACK, not the whole window again.
#[test]
fn a_retransmission_timeout_sends_a_probe_not_the_window() {
    let mut f = Fx::new();
    f.connect();
    let (data, src, dst, ks, kd, scq) = f.bufs(8 * 4096, 4);
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    ok(&f.wait(&scq, 1)[0], 1, WcOpcode::RdmaWrite);
    dst.write(0, &[0; 4096]);
    // Eight packets arrive; the one ACK for them is lost.
    f.post(A, 2, write_op(&dst, kd), sge(&src, ks));
    assert_eq!(pump(&mut f, A, |_, _| true).len(), 8);
    assert_eq!(pump(&mut f, B, |_, _| false), vec![(Opcode::Acknowledge, 15)]);
    let before = f.e(A).counters();
    ok(&f.wait(&scq, 1)[0], 2, WcOpcode::RdmaWrite);
    assert!(dst.to_vec() == data);
    let c = f.e(A).counters();
    assert_eq!(c.rto_rewinds - before.rto_rewinds, 1, "{c:?}");
    assert_eq!(c.retransmits - before.retransmits, 2, "{c:?}");
    assert_eq!(c.timeouts, 0, "{c:?}");
}

/// The packet sent first after going back is the one the responder waits
/// for, and the responder NAKs a gap only once: if that packet were lost as
/// well, nothing would speak until the retransmission timer. It goes out
/// twice, so one loss more costs nothing. The responder, having seen loss,
/// sends its ACKs twice; on a clean link once.
#[test]
fn the_first_packet_sent_again_goes_out_twice() {
    let mut f = Fx::new();
    f.connect();
    let (data, src, dst, ks, kd, scq) = f.bufs(4 * 4096, 5);
    let one = Sge {
        length: 4096,
        ..sge(&src, ks)
    };
    // A clean link: one packet, one ACK.
    f.post(A, 1, write_op(&dst, kd), one);
    assert_eq!(pump(&mut f, A, |_, _| true), vec![(Opcode::WriteOnly, 0)]);
    assert_eq!(pump(&mut f, B, |_, _| true), vec![(Opcode::Acknowledge, 0)]);
    ok(&f.wait(&scq, 1)[0], 1, WcOpcode::RdmaWrite);
    // PSN 2 of 1..=4 is lost; the responder NAKs it once.
    f.post(A, 2, write_op(&dst, kd), sge(&src, ks));
    assert_eq!(pump(&mut f, A, |_, p| p != 2).len(), 4);
    let naks = pump(&mut f, B, |_, _| true);
    assert_eq!(naks.first(), Some(&(Opcode::Acknowledge, 2)), "{naks:?}");
    // Going back from 2: PSN 2 twice, and the first copy is lost too.
    let mut first = true;
    let again = pump(&mut f, A, |_, p| !(p == 2 && std::mem::take(&mut first)));
    assert_eq!(
        again,
        vec![
            (Opcode::WriteMiddle, 2),
            (Opcode::WriteMiddle, 2),
            (Opcode::WriteMiddle, 3),
            (Opcode::WriteLast, 4)
        ]
    );
    // The second copy was executed; the ACK goes out twice.
    assert_eq!(
        pump(&mut f, B, |_, _| true),
        vec![(Opcode::Acknowledge, 4), (Opcode::Acknowledge, 4)]
    );
    ok(&f.wait(&scq, 1)[0], 2, WcOpcode::RdmaWrite);
    assert!(dst.to_vec() == data);
    let c = f.e(A).counters();
    assert_eq!((c.rto_rewinds, c.timeouts), (0, 0), "{c:?}");
}

/// A UDP GRO batch is split back into its packets, each checked under the
/// identification the sender's kernel gave its segment (`k` from the start
/// of its super-packet, the numbering starting again where a second
/// super-packet begins), and a packet whose ICRC fails under every
/// candidate is dropped and counted, never handed to a QP.
#[test]
fn a_gro_batch_is_split_and_each_packet_checked_under_its_segment_id() {
    let mut e = Engine::new(EngineConfig::new(ip(B)));
    let from = addr(A);
    let pseudo = PseudoHeader {
        src: from,
        dst: addr(B),
    };
    // Packets for a QP that does not exist: one that passes the ICRC
    // checks is counted as `drop_no_qp`, one that fails as `drop_bad_icrc`.
    let make = |len: usize, psn: u32, id: u16| {
        let mut p = vec![0u8; len];
        p[0] = 0x07; // WRITE Middle
        p[2..4].copy_from_slice(&[0xff, 0xff]);
        p[5..8].copy_from_slice(&[0, 0x0f, 0xff]);
        p[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
        crate::wire::icrc::seal_over(&pseudo.ip_udp_header_with_id(len, id), &mut p);
        p
    };
    let batch = |ids: &[u16], last: usize| {
        let mut b = Vec::new();
        for (k, &id) in ids.iter().enumerate() {
            let len = if k + 1 == ids.len() { last } else { 1040 };
            b.extend(make(len, k as u32, id));
        }
        b
    };
    let run = |e: &mut Engine, data: &[u8], size: Option<usize>| {
        let before = e.counters();
        let mut seen = Vec::new();
        e.handle_gro(Time::ZERO, from, data, size, &mut |r, id| seen.push((r, id)));
        let after = e.counters();
        (
            seen,
            after.drop_no_qp - before.drop_no_qp,
            after.drop_bad_icrc - before.drop_bad_icrc,
            after.rx_coalesced - before.rx_coalesced,
        )
    };

    // One super-packet of three full segments and a short last.
    let data = batch(&[0, 1, 2, 3], 20);
    let (seen, ok, bad, coalesced) = run(&mut e, &data, Some(1040));
    assert_eq!((ok, bad, coalesced), (4, 0, 3));
    let want: Vec<(std::ops::Range<usize>, u16)> =
        vec![(0..1040, 0), (1040..2080, 1), (2080..3120, 2), (3120..3140, 3)];
    assert_eq!(seen, want);

    // Two super-packets coalesced by a kernel: 0, 1, 2, then 0, 1 again.
    let data = batch(&[0, 1, 2, 0, 1], 1040);
    let (seen, ok, bad, _) = run(&mut e, &data, Some(1040));
    assert_eq!((ok, bad), (5, 0));
    assert_eq!(seen.iter().map(|s| s.1).collect::<Vec<_>>(), vec![0, 1, 2, 0, 1]);

    // A segment sealed under another identification (a forged or corrupted
    // packet in the batch) is dropped as a bad ICRC; the others still land.
    let data = batch(&[0, 1, 9, 3], 1040);
    let (_, ok, bad, _) = run(&mut e, &data, Some(1040));
    assert_eq!((ok, bad), (3, 1));

    // One flipped payload bit in the middle of a batch: dropped.
    let mut data = batch(&[0, 1, 2], 1040);
    data[1040 + 500] ^= 4;
    let (_, ok, bad, _) = run(&mut e, &data, Some(1040));
    assert_eq!((ok, bad), (2, 1));

    // A datagram without a GRO size is one packet, checked under 0 only.
    let (_, ok, bad, coalesced) = run(&mut e, &make(1040, 0, 0), None);
    assert_eq!((ok, bad, coalesced), (1, 0, 0));
    let (_, ok, bad, _) = run(&mut e, &make(1040, 0, 1), None);
    assert_eq!((ok, bad), (0, 1));
}

/// A requester learns that its responder keeps what follows a gap (B
/// acknowledges past what A sent again after a NAK), and from then on a
/// lost WRITE middle packet costs that packet alone: A sends it (twice),
/// then only the WRITE's Last packet, which a responder never places
/// ahead, and nothing in between again.
#[test]
fn a_lost_write_packet_costs_itself_once_the_peer_places_ahead() {
    let mut f = Fx::new();
    f.connect();
    let n = 40;
    let (data, src, dst, ks, kd, scq) = f.bufs(n * 4096, 6);
    // First WRITE: 5 is lost, B places 6..=38; the Last (39) is dropped.
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    assert_eq!(pump(&mut f, A, |_, p| p != 5).len(), n);
    assert_eq!(f.e(B).counters().placed_ahead, 33);
    pump(&mut f, B, |_, _| true);
    // A goes back to 5: its first copy reaches B, which then acknowledges
    // up to 38 while A has sent nothing past 5 again.
    assert_eq!(step(&mut f, A, |_, _| true), Some((Opcode::WriteMiddle, 5)));
    assert_eq!(step(&mut f, A, |_, _| false), Some((Opcode::WriteMiddle, 5)));
    let acks = pump(&mut f, B, |_, _| true);
    assert_eq!(acks.last(), Some(&(Opcode::Acknowledge, 38)), "{acks:?}");
    assert_eq!(pump(&mut f, A, |_, _| true), vec![(Opcode::WriteLast, 39)]);
    pump(&mut f, B, |_, _| true);
    ok(&f.wait(&scq, 1)[0], 1, WcOpcode::RdmaWrite);
    assert!(dst.to_vec() == data);
    // Second WRITE, 12 packets (PSNs 40..=51, within the window the loss
    // left): 43 is lost. After B's NAK, A sends 43 twice and then the Last
    // (51) alone.
    let m = 12;
    dst.write(0, &vec![0; n * 4096]);
    f.post(
        A,
        2,
        write_op(&dst, kd),
        Sge {
            length: (m * 4096) as u32,
            ..sge(&src, ks)
        },
    );
    assert_eq!(pump(&mut f, A, |_, p| p != 43).len(), m);
    pump(&mut f, B, |_, _| true);
    let before = f.e(A).counters().retransmits;
    let again = pump(&mut f, A, |_, _| true);
    assert_eq!(
        again,
        vec![
            (Opcode::WriteMiddle, 43),
            (Opcode::WriteMiddle, 43),
            (Opcode::WriteLast, 51)
        ]
    );
    assert_eq!(f.e(A).counters().retransmits - before, 3);
    pump(&mut f, B, |_, _| true);
    ok(&f.wait(&scq, 1)[0], 2, WcOpcode::RdmaWrite);
    assert!(dst.to_vec()[..m * 4096] == data[..m * 4096]);
}

/// Two packets of one WRITE are lost. When the first arrives again, the
/// responder moves past what it placed up to the second gap and NAKs that
/// one at once, before any later packet could say it is missing (the NAK
/// acknowledges everything before it); the requester, which knows its
/// responder places, sends each lost packet alone and the Last, which is
/// never placed ahead, and nothing that was placed.
#[test]
fn a_second_gap_is_naked_as_soon_as_the_first_is_filled() {
    let mut f = Fx::new();
    f.connect();
    let n = 40;
    let (data, src, dst, ks, kd, scq) = f.bufs(n * 4096, 8);
    // A first WRITE with one loss shows A that B places.
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    pump(&mut f, A, |_, p| p != 5);
    while !pump(&mut f, B, |_, _| true).is_empty() {
        pump(&mut f, A, |_, _| true);
    }
    ok(&f.wait(&scq, 1)[0], 1, WcOpcode::RdmaWrite);
    // The second, 16 packets (PSNs 40..=55, within the window the loss
    // left): 43 and 48 are lost.
    let m = 16;
    dst.write(0, &vec![0; n * 4096]);
    let part = Sge {
        length: (m * 4096) as u32,
        ..sge(&src, ks)
    };
    f.post(A, 2, write_op(&dst, kd), part);
    assert_eq!(pump(&mut f, A, |_, p| p != 43 && p != 48).len(), m);
    // (After a loss B sends each ACK and NAK twice.)
    let nak = pump(&mut f, B, |_, _| true);
    assert!(
        !nak.is_empty() && nak.iter().all(|&x| x == (Opcode::Acknowledge, 43)),
        "{nak:?}"
    );
    let naks = f.e(B).counters().naks_sequence;
    let before = f.e(A).counters().retransmits;
    // 43's first copy alone: B's answer names 48, a NAK (an ACK would name
    // 47, and the NAK would wait for a packet after it).
    assert_eq!(step(&mut f, A, |_, _| true), Some((Opcode::WriteMiddle, 43)));
    assert_eq!(step(&mut f, B, |_, _| true), Some((Opcode::Acknowledge, 48)));
    assert_eq!(f.e(B).counters().naks_sequence, naks + 1);
    // Once, though B sends every other ACK and NAK twice since the loss: a
    // second copy would read as the NAK for 48's own loss.
    assert_eq!(step(&mut f, B, |_, _| true), None);
    let mut sent = vec![(Opcode::WriteMiddle, 43)];
    loop {
        let again = pump(&mut f, A, |_, _| true);
        sent.extend(again);
        if pump(&mut f, B, |_, _| true).is_empty() {
            break;
        }
    }
    // The NAK for 48 came before 43's second copy went: A went on to 48.
    assert_eq!(
        sent,
        vec![
            (Opcode::WriteMiddle, 43),
            (Opcode::WriteMiddle, 48),
            (Opcode::WriteMiddle, 48),
            (Opcode::WriteLast, 55),
        ]
    );
    assert_eq!(f.e(A).counters().retransmits - before, 4);
    ok(&f.wait(&scq, 1)[0], 2, WcOpcode::RdmaWrite);
    assert!(dst.to_vec()[..m * 4096] == data[..m * 4096]);
}

/// An acknowledgement past what was sent again since a NAK shows that the
/// responder keeps what follows a gap, unless the retransmission timer went
/// back in between: then it acknowledges copies the timer's pass did not
/// send, but the NAK's did. Taken for placing, a responder that drops after
/// a gap (as rxe does) would get each later loss sent alone, and drop what
/// follows it again.
#[test]
fn an_ack_after_the_timer_went_back_does_not_look_like_placing() {
    let mut f = Fx::new();
    f.e(B).config.place_ahead = false;
    f.connect();
    let m = 12;
    let (data, src, dst, ks, kd, scq) = f.bufs(m * 4096, 4);
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    assert_eq!(pump(&mut f, A, |_, p| p != 3).len(), m);
    // (After a loss B sends each ACK and NAK twice.)
    let nak = pump(&mut f, B, |_, _| true);
    assert!(
        !nak.is_empty() && nak.iter().all(|&x| x == (Opcode::Acknowledge, 3)),
        "{nak:?}"
    );
    // The NAK's pass reaches B, which executes it all; its ACK waits while
    // A's retransmission timer fires and A sends 3 again as a probe (in two
    // copies, as the first packet after going back always goes).
    let resent = pump(&mut f, A, |_, _| true);
    assert_eq!(resent.len(), m - 3 + 1, "{resent:?}");
    let t = f.e(A).poll_timeout().unwrap();
    let rto = f.e(A).counters().rto_rewinds;
    f.e(A).handle_timeout(t);
    assert_eq!(f.e(A).counters().rto_rewinds, rto + 1);
    assert_eq!(
        pump(&mut f, A, |_, _| true),
        vec![(Opcode::WriteMiddle, 3), (Opcode::WriteMiddle, 3)]
    );
    // B acknowledges all twelve, past the probe.
    assert_eq!(
        pump(&mut f, B, |_, _| true).last(),
        Some(&(Opcode::Acknowledge, 11))
    );
    ok(&f.wait(&scq, 1)[0], 1, WcOpcode::RdmaWrite);
    // The next loss is answered by going back, whole.
    f.post(A, 2, write_op(&dst, kd), sge(&src, ks));
    assert_eq!(pump(&mut f, A, |_, p| p != 15).len(), m);
    pump(&mut f, B, |_, _| true);
    let again: Vec<u32> = pump(&mut f, A, |_, _| true).iter().map(|x| x.1).collect();
    let want: Vec<u32> = std::iter::once(15).chain(15..24).collect();
    assert_eq!(again, want);
    pump(&mut f, B, |_, _| true);
    ok(&f.wait(&scq, 1)[0], 2, WcOpcode::RdmaWrite);
    assert!(dst.to_vec() == data);
}

/// Against a responder that drops what follows a gap, as IBA describes and
/// the kernel's rxe does, the requester never takes a loss to cost only
/// itself: the responder never acknowledges past what was sent again, so
/// every NAK is answered by go-back-N, whole, and every byte arrives.
#[test]
fn a_responder_that_drops_after_a_gap_gets_go_back_n() {
    let mut f = Fx::new();
    f.e(B).config.place_ahead = false;
    f.connect();
    let m = 12;
    let (data, src, dst, ks, kd, scq) = f.bufs(m * 4096, 2);
    for (wr, lost) in [(1, 3), (2, 15)] {
        f.post(A, wr, write_op(&dst, kd), sge(&src, ks));
        assert_eq!(pump(&mut f, A, |_, p| p != lost).len(), m);
        assert_eq!(f.e(B).counters().placed_ahead, 0);
        pump(&mut f, B, |_, _| true);
        // Everything from the lost packet on goes out again.
        let again = pump(&mut f, A, |_, _| true);
        let first = (wr as u32 - 1) * m as u32;
        let want: Vec<u32> = std::iter::once(lost).chain(lost..first + m as u32).collect();
        assert_eq!(again.iter().map(|x| x.1).collect::<Vec<_>>(), want);
        pump(&mut f, B, |_, _| true);
        ok(&f.wait(&scq, 1)[0], wr, WcOpcode::RdmaWrite);
        assert!(dst.to_vec() == data);
    }
}

/// Placing a packet ahead is no way around what in-order execution checks:
/// only a full middle packet of the WRITE in progress, landing inside that
/// message short of its last byte, is placed. A middle packet with no WRITE
/// begun, one that would take the Last packet's place or reach past the
/// message, and a short one are dropped, and memory is untouched.
#[test]
fn only_middle_packets_of_the_write_in_progress_are_placed_ahead() {
    let mut f = Fx::new();
    f.attr.rq_psn = 10;
    f.connect();
    let len = 4 * 4096;
    let dst = HostBuffer::new(len + 4 * 4096);
    let kd = f.reg(B, &dst, RW);
    let full = vec![0xAB; 4096];
    let now = f.net.now();
    // No WRITE in progress: a middle packet at 12 is not placed.
    let d = request(&f, Opcode::WriteMiddle, 12, None, &full);
    f.e(B).handle_datagram(now, addr(A), &d);
    assert_eq!(f.e(B).counters().placed_ahead, 0);
    // A WRITE of four packets begins at 10 (11 will be lost).
    let reth = Some(RethRepr {
        va: dst.addr(),
        rkey: kd,
        dma_len: len as u32,
    });
    let first = vec![1; 4096];
    let d = request(&f, Opcode::WriteFirst, 10, reth, &first);
    f.e(B).handle_datagram(now, addr(A), &d);
    // 13 is the Last's place, 14 and 40 past the message, 12 short.
    for (p, payload) in [
        (13, &full[..]),
        (14, &full[..]),
        (40, &full[..]),
        (12, &full[..100]),
    ] {
        let d = request(&f, Opcode::WriteMiddle, p, None, payload);
        f.e(B).handle_datagram(now, addr(A), &d);
    }
    assert_eq!(f.e(B).counters().placed_ahead, 0);
    assert!(dst.to_vec()[4096..].iter().all(|&b| b == 0));
    // A full middle packet at 12 is placed.
    let d = request(&f, Opcode::WriteMiddle, 12, None, &full);
    f.e(B).handle_datagram(now, addr(A), &d);
    assert_eq!(f.e(B).counters().placed_ahead, 1);
    assert!(dst.to_vec()[2 * 4096..3 * 4096].iter().all(|&b| b == 0xAB));
    assert!(dst.to_vec()[3 * 4096..].iter().all(|&b| b == 0));
}

/// A READ response lost in the middle of an answer: the responses after it
/// are placed where they belong, and the requester asks again for the lost
/// one alone (the request twice), not for the rest of the READ. The answer
/// goes out twice too, so losing its first copy costs nothing: the
/// requester would otherwise learn of that loss only from its timer.
#[test]
fn a_lost_read_response_is_asked_for_alone_and_comes_twice() {
    let mut f = Fx::new();
    f.connect();
    let data = pattern(4 * 4096, 7);
    let remote = HostBuffer::from_bytes(&data);
    let local = HostBuffer::new(4 * 4096);
    let kr = f.reg(B, &remote, RW);
    let kl = f.reg(A, &local, RW);
    let scq = f.s[A].scq.clone();
    f.post(A, 1, read_op(&remote, kr), sge(&local, kl));
    assert_eq!(pump(&mut f, A, |_, _| true), vec![(Opcode::ReadRequest, 0)]);
    // Response 1 of 0..=3 is lost; 2 and 3 are placed ahead.
    assert_eq!(pump(&mut f, B, |_, p| p != 1).len(), 4);
    assert_eq!(f.e(A).counters().placed_ahead, 2);
    // The READ is asked again for response 1 alone.
    assert_eq!(
        pump(&mut f, A, |_, _| true),
        vec![(Opcode::ReadRequest, 1), (Opcode::ReadRequest, 1)]
    );
    // The second request replaced the first's answer before it went out;
    // the answer goes out twice, and its first copy is lost too.
    let mut first = true;
    let again = pump(&mut f, B, |_, p| !(p == 1 && std::mem::take(&mut first)));
    assert_eq!(
        again,
        vec![(Opcode::ReadResponseOnly, 1), (Opcode::ReadResponseOnly, 1)]
    );
    ok(&f.wait(&scq, 1)[0], 1, WcOpcode::RdmaRead);
    assert!(local.to_vec() == data);
    let c = f.e(A).counters();
    assert_eq!(
        (c.rto_rewinds, c.timeouts, c.rewinds, c.read_reasks),
        (0, 0, 0, 2),
        "{c:?}"
    );
}

/// A READ asked again for a lost response while the answer it interrupts
/// is still going out: the answer to it goes first, and the stream goes on
/// after it (nothing already sent is sent again).
#[test]
fn a_response_asked_again_goes_ahead_of_the_stream() {
    let mut f = Fx::new();
    f.connect();
    let n = 8;
    let data = pattern(n * 4096, 8);
    let remote = HostBuffer::from_bytes(&data);
    let local = HostBuffer::new(n * 4096);
    let kr = f.reg(B, &remote, RW);
    let kl = f.reg(A, &local, RW);
    let scq = f.s[A].scq.clone();
    f.post(A, 1, read_op(&remote, kr), sge(&local, kl));
    assert_eq!(pump(&mut f, A, |_, _| true), vec![(Opcode::ReadRequest, 0)]);
    // B sends responses 0..=3 only (1 is lost), the rest still queued.
    for p in 0..4 {
        assert_eq!(step(&mut f, B, |_, p| p != 1).map(|x| x.1), Some(p));
    }
    assert_eq!(
        pump(&mut f, A, |_, _| true),
        vec![(Opcode::ReadRequest, 1), (Opcode::ReadRequest, 1)]
    );
    let rest = pump(&mut f, B, |_, _| true);
    assert_eq!(
        rest,
        vec![
            (Opcode::ReadResponseOnly, 1),
            (Opcode::ReadResponseOnly, 1),
            (Opcode::ReadResponseMiddle, 4),
            (Opcode::ReadResponseMiddle, 5),
            (Opcode::ReadResponseMiddle, 6),
            (Opcode::ReadResponseLast, 7)
        ]
    );
    ok(&f.wait(&scq, 1)[0], 1, WcOpcode::RdmaRead);
    assert!(local.to_vec() == data);
}

/// A requester that goes back and asks for several READs again, in order
/// (go-back-N, as the kernel's rxe does), gets the answers in that order,
/// even while the first answers are still queued: each answer goes before
/// what is queued after its PSN, not ahead of everything.
#[test]
fn reads_asked_again_in_order_are_answered_in_order() {
    let mut f = Fx::new();
    f.e(A).config.place_ahead = false;
    f.connect();
    let data = pattern(8 * 4096, 9);
    let remote = HostBuffer::from_bytes(&data);
    let local = HostBuffer::new(8 * 4096);
    let kr = f.reg(B, &remote, RW);
    let kl = f.reg(A, &local, RW);
    let scq = f.s[A].scq.clone();
    let half = |b: &HostBuffer, k: u32, i: u64| Sge {
        addr: b.addr() + i * 4 * 4096,
        length: 4 * 4096,
        lkey: k,
    };
    let op = |i: u64| SendOp::Read {
        remote_addr: remote.addr() + i * 4 * 4096,
        rkey: kr,
    };
    f.post(A, 1, op(0), half(&local, kl, 0));
    f.post(A, 2, op(1), half(&local, kl, 1));
    assert_eq!(
        pump(&mut f, A, |_, _| true),
        vec![(Opcode::ReadRequest, 0), (Opcode::ReadRequest, 4)]
    );
    // B sends responses 0..=2 of the first READ (1 is lost); 3 and the
    // second READ's 4..=7 are still queued.
    for p in 0..3 {
        assert_eq!(step(&mut f, B, |_, p| p != 1).map(|x| x.1), Some(p));
    }
    // A goes back to 1 and asks for both READs again.
    let asked = pump(&mut f, A, |_, _| true);
    assert_eq!(asked.first(), Some(&(Opcode::ReadRequest, 1)), "{asked:?}");
    assert!(asked.contains(&(Opcode::ReadRequest, 4)), "{asked:?}");
    let answers = pump(&mut f, B, |_, _| true);
    let psns: Vec<u32> = answers.iter().map(|x| x.1).collect();
    assert!(psns.windows(2).all(|w| w[0] <= w[1]), "{psns:?}");
    let wc = f.wait(&scq, 2);
    ok(&wc[0], 1, WcOpcode::RdmaRead);
    ok(&wc[1], 2, WcOpcode::RdmaRead);
    assert!(local.to_vec() == data);
}

/// A WRITE middle packet that arrives after a loss is placed at once; when
/// the lost packet comes, the responder's expected PSN moves past all of
/// them and one ACK says so, so the requester resends only the lost one.
/// What does not qualify is dropped as before: a packet of no WRITE in
/// progress, the Last packet, one that would reach past the message.
#[test]
fn write_packets_after_a_loss_are_placed_and_the_ack_jumps() {
    let mut f = Fx::new();
    f.connect();
    let n = 8;
    let (data, src, dst, ks, kd, scq) = f.bufs(n * 4096, 5);
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    // Packet 2 is lost: 3..=6 are placed, the Last (7) is not.
    let sent = pump(&mut f, A, |_, p| p != 2);
    assert_eq!(sent.len(), n);
    let c = f.e(B).counters();
    assert_eq!(c.placed_ahead, 4, "{c:?}");
    assert!(dst.to_vec()[3 * 4096..7 * 4096] == data[3 * 4096..7 * 4096]);
    assert!(dst.to_vec()[7 * 4096..].iter().all(|&b| b == 0));
    // B NAKs 2 once; A goes back to 2.
    let naks = f.e(B).counters().naks_sequence;
    assert_eq!(naks, 1);
    pump(&mut f, B, |_, _| true);
    // A goes back to 2 and sends from there; only the first copy of 2
    // and the Last (7) get through: 3..=6 never reach B again, yet B
    // takes 7 in order and acknowledges the whole WRITE.
    let mut first = true;
    pump(&mut f, A, |_, p| (p == 2 && std::mem::take(&mut first)) || p == 7);
    let acks = pump(&mut f, B, |_, _| true);
    assert_eq!(acks.last(), Some(&(Opcode::Acknowledge, 7)), "{acks:?}");
    ok(&f.wait(&scq, 1)[0], 1, WcOpcode::RdmaWrite);
    assert!(dst.to_vec() == data);
}

/// Throughput under loss against lossless on a link with a rate (virtual
/// time, so deterministic). The window sized from the gap between losses
/// keeps the link busy where halving it on every loss left it idle (the
/// engine before sent WRITE at 1 % in 0.46 of the lossless rate here), and
/// held to what the path carries in a round trip while losses come it
/// queues nothing that a loss throws away (before: WRITE 0.60, READ 0.44
/// at 1 %). Lossless, the first window sent whole does not fire the
/// retransmission timer before its first ACK can come back (before: three
/// timeouts and 334 packets sent twice with no loss at all). Packets placed
/// ahead of a loss (`Ahead`) bring the goals within reach: 0.7 of
/// lossless at 1 %, 0.25 at 10 % (before: WRITE 0.72 and 0.22, READ 0.58
/// and 0.22; after: WRITE 0.78 and 0.39, READ 0.91 and 0.30).
#[test]
fn loss_costs_little_time_on_a_paced_link() {
    for read in [false, true] {
        let base = lossy_transfer(0.0, read, true);
        assert_eq!(base.retransmits, 0, "lossless: {}", base.what);
        for (loss, floor) in [(0.01, 0.7), (0.1, 0.25)] {
            let r = lossy_transfer(loss, read, true);
            let ratio = base.nanos as f64 / r.nanos as f64;
            eprintln!("{}: {ratio:.3} of lossless ({})", r.what, base.what);
            assert!(
                ratio >= floor,
                "{}: {ratio:.3} of lossless ({})",
                r.what,
                base.what
            );
        }
    }
}

/// What a loss costs in packets: go-back-N sends again whatever was in
/// flight past the lost packet, so a window held to what the path carries
/// (25 packets on this link: 2 GB/s, 50 us round trip) resends about that
/// much per loss; a window grown to the gap between losses (about 100 at
/// 1 %) resent about 80 per loss here.
#[test]
fn a_loss_costs_about_what_the_path_holds() {
    let r = lossy_transfer(0.01, false, true);
    assert!(r.rewinds >= 20, "{}", r.what);
    assert!(
        r.retransmits <= 40 * r.rewinds,
        "{}: {} per loss",
        r.what,
        r.retransmits / r.rewinds
    );
}

/// The window follows the gap between losses and comes back when the link
/// is clean. Rounds, all at one instant (no timer fires): A sends what its
/// window allows, B acknowledges (or NAKs) all of it. While every 50th PSN
/// is lost once, each round holds 50 to 100 packets (a loss that falls in
/// what go-back-N resends anyway is not seen, so the requester sees about
/// one loss per 100 packets sent); halving on each loss, as before, held
/// it at 16 to 20. Once the link is clean, the whole 256-packet window is
/// back within 800 packets.
#[test]
fn the_window_follows_the_gap_between_losses_and_comes_back_when_clean() {
    let mut f = Fx::new();
    f.connect();
    let n = 4000;
    let (data, src, dst, ks, kd, scq) = f.bufs(n * 4096, 9);
    f.post(A, 1, write_op(&dst, kd), sge(&src, ks));
    let mut lost = std::collections::HashSet::new();
    let mut lossy_rounds = Vec::new();
    for _ in 0..30 {
        let sent = pump(&mut f, A, |_, p| !(p % 50 == 49 && lost.insert(p)));
        lossy_rounds.push(sent.len());
        pump(&mut f, B, |_, _| true);
    }
    assert!(lost.len() >= 25, "{} losses: {lossy_rounds:?}", lost.len());
    assert!(
        lossy_rounds[5..].iter().all(|&s| (40..=128).contains(&s)),
        "rounds while every 50th packet is lost: {lossy_rounds:?}"
    );
    let mut clean = 0;
    let mut clean_rounds = Vec::new();
    while clean < 800 {
        let sent = pump(&mut f, A, |_, _| true).len();
        clean_rounds.push(sent);
        clean += sent;
        pump(&mut f, B, |_, _| true);
        if sent >= 256 {
            break;
        }
    }
    assert_eq!(clean_rounds.last(), Some(&256), "clean rounds: {clean_rounds:?}");
    ok(&f.wait(&scq, 1)[0], 1, WcOpcode::RdmaWrite);
    assert!(dst.to_vec() == data);
}
