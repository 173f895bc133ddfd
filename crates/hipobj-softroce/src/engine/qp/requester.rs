//! The requester half of a QP: the send queue, go-back-N retransmission,
//! the local ACK timer and RNR back-off.
//!
//! PSNs are assigned when a work request is posted: a SEND or WRITE takes one
//! per packet, a READ one per response packet (its request carries the first).
//! `una` is the oldest PSN not yet acknowledged; the requester keeps at most
//! `window` PSNs in flight past it. A large READ goes out as several READ
//! requests of at most a window each, so that the responder's burst never
//! exceeds what the requester is ready to receive. The chunks are aligned
//! to the work request, so a READ sent again from a gap in the responses
//! asks for a tail of a request the responder has already seen.

use std::collections::VecDeque;

use hipobj_platform::{QpState, SendOp, SendWr, Sge, VerbsError, VerbsErrorKind, WcOpcode, WcStatus};

use super::{Attrs, Qp, rnr_delay};
use crate::engine::ahead::Ahead;
use crate::engine::loss::LossControl;
use crate::engine::{Ctx, Time};
use crate::mem::sgl;
use crate::wire::aeth::{AethRepr, Syndrome};
use crate::wire::psn;
use crate::wire::reth::RethRepr;
use crate::wire::{Headers, Opcode, Packet};
use reads::Reask;

mod reads;

/// A posted send work request.
#[derive(Debug)]
pub(crate) struct SendWqe {
    pub wr_id: u64,
    pub op: SendOp,
    pub sges: Vec<Sge>,
    pub len: u32,
    pub signaled: bool,
    pub first_psn: u32,
    pub npkts: u32,
}

impl SendWqe {
    pub(crate) fn end_psn(&self) -> u32 {
        psn::add(self.first_psn, self.npkts)
    }

    pub(crate) fn is_read(&self) -> bool {
        matches!(self.op, SendOp::Read { .. })
    }

    pub(crate) fn opcode(&self) -> WcOpcode {
        match self.op {
            SendOp::Send | SendOp::SendWithImm { .. } => WcOpcode::Send,
            SendOp::Write { .. } | SendOp::WriteWithImm { .. } => WcOpcode::RdmaWrite,
            SendOp::Read { .. } => WcOpcode::RdmaRead,
            SendOp::LocalInv { .. } => WcOpcode::LocalInv,
        }
    }

    /// Whether `p` is one of this request's PSNs.
    fn holds(&self, p: u32) -> bool {
        psn::diff(p, self.first_psn) < self.npkts
    }
}

