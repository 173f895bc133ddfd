//! One RC queue pair: its state, attributes, queues, and the state machine.

mod requester;
mod responder;

use std::net::SocketAddrV4;
use std::sync::Arc;
use std::time::Duration;

use hipobj_platform::{
    AccessFlags, QpAttr, QpAttrMask, QpState, RecvWr, Sge, VerbsError, VerbsErrorKind, WcOpcode, WcStatus,
    WorkCompletion,
};

use hipobj_platform::verbs::check_rc_transition;

use requester::Requester;
use responder::Responder;

use super::{Counters, Cq, Ctx, QpConfig, Time};
use crate::mem::sgl;
use crate::wire::aeth::AethRepr;
use crate::wire::bth::{BthRepr, DEFAULT_PKEY};
use crate::wire::{Headers, Opcode, Packet, PseudoHeader, ROCE_PORT};

/// Attributes set by `modify_qp`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attrs {
    pub access: AccessFlags,
    /// Effective path MTU in bytes.
    pub mtu: u32,
    pub dest_qpn: u32,
    pub peer: SocketAddrV4,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
}

impl Default for Attrs {
    fn default() -> Self {
        Self {
            access: AccessFlags::default(),
            mtu: 1024,
            dest_qpn: 0,
            peer: SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, ROCE_PORT),
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
        }
    }
}

impl Attrs {
    /// The local ACK timeout, or `None` for infinite (timeout 0).
    pub(super) fn ack_timeout(&self) -> Option<Duration> {
        (self.timeout != 0).then(|| Duration::from_nanos(4096u64 << self.timeout))
    }
}

/// The time an RNR NAK timer code asks the requester to wait (IBA table
/// "Encoding for RNR NAK Timer Field"), in microseconds.
pub(crate) fn rnr_delay(code: u8) -> Duration {
    const US: [u64; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840, 5120,
        7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760, 327_680, 491_520,
    ];
    Duration::from_micros(US[usize::from(code & 31)])
}

/// A posted receive.
#[derive(Debug)]
pub(crate) struct RecvWqe {
    pub wr_id: u64,
    pub sges: Vec<Sge>,
    pub len: u32,
}

#[derive(Debug)]
pub(crate) struct Qp {
    pub qpn: u32,
    pub pd: u32,
    pub state: QpState,
    pub send_cq: Arc<Cq>,
    pub recv_cq: Arc<Cq>,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub sq_sig_all: bool,
    pub attr: Attrs,
    pub req: Requester,
    pub resp: Responder,
}

fn invalid(why: impl Into<String>) -> VerbsError {
    VerbsError::new("ibv_modify_qp", VerbsErrorKind::InvalidArgument, why)
}

impl Qp {
    pub(super) fn new(qpn: u32, cfg: QpConfig) -> Self {
        Self {
            qpn,
            pd: cfg.pd,
            state: QpState::Reset,
            send_cq: cfg.send_cq,
            recv_cq: cfg.recv_cq,
            max_send_wr: cfg.max_send_wr,
            max_recv_wr: cfg.max_recv_wr,
            max_send_sge: cfg.max_send_sge,
            max_recv_sge: cfg.max_recv_sge,
            sq_sig_all: cfg.sq_sig_all,
            attr: Attrs::default(),
            req: Requester::default(),
            resp: Responder::default(),
        }
    }

    pub(super) fn peer(&self) -> SocketAddrV4 {
        self.attr.peer
    }