#[derive(Debug, Default)]
pub(crate) struct Requester {
    pub sq: VecDeque<SendWqe>,
    /// PSN the next posted work request starts at.
    next_psn: u32,
    /// Oldest PSN not yet acknowledged (or READ data not yet received).
    una: u32,
    /// One past the highest PSN ever transmitted.
    max_sent: u32,
    /// Next packet to transmit: index into `sq` and packet within it.
    cursor_idx: usize,
    cursor_pkt: u32,
    retry_left: u8,
    rnr_left: u8,
    pub retry_deadline: Option<Time>,
    pub rnr_until: Option<Time>,
    /// End PSNs of READ requests whose responses are outstanding.
    reads_inflight: VecDeque<u32>,
    /// Every READ request sent for the first time whose responses have not
    /// all arrived, as (first PSN, end PSN): what a READ asked again may span.
    read_reqs: VecDeque<(u32, u32)>,
    /// The PSN of the last rewind caused by a NAK or a READ gap, so that a
    /// second NAK for it before any progress does not rewind again.
    last_rewind: Option<u32>,
    /// What the cursor last went back over, sending it all again
    /// (go-back-N): from the PSN it went back to up to `max_sent` then. A
    /// placing responder (`peer_places`) NAKs each gap it holds packets
    /// after as soon as it reaches it (once, even after a loss); when that
    /// gap lies in here and the cursor has passed it since, the packet is
    /// already on its way again, and going back for it would send the rest
    /// once more. Such a NAK acknowledges progress and is not answered; if
    /// the packet is lost too, the responder NAKs it again, with no
    /// progress, and that NAK is. (A responder that drops what follows a
    /// gap NAKs only a packet lost again: it is always answered.)
    resending: Option<(u32, u32)>,
    since_ack_req: u32,
    /// One past the highest PSN the responder has acknowledged (by ACK or
    /// NAK). `una` can lag behind it while a READ before it waits for
    /// responses sent again; when they come, `una` catches up.
    acked: u32,
    /// Round-trip and rate estimation, the window while losses come, the
    /// retransmission timer's arithmetic.
    loss: LossControl,
    /// The retransmission timer: when it fires with no progress since it
    /// was armed, the requester goes back to `una` without spending a retry.
    pub rto_deadline: Option<Time>,
    /// The next packet is the first one sent again after going back to
    /// `una`, the very PSN the responder is waiting for: if it is lost too,
    /// the responder, which NAKs a gap only once, drops everything after it
    /// in silence until the retransmission timer fires. It goes out twice;
    /// the responder executes one copy and takes the other as a duplicate
    /// (a WRITE or SEND packet is acknowledged, a READ request answered
    /// again from the same PSN, which replaces the answer still queued).
    twice: bool,
    /// READ responses placed past `una` after a response before them was
    /// lost (see [`Ahead`]).
    ahead: Ahead,
    /// The responder places WRITE middle packets that arrive after a loss
    /// (see [`Ahead`]): after a sequence NAK it acknowledged PSNs this
    /// requester had not sent again since. Then a NAK for a middle packet
    /// of a WRITE costs that packet alone: it goes out (twice) and the
    /// cursor returns to where it was (`resume_at`), instead of sending
    /// everything after it again. A responder that drops what follows a
    /// gap, as IBA has it (the kernel's rxe does), never acknowledges past
    /// what was sent again, so this is never set for it.
    peer_places: bool,
    /// The PSN a sequence NAK made this requester go back to, until an
    /// acknowledgement passes it (see `peer_places`).
    nak_rewind: Option<u32>,
    /// Where the cursor returns once the packet a NAK asked for went out.
    resume_at: Option<u32>,
    /// The responder holds what it was sent between `una` and this PSN,
    /// gaps aside, from a NAK that returned the cursor (see
    /// `peer_places`): none of it is in flight, and the window does not
    /// count it. It stays while `una` moves from gap to gap below it (each
    /// gap is NAKed as the responder reaches it), so that filling the gaps
    /// one round trip after another does not close the window on new
    /// packets.
    held_to: Option<u32>,
    /// A READ asked again for the responses missing from `una` on (see
    /// [`Reask`]); one at a time.
    reask: Option<Reask>,
}

impl Requester {
    /// The WRITE that `p` is a packet of (WRITEs are the only requests a
    /// responder places packets of, and so NAKs as it reaches them).
    fn write_holding(&self, p: u32) -> Option<&SendWqe> {
        self.sq
            .iter()
            .find(|w| w.holds(p))
            .filter(|w| w.opcode() == WcOpcode::RdmaWrite)
    }

    /// The packets after `una` that the responder holds (see `held_to`).
    fn peer_holds(&self) -> u32 {
        match self.held_to {
            Some(h) if psn::lt(self.una, h) => psn::diff(h, self.una) - 1,
            _ => 0,
        }
    }

    /// Whether a WRITE's lost packet costs only itself (see `peer_places`
    /// and [`LossControl::placing`]).
    fn placing(&self) -> bool {
        self.loss.placing(self.peer_places)
    }

    /// Entering RTS with `sq_psn`.
    pub(crate) fn start(&mut self, sq_psn: u32, attr: &Attrs) {
        let p = sq_psn & psn::MASK;
        self.next_psn = p;
        self.una = p;
        self.max_sent = p;
        self.acked = p;
        self.read_reqs.clear();
        self.loss = LossControl::default();
        self.rto_deadline = None;
        self.twice = false;
        self.ahead.clear();
        self.reask = None;
        self.peer_places = false;
        self.nak_rewind = None;
        self.resume_at = None;
        self.held_to = None;
        self.resending = None;
        self.cursor_idx = 0;
        self.cursor_pkt = 0;
        self.retry_left = attr.retry_cnt;
        self.rnr_left = attr.rnr_retry;
        self.sq.clear();
    }

    /// Stops every timer (the QP left RTS).
    pub(crate) fn halt(&mut self) {
        self.retry_deadline = None;
        self.rto_deadline = None;
        self.rnr_until = None;
        self.reads_inflight.clear();
        self.ahead.clear();
        self.reask = None;
        self.cursor_idx = 0;
        self.cursor_pkt = 0;
    }