    pub(super) fn modify(
        &mut self,
        ctx: &mut Ctx<'_>,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), VerbsError> {
        use QpAttrMask as M;
        check_rc_transition(self.state, attr, mask)?;
        if mask.contains(M::PORT) && attr.port_num != 1 {
            return Err(invalid(format!("no port {}", attr.port_num)));
        }
        if mask.contains(M::PKEY_INDEX) && attr.pkey_index != 0 {
            return Err(invalid(format!("no P_Key index {}", attr.pkey_index)));
        }
        let peer = if mask.contains(M::AV) {
            if attr.sgid_index != 0 {
                return Err(invalid(format!("no GID index {}", attr.sgid_index)));
            }
            let ip = attr.dgid.to_ipv4().ok_or_else(|| {
                invalid(format!(
                    "destination GID {} is not IPv4-mapped (RoCE v2 over IPv4)",
                    attr.dgid
                ))
            })?;
            Some(SocketAddrV4::new(ip, ROCE_PORT))
        } else {
            None
        };
        if mask.contains(M::DEST_QPN) && attr.dest_qp_num > crate::wire::psn::MASK {
            return Err(invalid("destination QP number is wider than 24 bits"));
        }
        match attr.qp_state {
            QpState::Reset => {
                self.reset();
                return Ok(());
            }
            QpState::Err => {
                self.enter_error(ctx.counters, None);
                return Ok(());
            }
            _ => {}
        }
        if mask.contains(M::ACCESS_FLAGS) {
            self.attr.access = attr.qp_access_flags;
        }
        if let Some(peer) = peer {
            self.attr.peer = peer;
        }
        if mask.contains(M::PATH_MTU) {
            self.attr.mtu = attr.path_mtu.min(ctx.config.mtu).bytes() as u32;
        }
        if mask.contains(M::DEST_QPN) {
            self.attr.dest_qpn = attr.dest_qp_num;
        }
        if mask.contains(M::MIN_RNR_TIMER) {
            self.attr.min_rnr_timer = attr.min_rnr_timer;
        }
        if mask.contains(M::MAX_DEST_RD_ATOMIC) {
            self.attr.max_dest_rd_atomic = attr.max_dest_rd_atomic;
        }
        if mask.contains(M::RQ_PSN) {
            self.resp.start(attr.rq_psn);
        }
        if mask.contains(M::TIMEOUT) {
            self.attr.timeout = attr.timeout;
        }
        if mask.contains(M::RETRY_CNT) {
            self.attr.retry_cnt = attr.retry_cnt;
        }
        if mask.contains(M::RNR_RETRY) {
            self.attr.rnr_retry = attr.rnr_retry;
        }
        if mask.contains(M::MAX_QP_RD_ATOMIC) {
            self.attr.max_rd_atomic = attr.max_rd_atomic;
        }
        if mask.contains(M::SQ_PSN) {
            self.req.start(attr.sq_psn, &self.attr);
        }
        self.state = attr.qp_state;
        Ok(())
    }

    /// Back to RESET: every queue emptied without completions, every
    /// attribute forgotten.
    fn reset(&mut self) {
        self.state = QpState::Reset;
        self.attr = Attrs::default();
        self.req = Requester::default();
        self.resp = Responder::default();
    }

    /// Moves to ERR. Outstanding send work requests complete in order, with
    /// `failed`'s status for the one at that index and WR_FLUSH_ERR for the
    /// rest; posted receives flush; nothing more is sent except a pending
    /// fatal NAK.
    pub(super) fn enter_error(&mut self, counters: &mut Counters, failed: Option<(usize, WcStatus)>) {
        self.state = QpState::Err;
        let sq = std::mem::take(&mut self.req.sq);
        for (i, wqe) in sq.iter().enumerate() {
            let status = match failed {
                Some((at, s)) if at == i => s,
                _ => WcStatus::WrFlushErr,
            };
            let wc = self.send_wc(wqe.wr_id, wqe.opcode(), status, wqe.len);
            self.push_send(counters, wc);
        }
        self.req.halt();
        let rq = std::mem::take(&mut self.resp.rq);
        for wqe in rq {
            self.push_recv(counters, wqe.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0, None);
        }
        self.resp.halt();
    }

    pub(super) fn send_wc(
        &self,
        wr_id: u64,
        opcode: WcOpcode,
        status: WcStatus,
        byte_len: u32,
    ) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            opcode,
            vendor_err: 0,
            byte_len,
            imm_data: None,
            qp_num: self.qpn,
        }
    }

    pub(super) fn push_send(&self, counters: &mut Counters, wc: WorkCompletion) {
        if !self.send_cq.push(wc) {
            counters.cq_overruns += 1;
        }
    }

    pub(super) fn push_recv(
        &self,
        counters: &mut Counters,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
        imm_data: Option<u32>,
    ) {
        let wc = WorkCompletion {
            wr_id,
            status,
            opcode,
            vendor_err: 0,
            byte_len,
            imm_data,
            qp_num: self.qpn,
        };
        if !self.recv_cq.push(wc) {
            counters.cq_overruns += 1;
        }
    }

    pub(super) fn post_recv(&mut self, counters: &mut Counters, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        let err = |kind, why: &str| Err(VerbsError::new("ibv_post_recv", kind, why));
        match self.state {
            QpState::Reset => return err(VerbsErrorKind::InvalidArgument, "QP is in RESET"),
            QpState::Err => {
                self.push_recv(counters, wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0, None);
                return Ok(());
            }
            _ => {}
        }
        if self.resp.rq.len() >= self.max_recv_wr as usize {
            return err(VerbsErrorKind::OutOfResources, "receive queue full");
        }
        if wr.sg_list.len() > self.max_recv_sge as usize {
            return err(VerbsErrorKind::InvalidArgument, "more SGEs than max_recv_sge");
        }
        let Some(len) = sgl::total_len(wr.sg_list) else {
            return err(VerbsErrorKind::InvalidArgument, "SGE lengths overflow");
        };
        self.resp.rq.push_back(RecvWqe {
            wr_id: wr.wr_id,
            sges: wr.sg_list.to_vec(),
            len,
        });
        Ok(())
    }

    pub(super) fn handle_packet(&mut self, ctx: &mut Ctx<'_>, packet: &Packet<'_>) {
        let request = packet.headers.bth.opcode.is_request();
        match (self.state, request) {
            (QpState::Rtr | QpState::Rts, true) => self.on_request(ctx, packet),
            (QpState::Rts, false) => self.on_response(ctx, packet),
            _ => ctx.counters.drop_qp_state += 1,
        }
    }

    pub(super) fn handle_timeout(&mut self, ctx: &mut Ctx<'_>) {
        if self.state == QpState::Rts {
            self.requester_timeout(ctx);
        }
    }

    pub(super) fn next_timeout(&self) -> Option<Time> {
        if self.state != QpState::Rts {
            return None;
        }
        [self.req.retry_deadline, self.req.rnr_until, self.req.rto_deadline]
            .into_iter()
            .flatten()
            .min()
    }

    /// The next packet of this QP: a pending fatal NAK, then responder
    /// output (ACKs, READ responses), then requester packets.
    pub(super) fn transmit(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<usize> {
        if let Some(nak) = self.resp.final_nak.take() {
            return self.emit_ack(ctx, buf, nak.psn, nak.aeth);
        }
        match self.state {
            QpState::Rtr => self.responder_transmit(ctx, buf),
            QpState::Rts => self
                .responder_transmit(ctx, buf)
                .or_else(|| self.requester_transmit(ctx, buf)),
            _ => None,
        }
    }

    pub(super) fn pseudo(&self, ctx: &Ctx<'_>) -> PseudoHeader {
        PseudoHeader {
            src: ctx.config.local,
            dst: self.attr.peer,
        }
    }

    pub(super) fn bth(&self, opcode: Opcode, psn: u32, ack_req: bool) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            pad_count: 0,
            pkey: DEFAULT_PKEY,
            dest_qp: self.attr.dest_qpn,
            ack_req,
            psn,
        }
    }

    pub(super) fn emit_ack(&self, ctx: &Ctx<'_>, buf: &mut [u8], psn: u32, aeth: AethRepr) -> Option<usize> {
        let h = Headers {
            bth: self.bth(Opcode::Acknowledge, psn, false),
            reth: None,
            aeth: Some(aeth),
            imm: None,
        };
        h.emit(0, &self.pseudo(ctx), buf, |_| {})
    }
}