    fn cursor_psn(&self) -> u32 {
        match self.sq.get(self.cursor_idx) {
            Some(w) => psn::add(w.first_psn, self.cursor_pkt),
            None => self.next_psn,
        }
    }

    /// Puts the cursor on PSN `p`.
    fn seek(&mut self, p: u32) {
        for (i, w) in self.sq.iter().enumerate() {
            if w.holds(p) {
                self.cursor_idx = i;
                self.cursor_pkt = psn::diff(p, w.first_psn);
                return;
            }
        }
        self.cursor_idx = self.sq.len();
        self.cursor_pkt = 0;
    }

    fn index_of(&self, p: u32) -> usize {
        self.sq.iter().position(|w| w.holds(p)).unwrap_or(0)
    }
}

/// A packet the requester is about to send: its headers, where its
/// payload starts in the work request and how long it is, and how far the
/// cursor moves past it (a READ request moves it past every response it
/// asks for).
struct Next {
    headers: Headers,
    off: u32,
    plen: u32,
    advance: u32,
    is_read: bool,
    /// Packets in the work request.
    npkts: u32,
}

/// The opcode, immediate and RETH of a SEND or WRITE packet, `first`
/// and/or `last` of a message of `len` bytes; `None` for another
/// operation.
fn packet_kind(
    op: SendOp,
    first: bool,
    last: bool,
    len: u32,
) -> Option<(Opcode, Option<u32>, Option<RethRepr>)> {
    Some(match op {
        SendOp::Send | SendOp::SendWithImm { .. } => {
            let imm = match op {
                SendOp::SendWithImm { imm } if last => Some(imm),
                _ => None,
            };
            let opcode = match (first, last, imm.is_some()) {
                (true, true, false) => Opcode::SendOnly,
                (true, true, true) => Opcode::SendOnlyImm,
                (true, false, _) => Opcode::SendFirst,
                (false, false, _) => Opcode::SendMiddle,
                (false, true, false) => Opcode::SendLast,
                (false, true, true) => Opcode::SendLastImm,
            };
            (opcode, imm, None)
        }
        SendOp::Write { remote_addr, rkey }
        | SendOp::WriteWithImm {
            remote_addr, rkey, ..
        } => {
            let imm = match op {
                SendOp::WriteWithImm { imm, .. } if last => Some(imm),
                _ => None,
            };
            let reth = first.then_some(RethRepr {
                va: remote_addr,
                rkey,
                dma_len: len,
            });
            let opcode = match (first, last, imm.is_some()) {
                (true, true, false) => Opcode::WriteOnly,
                (true, true, true) => Opcode::WriteOnlyImm,
                (true, false, _) => Opcode::WriteFirst,
                (false, false, _) => Opcode::WriteMiddle,
                (false, true, false) => Opcode::WriteLast,
                (false, true, true) => Opcode::WriteLastImm,
            };
            (opcode, imm, reth)
        }
        SendOp::Read { .. } | SendOp::LocalInv { .. } => return None,
    })
}

fn post_err(kind: VerbsErrorKind, why: &str) -> Result<(), VerbsError> {
    Err(VerbsError::new("ibv_post_send", kind, why))
}

impl Qp {
    pub(crate) fn post_send(&mut self, ctx: &mut Ctx<'_>, wr: &SendWr<'_>) -> Result<(), VerbsError> {
        let len = sgl::total_len(wr.sg_list).filter(|&l| l <= 1 << 31);
        match self.state {
            QpState::Rts => {}
            QpState::Err => {
                let op = SendWqe {
                    wr_id: wr.wr_id,
                    op: wr.op,
                    sges: Vec::new(),
                    len: len.unwrap_or(0),
                    signaled: true,
                    first_psn: 0,
                    npkts: 0,
                };
                let wc = self.send_wc(wr.wr_id, op.opcode(), WcStatus::WrFlushErr, op.len);
                self.push_send(ctx.counters, wc);
                return Ok(());
            }
            _ => return post_err(VerbsErrorKind::InvalidArgument, "QP is not in RTS"),
        }
        if self.req.sq.len() >= self.max_send_wr as usize {
            return post_err(VerbsErrorKind::OutOfResources, "send queue full");
        }
        if wr.sg_list.len() > self.max_send_sge as usize {
            return post_err(VerbsErrorKind::InvalidArgument, "more SGEs than max_send_sge");
        }
        let Some(len) = len else {
            return post_err(VerbsErrorKind::InvalidArgument, "message longer than 2^31 bytes");
        };
        let npkts = len.div_ceil(self.attr.mtu).max(1);
        let first_psn = self.req.next_psn;
        self.req.next_psn = psn::add(first_psn, npkts);
        self.req.sq.push_back(SendWqe {
            wr_id: wr.wr_id,
            op: wr.op,
            sges: wr.sg_list.to_vec(),
            len,
            signaled: wr.signaled || self.sq_sig_all,
            first_psn,
            npkts,
        });
        Ok(())
    }

    fn arm_retry(&mut self, now: Time) {
        self.req.retry_deadline = self.attr.ack_timeout().map(|t| now + t);
    }

    /// The packets in flight that the retransmission timer waits for:
    /// those past `una`, less what the responder is known to hold.
    fn outstanding(&self) -> u32 {
        let r = &self.req;
        psn::diff(r.max_sent, r.una).saturating_sub(r.ahead.held() + r.peer_holds())
    }

    /// When the retransmission timer armed last fires (see
    /// [`LossControl::rto`]).
    fn rto_deadline(&self) -> Option<Time> {
        self.req
            .loss
            .deadline(self.outstanding(), self.attr.ack_timeout())
    }

    fn arm_rto(&mut self, now: Time) {
        self.req.loss.arm(now);
        self.req.rto_deadline = self.rto_deadline();
    }

    /// A loss was seen (a sequence NAK, a NAK implied by READ responses, the
    /// local ACK timer): see [`LossControl::on_loss`].
    fn on_loss(&mut self, ctx: &Ctx<'_>) {
        let peer_places = self.req.peer_places;
        self.req.loss.on_loss(ctx.config.window, peer_places);
    }

    pub(crate) fn requester_transmit(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<usize> {
        if let Some(until) = self.req.rnr_until {
            if ctx.now < until {
                return None;
            }
            self.req.rnr_until = None;
        }
        if let Some(len) = self.transmit_reask(ctx, buf) {
            return Some(len);
        }
        let full = ctx.config.window.max(1);
        let r = &self.req;
        let wqe = r.sq.get(r.cursor_idx)?;
        // A READ's lost responses are asked for alone (see `Reask`), so a
        // loss costs no window of them: READs keep the whole window.
        let window = r.loss.allowance(full, wqe.is_read() && ctx.config.place_ahead);
        let p = psn::add(wqe.first_psn, r.cursor_pkt);
        // READ responses placed ahead have arrived: they are not in flight.
        let in_flight = psn::diff(p, r.una).saturating_sub(r.ahead.held() + r.peer_holds());
        if in_flight >= window {
            return None;
        }
        let next = match wqe.op {
            SendOp::Read { remote_addr, rkey } => {
                self.read_request(ctx, wqe, p, (remote_addr, rkey), window, in_flight)?
            }
            op => self.send_or_write(ctx, wqe, op, p, window, in_flight)?,
        };
        let len = self.emit(ctx, &next, buf)?;
        self.sent(ctx, p, &next);
        Some(len)
    }

    /// The next READ request of `wqe`, from PSN `p`: how many responses it
    /// asks for, `None` if it must wait.
    fn read_request(
        &self,
        ctx: &Ctx<'_>,
        wqe: &SendWqe,
        p: u32,
        (remote_addr, rkey): (u64, u32),
        window: u32,
        in_flight: u32,
    ) -> Option<Next> {
        let r = &self.req;
        let full = ctx.config.window.max(1);
        let mtu = self.attr.mtu;
        if r.reads_inflight.len() >= usize::from(self.attr.max_rd_atomic.max(1)) {
            return None;
        }
        let left = wqe.npkts - r.cursor_pkt;
        let chunk = if !psn::lt(p, r.max_sent) {
            // A new request: at most `read_chunk` responses, and no
            // more than the window, so that after a loss the
            // responder's burst (which the requester cannot stop)
            // shrinks with it.
            ctx.config
                .read_chunk
                .clamp(1, full)
                .min((window / 2).max(1))
                .min(left)
        } else {
            // Asked again: a duplicate READ must lie inside one
            // request the responder executed (it must not reach PSNs
            // the responder has not, and rxe refuses one that spans
            // two). From inside a request, responses from it came,
            // so it was executed and any part of it will do: ask for
            // no more than the window. From its start the request
            // itself may be the one lost: send it whole, as before.
            match r.read_reqs.iter().find(|&&(f, e)| psn::le(f, p) && psn::lt(p, e)) {
                Some(&(f, e)) if f == p => psn::diff(e, p),
                Some(&(_, e)) => psn::diff(e, p).min((window / 2).max(1)),
                None => return None,
            }
        };
        if in_flight > 0 && in_flight + chunk > window {
            return None;
        }
        let off = r.cursor_pkt * mtu;
        let bytes = (wqe.len - off).min(chunk * mtu);
        let reth = RethRepr {
            va: remote_addr.wrapping_add(u64::from(off)),
            rkey,
            dma_len: bytes,
        };
        let headers = Headers {
            bth: self.bth(Opcode::ReadRequest, p, true),
            reth: Some(reth),
            aeth: None,
            imm: None,
        };
        Some(Next {
            headers,
            off,
            plen: 0,
            advance: chunk,
            is_read: true,
            npkts: wqe.npkts,
        })
    }

    /// The next packet of the SEND or WRITE `wqe`, PSN `p`; it asks for an
    /// ACK at the end of the message, every `ack_every` packets (at least
    /// four times a window) and when it fills the window.
    fn send_or_write(
        &self,
        ctx: &Ctx<'_>,
        wqe: &SendWqe,
        op: SendOp,
        p: u32,
        window: u32,
        in_flight: u32,
    ) -> Option<Next> {
        let r = &self.req;
        let mtu = self.attr.mtu;
        let off = r.cursor_pkt * mtu;
        let plen = (wqe.len - off).min(mtu);
        let first = r.cursor_pkt == 0;
        let last = r.cursor_pkt + 1 == wqe.npkts;
        let (opcode, imm, reth) = packet_kind(op, first, last, wqe.len)?;
        let every = ctx.config.ack_every.min((window / 4).max(1));
        let ack_req = last || r.since_ack_req + 1 >= every || in_flight + 1 >= window;
        let headers = Headers {
            bth: self.bth(opcode, p, ack_req),
            reth,
            aeth: None,
            imm,
        };
        Some(Next {
            headers,
            off,
            plen,
            advance: 1,
            is_read: false,
            npkts: wqe.npkts,
        })
    }

    /// Writes the packet `next` into `buf`, its payload gathered from the
    /// work request at the cursor (a local protection error fails the QP).
    fn emit(&mut self, ctx: &mut Ctx<'_>, next: &Next, buf: &mut [u8]) -> Option<usize> {
        let plen = next.plen as usize;
        let hlen = next.headers.header_len();
        if buf.len() < next.headers.datagram_len(plen) {
            return None;
        }
        if plen > 0 {
            let wqe = self.req.sq.get(self.req.cursor_idx)?;
            let dst = &mut buf[hlen..hlen + plen];
            if sgl::gather(ctx.mrs, self.pd, &wqe.sges, next.off as usize, dst).is_err() {
                let at = self.req.cursor_idx;
                self.enter_error(ctx.counters, Some((at, WcStatus::LocProtErr)));
                return None;
            }
        }
        next.headers.emit(plen, &self.pseudo(ctx), buf, |_| {})
    }

    /// The packet `next`, PSN `p`, went out: counts a retransmission,
    /// times it, moves the cursor past it (or keeps it for the second copy,
    /// see `twice`), and arms the timers.
    fn sent(&mut self, ctx: &mut Ctx<'_>, p: u32, next: &Next) {
        let r = &mut self.req;
        if psn::lt(p, r.max_sent) {
            ctx.counters.retransmits += 1;
        }
        let end = psn::add(p, next.advance);
        let fresh = !psn::lt(p, r.max_sent);
        r.loss.on_sent(p, ctx.now);
        if psn::lt(r.max_sent, end) {
            r.max_sent = end;
        }
        if next.is_read {
            r.reads_inflight.push_back(end);
            if fresh {
                r.read_reqs.push_back((p, end));
            }
        }
        r.since_ack_req = if next.headers.bth.ack_req {
            0
        } else {
            r.since_ack_req + 1
        };
        let second = !r.twice;
        if r.twice {
            // The first packet after going back goes out twice (see `twice`):
            // the cursor stays for the second copy.
            r.twice = false;
        } else {
            r.cursor_pkt += next.advance;
        }
        if r.cursor_pkt >= next.npkts {
            r.cursor_idx += 1;
            r.cursor_pkt = 0;
        }
        if second && let Some(to) = r.resume_at.take() {
            // The packet a NAK asked for is out; the responder holds what
            // follows it (see `peer_places`).
            r.seek(to);
        }
        if r.retry_deadline.is_none() {
            self.arm_retry(ctx.now);
        }
        if self.req.rto_deadline.is_none() {
            self.arm_rto(ctx.now);
        }
    }

    /// Moves `una` forward to `to` if that is progress. With `clip`, an ACK
    /// may not acknowledge into a READ whose data has not all arrived.
    /// Completes every work request that is now done. Returns whether `una`
    /// moved.
    fn advance(&mut self, ctx: &mut Ctx<'_>, to: u32, clip: bool) -> bool {
        let r = &mut self.req;
        if !psn::lt(r.una, to) || !psn::le(to, r.max_sent) {
            return false;
        }
        let mut target = to;
        if clip && let Some(read) = r.sq.iter().find(|w| w.is_read()) {
            let start = if psn::lt(r.una, read.first_psn) {
                read.first_psn
            } else {
                r.una
            };
            if psn::lt(start, target) {
                target = start;
            }
        }
        if !psn::lt(r.una, target) {
            return false;
        }
        let acked_now = psn::diff(target, r.una);
        r.una = target;
        if r.held_to.is_some_and(|h| psn::le(h, target)) {
            r.held_to = None;
        }
        // Responses placed ahead were counted as delivered when they came.
        let passed = r.ahead.shift(acked_now);
        if r.reask.is_some_and(|q| psn::le(q.end(), target)) {
            r.reask = None;
        }
        if psn::lt(r.acked, target) {
            r.acked = target;
        }
        r.retry_left = self.attr.retry_cnt;
        r.rnr_left = self.attr.rnr_retry;
        r.last_rewind = None;
        // The window grows back; round-trip and rate samples (see
        // `LossControl::on_ack`).
        let peer_places = r.peer_places;
        r.loss
            .on_ack(target, acked_now, passed, ctx.config.window, peer_places, ctx.now);
        while r.reads_inflight.front().is_some_and(|&end| psn::le(end, target)) {
            r.reads_inflight.pop_front();
        }
        while r.read_reqs.front().is_some_and(|&(_, end)| psn::le(end, target)) {
            r.read_reqs.pop_front();
        }
        if let Some(k) = r.nak_rewind.take() {
            // Acknowledged past what was sent again since the NAK: the
            // responder kept what came after the gap.
            if psn::lt(k, target) && psn::lt(r.cursor_psn(), target) {
                r.peer_places = true;
            }
        }
        if psn::lt(r.cursor_psn(), target) {
            r.seek(target);
            r.resume_at = None;
        }
        self.complete_done(ctx);
        if self.req.una == self.req.max_sent {
            self.req.retry_deadline = None;
            self.req.rto_deadline = None;
            self.req.loss.on_idle();
        } else {
            self.arm_retry(ctx.now);
            self.arm_rto(ctx.now);
        }
        true
    }

    /// Completes work requests at the head of the queue whose every PSN is
    /// acknowledged.
    fn complete_done(&mut self, ctx: &mut Ctx<'_>) {
        while let Some(w) = self.req.sq.front() {
            if !psn::le(w.end_psn(), self.req.una) {
                break;
            }
            let Some(w) = self.req.sq.pop_front() else { break };
            self.req.cursor_idx = self.req.cursor_idx.saturating_sub(1);
            if w.signaled {
                let wc = self.send_wc(w.wr_id, w.opcode(), WcStatus::Success, w.len);
                self.push_send(ctx.counters, wc);
            }
        }
    }

    fn rewind(&mut self, ctx: &mut Ctx<'_>, to: u32) {
        ctx.counters.rewinds += 1;
        let r = &mut self.req;
        // Karn: no round-trip sample from a PSN that will be sent again.
        r.loss.on_rewind();
        r.seek(to);
        r.reads_inflight.clear();
        r.reask = None;
        r.resume_at = None;
        r.held_to = None;
        // An acknowledgement past the cursor says nothing about placing once
        // the cursor went back for another reason (the timer): the copies
        // sent before it are acknowledged as it starts over.
        r.nak_rewind = None;
        r.resending = Some((to, r.max_sent));
        r.since_ack_req = 0;
        r.twice = false;
    }

    /// A response (ACK, NAK or READ response) arrived at a QP in RTS.
    pub(crate) fn on_response(&mut self, ctx: &mut Ctx<'_>, packet: &Packet<'_>) {
        let h = &packet.headers;
        match (h.bth.opcode, h.aeth) {
            (Opcode::Acknowledge, Some(aeth)) => self.on_ack(ctx, h.bth.psn, aeth),
            (
                Opcode::ReadResponseFirst
                | Opcode::ReadResponseMiddle
                | Opcode::ReadResponseLast
                | Opcode::ReadResponseOnly,
                _,
            ) => self.on_read_response(ctx, h.bth.psn, packet.payload),
            _ => ctx.counters.drop_unexpected += 1,
        }
    }

    fn on_ack(&mut self, ctx: &mut Ctx<'_>, p: u32, aeth: AethRepr) {
        let (una, max_sent) = (self.req.una, self.req.max_sent);
        // A NAK names a PSN in [una, max_sent); an ACK one in [una - 1, max_sent).
        let in_range = psn::le(una, p) && psn::lt(p, max_sent);
        match aeth.syndrome {
            Syndrome::Ack { .. } => {
                let to = psn::add(p, 1);
                if psn::le(to, max_sent) {
                    self.note_acked(to);
                    // Stale ACKs (behind una) make no progress and change nothing.
                    self.advance(ctx, to, true);
                    // An ACK past a READ whose responses have not all come
                    // says they were lost (the responder sends them before
                    // anything later): a NAK in all but name. Ask again from
                    // the first missing response: for the gap alone when
                    // responses after it were placed (unless that question
                    // is out already), else for all the rest.
                    let una = self.req.una;
                    if psn::lt(una, to) {
                        if !self.req.ahead.is_empty() {
                            if self.req.reask.is_none() {
                                self.ask_again(ctx);
                            }
                        } else {
                            self.retry_implied(ctx);
                        }
                    }
                } else {
                    ctx.counters.drop_unexpected += 1;
                }
            }
            Syndrome::NakSequence if in_range => {
                // The NAK acknowledges everything before `p`, except READ
                // responses that never came: `una` stops at the first one
                // missing, and the retry starts there.
                self.note_acked(p);
                let progressed = self.advance(ctx, p, true);
                let una = self.req.una;
                if self.req.rnr_until.is_some() || (!progressed && self.req.last_rewind == Some(una)) {
                    return;
                }
                // The cursor went back over `una` and has passed it since:
                // the packet is on its way again (see `resending`).
                let resent = self.req.resending.is_some_and(|(from, end)| {
                    psn::le(from, una) && psn::lt(una, end) && psn::lt(una, self.req.cursor_psn())
                });
                if resent && progressed && self.req.peer_places && self.req.write_holding(una).is_some() {
                    return;
                }
                let resume = self.placed_after(una);
                if self.retry(ctx) {
                    // Only a NAK for a packet not sent again before it came
                    // can show that the responder keeps what follows a gap:
                    // after a NAK the timer already answered, copies sent
                    // before it are acknowledged as the cursor starts over.
                    self.req.nak_rewind = (!resent).then_some(una);
                    self.req.resume_at = resume;
                    self.req.held_to = resume;
                    if resume.is_some() {
                        self.req.resending = None;
                    }
                }
            }
            Syndrome::RnrNak { timer } if in_range => {
                self.advance(ctx, p, true);
                if self.attr.rnr_retry != 7 {
                    if self.req.rnr_left == 0 {
                        let at = self.req.index_of(p);
                        self.enter_error(ctx.counters, Some((at, WcStatus::RnrRetryExcErr)));
                        return;
                    }
                    self.req.rnr_left -= 1;
                }
                let una = self.req.una;
                self.rewind(ctx, una);
                self.req.rnr_until = Some(ctx.now + rnr_delay(timer));
                self.req.retry_deadline = None;
                self.req.rto_deadline = None;
            }
            Syndrome::NakInvalidRequest
            | Syndrome::NakRemoteAccess
            | Syndrome::NakRemoteOperational
            | Syndrome::NakInvalidRdRequest
                if in_range =>
            {
                self.advance(ctx, p, true);
                let status = match aeth.syndrome {
                    Syndrome::NakRemoteAccess => WcStatus::RemAccessErr,
                    Syndrome::NakRemoteOperational => WcStatus::RemOpErr,
                    _ => WcStatus::RemInvReqErr,
                };
                let at = self.req.index_of(p);
                self.enter_error(ctx.counters, Some((at, status)));
            }
            _ => ctx.counters.drop_unexpected += 1,
        }
    }

    fn note_acked(&mut self, to: u32) {
        if psn::lt(self.req.acked, to) {
            self.req.acked = to;
        }
    }

    pub(crate) fn requester_timeout(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        if self.req.rnr_until.is_some_and(|t| t <= now) {
            self.req.rnr_until = None;
        }
        if self.req.rto_deadline.is_some_and(|t| t <= now) {
            // The timeout counts what is in flight when it fires, which may
            // be more than when the timer was armed (the window was still
            // filling): then it waits for that.
            let later = self.rto_deadline().filter(|&t| t > now);
            if later.is_some() {
                self.req.rto_deadline = later;
            }
        }
        if self.req.rto_deadline.is_some_and(|t| t <= now) {
            self.req.rto_deadline = None;
            if self.req.reask.is_some() && !self.req.ahead.is_empty() && self.req.rnr_until.is_none() {
                // The READ asked again, or its answer, was lost: ask again
                // for the gap at `una`. What was placed ahead stays.
                ctx.counters.rto_rewinds += 1;
                self.req.loss.on_reask_timeout();
                self.req.reask = None;
                self.ask_again(ctx);
                self.arm_rto(now);
            } else if self.req.una != self.req.max_sent && self.req.rnr_until.is_none() {
                // Nothing came back for a few round trips: the retransmission
                // (or the NAK asking for it) was lost, or the tail of a
                // message was. Go back now rather than at the local ACK
                // timeout; this is not one of retry_cnt's retries.
                ctx.counters.rto_rewinds += 1;
                let (max_sent, peer_places) = (self.req.max_sent, self.req.peer_places);
                self.req.loss.on_timeout(max_sent, ctx.config.window, peer_places);
                let una = self.req.una;
                self.rewind(ctx, una);
                self.req.last_rewind = None;
                self.req.twice = true;
                self.arm_rto(now);
            }
        }
        let Some(deadline) = self.req.retry_deadline else {
            return;
        };
        if deadline > now {
            return;
        }
        if self.req.una == self.req.max_sent {
            self.req.retry_deadline = None;
            return;
        }
        ctx.counters.timeouts += 1;
        if self.retry(ctx) {
            self.req.twice = false;
            self.req.last_rewind = None;
            self.arm_retry(now);
        }
    }

    /// After a sequence NAK for `p`, where the cursor may return once `p`
    /// went out again, if the responder places what follows a gap
    /// (`peer_places`): the packets after `p` it holds are the middle
    /// packets of `p`'s WRITE sent so far, so the cursor returns to the
    /// first not sent, or to the WRITE's Last packet, whichever is first.
    /// `None` where the whole rest goes out again.
    fn placed_after(&self, p: u32) -> Option<u32> {
        let r = &self.req;
        if !r.placing() {
            return None;
        }
        let w = r.write_holding(p)?;
        if p == w.first_psn {
            return None;
        }
        let last = psn::add(w.end_psn(), psn::MASK);
        let to = if psn::lt(r.max_sent, last) {
            r.max_sent
        } else {
            last
        };
        psn::lt(psn::add(p, 1), to).then_some(to)
    }

    /// A NAK implied by READ responses (a gap, or an ACK past missing
    /// ones): goes back to `una` (`retry`) unless it already went back to
    /// that very PSN, since every later response past the same gap says
    /// the same.
    fn retry_implied(&mut self, ctx: &mut Ctx<'_>) {
        if self.req.last_rewind != Some(self.req.una) {
            self.retry(ctx);
        }
    }

    /// Goes back to `una` and sends again from there, spending one of
    /// retry_cnt retries: a local ACK timeout, a sequence NAK, or a NAK
    /// implied by a READ response gap. IBA resets the count on forward
    /// progress (`advance`); with none left the work request at `una`
    /// completes with RETRY_EXC_ERR and the QP moves to ERR. Returns whether
    /// the QP is still sending.
    fn retry(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let una = self.req.una;
        if self.req.retry_left == 0 {
            let at = self.req.index_of(una);
            self.enter_error(ctx.counters, Some((at, WcStatus::RetryExcErr)));
            return false;
        }
        self.req.retry_left -= 1;
        self.on_loss(ctx);
        self.rewind(ctx, una);
        self.req.last_rewind = Some(una);
        // After a NAK (said or implied) the peer is there and waiting for
        // `una`; after a local ACK timeout it may not be, and each try is
        // one packet, as verbs counts them.
        self.req.twice = true;
        self.arm_rto(ctx.now);
        true
    }
}
