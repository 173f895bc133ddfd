//! The responder half of a QP: PSN checks, memory-key checks, executing
//! WRITEs and SENDs into memory, answering READs, and the ACKs, NAKs and
//! READ responses that go back, in order.

use std::collections::VecDeque;

use hipobj_platform::{AccessFlags, WcOpcode, WcStatus};

use super::{Qp, RecvWqe};
use crate::engine::Ctx;
use crate::engine::ahead::Ahead;
use crate::mem::{access, sgl};
use crate::wire::aeth::{AethRepr, CREDITS_INVALID, Syndrome};
use crate::wire::{Headers, Opcode, Packet, psn};

/// An ACK or NAK to send: its PSN and AETH.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AckOut {
    pub psn: u32,
    pub aeth: AethRepr,
    /// Copies still to send: 1, or 2 while the link has been losing
    /// packets (see [`LOSSY_SPAN`]).
    pub copies: u8,
}

/// A READ being answered.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadStream {
    psn: u32,
    va: u64,
    rkey: u32,
    remaining: u32,
    index: u32,
    npkts: u32,
    msn: u32,
    /// Answers a duplicate READ: it takes none of the responder's
    /// `max_dest_rd_atomic` slots, as the request it repeats took one.
    again: bool,
    /// The first response is still to go out a second time. A READ asked
    /// again is the requester going back to the first response it misses,
    /// and it takes a gap in the responses that follow as that loss, once
    /// per PSN gone back to: if the first one is lost again, the rest of
    /// the stream says nothing new and the requester waits out its
    /// retransmission timer. So the first response of an answer to a
    /// duplicate READ goes out twice (the requester takes the second copy
    /// as a duplicate), as the requester sends the first packet after going
    /// back twice.
    twice: bool,
}

/// Responder output, sent strictly in this order: an ACK must never overtake
/// the READ responses before it, or it would acknowledge the READ.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Out {
    Ack(AckOut),
    Read(ReadStream),
}

/// A WRITE in progress (its First packet was accepted).
#[derive(Clone, Copy, Debug)]
struct WriteCtx {
    rkey: u32,
    va: u64,
    remaining: u32,
    total: u32,
}

#[derive(Debug, Default)]
pub(crate) struct Responder {
    /// The PSN expected next.
    epsn: u32,
    /// Messages completed (24 bits).
    msn: u32,
    /// Whether a sequence-error (or RNR) NAK was sent for the current gap.
    nak_sent: bool,
    write: Option<WriteCtx>,
    /// Middle packets of the WRITE in progress placed ahead of `epsn` after
    /// a loss (see [`Ahead`]): when the missing packet comes, `epsn` moves
    /// past them at once, and the ACK says so.
    ahead: Ahead,
    /// Bytes of the SEND in progress received into the head receive.
    send_offset: Option<u32>,
    pub rq: VecDeque<RecvWqe>,
    out: VecDeque<Out>,
    /// A fatal NAK sent even though the QP is in ERR.
    pub final_nak: Option<AckOut>,
    /// The READs executed most recently, as (first PSN, PSNs, MSN), so that
    /// the responses to a duplicate READ carry the MSN the READ got when
    /// it was executed.
    reads_done: VecDeque<(u32, u32, u32)>,
    /// Requests still to execute before the link counts as clean again: set
    /// to [`LOSSY_SPAN`] by every sequence error and duplicate (signs that
    /// packets in either direction were lost), counted down by each request
    /// executed. While it is above zero each ACK and NAK goes out twice.
    lossy: u32,
}

/// How many requests after the last sign of loss the responder keeps sending
/// its ACKs and NAKs twice. On a lossy link the one ACK a window asks for,
/// or the one NAK a gap gets, is all the requester has to go on: when it is
/// lost the requester waits out its retransmission timer, idle, and then
/// sends the window again. A second copy makes that a loss squared. Only the
/// same packet is repeated, so what it says is unchanged: the requester
/// ignores an ACK that makes no progress and does not count a NAK for the
/// PSN it has already gone back to as a new retry (the kernel's rxe does
/// likewise). On a clean link nothing is repeated.
const LOSSY_SPAN: u32 = 1024;

/// READs remembered for their MSN (a requester goes back at most a window,
/// which holds fewer READs than this unless they are tiny).
const READS_REMEMBERED: usize = 256;

impl Responder {
    /// Entering RTR with `rq_psn`.
    pub(crate) fn start(&mut self, rq_psn: u32) {
        self.epsn = rq_psn & psn::MASK;
        self.msn = 0;
        self.nak_sent = false;
        self.write = None;
        self.ahead.clear();
        self.send_offset = None;
        self.out.clear();
        self.reads_done.clear();
        self.lossy = 0;
    }

    /// Stops all output but a pending fatal NAK (the QP entered ERR).
    pub(crate) fn halt(&mut self) {
        self.out.clear();
        self.write = None;
        self.ahead.clear();
        self.send_offset = None;
    }

    fn aeth(&self, syndrome: Syndrome) -> AethRepr {
        AethRepr {
            syndrome,
            msn: self.msn,
        }
    }

    /// Queues an ACK or NAK, replacing a trailing ACK or sequence NAK when
    /// the new one says everything the old one did. A sequence NAK for PSN
    /// `n` also acknowledges everything before `n`, so an ACK for an earlier
    /// PSN (a duplicate's) adds nothing to it and must not replace it: the
    /// NAK is the only one this gap gets.
    fn queue(&mut self, psn: u32, syndrome: Syndrome) {
        let copies = if self.lossy > 0 { 2 } else { 1 };
        self.queue_copies(psn, syndrome, copies);
    }

    /// `queue` with the number of copies given.
    fn queue_copies(&mut self, psn: u32, syndrome: Syndrome, copies: u8) {
        let ack = AckOut {
            psn,
            aeth: self.aeth(syndrome),
            copies,
        };
        if let Some(Out::Ack(last)) = self.out.back_mut() {
            match (last.aeth.syndrome, syndrome) {
                (Syndrome::NakSequence, Syndrome::Ack { .. }) if psn::lt(psn, last.psn) => return,
                (Syndrome::Ack { .. } | Syndrome::NakSequence, _) => {
                    *last = ack;
                    return;
                }
                _ => {}
            }
        }
        self.out.push_back(Out::Ack(ack));
    }

    fn queue_ack(&mut self) {
        let p = psn::add(self.epsn, psn::MASK);
        self.queue(
            p,
            Syndrome::Ack {
                credits: CREDITS_INVALID,
            },
        );
    }

    /// Drops the queued READ responses for PSNs in `[from, from + n)`: a
    /// READ asked again for them is answered instead.
    /// A stream that lies inside goes, one that reaches in loses that part
    /// (its start or its end), and one that holds the whole range stops
    /// before it (the requester asks again for its rest if it needs it).
    fn drop_responses(&mut self, from: u32, n: u32, mtu: u32) {
        let to = psn::add(from, n);
        self.out.retain_mut(|o| {
            let Out::Read(s) = o else { return true };
            let left = s.npkts - s.index;
            let end = psn::add(s.psn, left);
            let head_in = psn::le(from, s.psn) && psn::lt(s.psn, to);
            if head_in && psn::le(end, to) {
                return false;
            }
            if head_in {
                let skip = psn::diff(to, s.psn);
                s.psn = to;
                s.va = s.va.wrapping_add(u64::from(skip * mtu));
                s.remaining -= skip * mtu;
                s.index += skip;
                s.twice = false;
            } else if psn::lt(s.psn, from) && psn::lt(from, end) {
                // The packets kept are all full ones: the stream's last is
                // at or after `from`.
                let keep = psn::diff(from, s.psn);
                s.remaining = keep * mtu;
                s.npkts = s.index + keep;
            }
            true
        });
    }

    /// The MSN of the READ executed earlier that holds PSN `p`, if it is
    /// remembered.
    fn read_msn(&self, p: u32) -> Option<u32> {
        self.reads_done
            .iter()
            .rev()
            .find(|&&(first, n, _)| psn::diff(p, first) < n)
            .map(|&(_, _, msn)| msn)
    }

    fn reads_queued(&self) -> usize {
        self.out
            .iter()
            .filter(|o| matches!(o, Out::Read(s) if !s.again))
            .count()
    }
}

/// How a request ends when it cannot be executed.
enum Refusal {
    /// No receive posted: RNR NAK, try again later.
    NotReady,
    /// Fatal: NAK with this syndrome, QP to ERR.
    Fatal(Syndrome),
}

impl Qp {
    /// A fatal NAK for PSN `p`: the QP moves to ERR and the NAK still goes out.
    fn fatal(&mut self, ctx: &mut Ctx<'_>, p: u32, syndrome: Syndrome) {
        ctx.counters.naks_fatal += 1;
        let aeth = self.resp.aeth(syndrome);
        self.enter_error(ctx.counters, None);
        self.resp.final_nak = Some(AckOut {
            psn: p,
            aeth,
            copies: 1,
        });
    }

    fn rnr(&mut self, ctx: &mut Ctx<'_>, p: u32) {
        ctx.counters.naks_rnr += 1;
        self.resp.nak_sent = true;
        let timer = self.attr.min_rnr_timer;
        self.resp.queue(p, Syndrome::RnrNak { timer });
    }

    /// A request packet arrived at a QP in RTR or RTS.
    pub(crate) fn on_request(&mut self, ctx: &mut Ctx<'_>, packet: &Packet<'_>) {
        let h = &packet.headers;
        let p = h.bth.psn;
        let epsn = self.resp.epsn;
        if p != epsn {
            self.resp.lossy = LOSSY_SPAN;
            if psn::lt(p, epsn) {
                ctx.counters.duplicates += 1;
                if h.bth.opcode == Opcode::ReadRequest {
                    // Its responses carry the MSN the READ got when it was
                    // executed (the current one if it is too old to know).
                    let msn = self.resp.read_msn(p).unwrap_or(self.resp.msn);
                    // The requester lost responses from `p` on (all of them
                    // after going back, or only those it asks for when it
                    // placed what came after a gap): the answer goes out
                    // before anything queued after `p`, and queued
                    // responses it repeats are dropped. Responses after it
                    // still go.
                    if let Some(reth) = packet.headers.reth {
                        let n = reth.dma_len.div_ceil(self.attr.mtu).max(1);
                        self.resp.drop_responses(p, n, self.attr.mtu);
                    }
                    if let Err(Refusal::Fatal(s)) = self.start_read(ctx, packet, p, msn, true) {
                        self.fatal(ctx, p, s);
                    }
                } else {
                    self.resp.queue_ack();
                }
            } else {
                ctx.counters.out_of_sequence += 1;
                self.place_ahead(ctx, packet);
                if !self.resp.nak_sent {
                    self.resp.nak_sent = true;
                    ctx.counters.naks_sequence += 1;
                    self.resp.queue(epsn, Syndrome::NakSequence);
                }
            }
            return;
        }
        match self.execute(ctx, packet) {
            Ok(consumed) => {
                self.resp.lossy = self.resp.lossy.saturating_sub(1);
                self.resp.nak_sent = false;
                self.resp.epsn = psn::add(epsn, consumed);
                let caught_up = self.catch_up(consumed);
                if caught_up && !self.resp.ahead.is_empty() {
                    // Packets placed ahead lie past the new `epsn`: the packet
                    // there is missing as surely as the first one was, and
                    // a requester that sends a gap alone again (this NIC's)
                    // learns of it now, not from a packet still to come.
                    // The NAK acknowledges what came before it. A go-back-N
                    // requester may have that packet on its way already; if
                    // it is lost, the next packet out of sequence NAKs
                    // again, so this one does not count as the gap's NAK,
                    // and it goes out once even after a loss: a second copy
                    // would look like that second NAK.
                    ctx.counters.naks_sequence += 1;
                    let epsn = self.resp.epsn;
                    self.resp.queue_copies(epsn, Syndrome::NakSequence, 1);
                } else if caught_up || (h.bth.ack_req && h.bth.opcode != Opcode::ReadRequest) {
                    self.resp.queue_ack();
                }
            }
            Err(Refusal::NotReady) => self.rnr(ctx, p),
            Err(Refusal::Fatal(s)) => self.fatal(ctx, p, s),
        }
    }

    /// Places a WRITE middle packet that arrived ahead of `epsn` (see
    /// [`Ahead`]). Only a middle packet of the WRITE in progress qualifies:
    /// its address follows from its PSN, it must end before the message's
    /// last byte, and it passes the same key and rights checks as in order
    /// (a key revoked since the First packet stops it). The message's
    /// effects (the MSN, an immediate's completion) wait for its Last
    /// packet, which is never placed ahead. Anything else is dropped, as
    /// IBA has it.
    fn place_ahead(&mut self, ctx: &mut Ctx<'_>, packet: &Packet<'_>) {
        let h = &packet.headers;
        let Some(w) = self.resp.write.filter(|_| ctx.config.place_ahead) else {
            return;
        };
        let mtu = self.attr.mtu;
        if h.bth.opcode != Opcode::WriteMiddle || packet.payload.len() != mtu as usize {
            return;
        }
        let off = psn::diff(h.bth.psn, self.resp.epsn);
        let Some(at) = off.checked_mul(mtu) else { return };
        // `at + mtu < remaining`: a middle packet leaves at least a byte for
        // the Last one.
        if at.checked_add(mtu).is_none_or(|end| end >= w.remaining) || self.resp.ahead.has(off) {
            return;
        }
        let va = w.va.wrapping_add(u64::from(at));
        if self
            .remote(ctx, w.rkey, va, mtu, AccessFlags::REMOTE_WRITE)
            .is_err()
            || self.write_mem(ctx, w.rkey, va, packet.payload).is_err()
        {
            return;
        }
        if self.resp.ahead.hold(off) {
            ctx.counters.placed_ahead += 1;
        }
    }

    /// After a request that took `consumed` PSNs was executed in order,
    /// moves `epsn` past the middle packets placed ahead that follow it
    /// without a gap; returns whether it moved that way.
    fn catch_up(&mut self, consumed: u32) -> bool {
        // Held offsets count from the PSN just executed; only a WRITE still
        // in progress holds any.
        let held = self.resp.write.filter(|_| consumed == 1);
        let run = held.map_or(0, |_| self.resp.ahead.run());
        let Some(w) = held.filter(|_| run > 0) else {
            self.resp.ahead.shift(consumed);
            return false;
        };
        // The packet after the run was not held (`run` stopped at it): it
        // is the one now expected.
        self.resp.ahead.shift(1 + run);
        let bytes = run * self.attr.mtu;
        self.resp.write = Some(WriteCtx {
            va: w.va.wrapping_add(u64::from(bytes)),
            remaining: w.remaining - bytes,
            ..w
        });
        self.resp.epsn = psn::add(self.resp.epsn, run);
        true
    }

    /// Checks a remote access against the MR table and the QP's own rights.
    /// The QP's own rights come first and hold whatever the length: a QP
    /// that grants no remote write takes no WRITE, not even an empty one.
    fn remote(
        &self,
        ctx: &mut Ctx<'_>,
        rkey: u32,
        va: u64,
        len: u32,
        need: AccessFlags,
    ) -> Result<(), Refusal> {
        if !self.attr.access.contains(need) {
            ctx.counters.refused_qp_rights += 1;
            return Err(Refusal::Fatal(Syndrome::NakRemoteAccess));
        }
        if len == 0 {
            return Ok(());
        }
        ctx.mrs
            .check_remote(rkey, self.pd, self.qpn, va, len as usize, need)
            .map(|_| ())
            .map_err(|_| Refusal::Fatal(Syndrome::NakRemoteAccess))
    }

    /// Executes the expected request; returns how many PSNs it used.
    fn execute(&mut self, ctx: &mut Ctx<'_>, packet: &Packet<'_>) -> Result<u32, Refusal> {
        use Opcode::*;
        let h = &packet.headers;
        let op = h.bth.opcode;
        let payload = packet.payload;
        let len = payload.len() as u32;
        let mtu = self.attr.mtu;
        let invalid = Err(Refusal::Fatal(Syndrome::NakInvalidRequest));
        // The opcode must continue the message in progress, or start one.
        let in_order = match op {
            WriteMiddle | WriteLast | WriteLastImm => self.resp.write.is_some(),
            SendMiddle | SendLast | SendLastImm => self.resp.send_offset.is_some(),
            _ => self.resp.write.is_none() && self.resp.send_offset.is_none(),
        };
        // First and Middle packets carry exactly the MTU, Last at least a
        // byte, Only at most the MTU.
        let len_ok = match op {
            WriteFirst | WriteMiddle | SendFirst | SendMiddle => len == mtu,
            WriteLast | WriteLastImm | SendLast | SendLastImm => len > 0 && len <= mtu,
            _ => len <= mtu,
        };
        if !in_order || !len_ok {
            return invalid;
        }
        let needs_recv = matches!(
            op,
            SendFirst | SendOnly | SendOnlyImm | WriteLastImm | WriteOnlyImm
        );
        if needs_recv && self.resp.rq.is_empty() {
            return Err(Refusal::NotReady);
        }
        match op {
            WriteFirst | WriteOnly | WriteOnlyImm => {
                let Some(reth) = h.reth else { return invalid };
                let only = op != WriteFirst;
                if (only && reth.dma_len != len) || (!only && reth.dma_len <= len) {
                    return invalid;
                }
                self.remote(ctx, reth.rkey, reth.va, reth.dma_len, AccessFlags::REMOTE_WRITE)?;
                self.write_mem(ctx, reth.rkey, reth.va, payload)?;
                if only {
                    self.resp.msn = psn::add(self.resp.msn, 1);
                    if let Some(imm) = h.imm {
                        self.complete_recv(ctx, WcOpcode::RecvRdmaWithImm, reth.dma_len, Some(imm));
                    }
                } else {
                    self.resp.write = Some(WriteCtx {
                        rkey: reth.rkey,
                        va: reth.va.wrapping_add(u64::from(len)),
                        remaining: reth.dma_len - len,
                        total: reth.dma_len,
                    });
                }
                Ok(1)
            }
            WriteMiddle | WriteLast | WriteLastImm => {
                let Some(w) = self.resp.write else { return invalid };
                let last = op != WriteMiddle;
                if (last && w.remaining != len) || (!last && w.remaining <= len) {
                    return invalid;
                }
                // The region may have been deregistered since the First packet.
                self.remote(ctx, w.rkey, w.va, len, AccessFlags::REMOTE_WRITE)?;
                self.write_mem(ctx, w.rkey, w.va, payload)?;
                if last {
                    self.resp.write = None;
                    self.resp.msn = psn::add(self.resp.msn, 1);
                    if let Some(imm) = h.imm {
                        self.complete_recv(ctx, WcOpcode::RecvRdmaWithImm, w.total, Some(imm));
                    }
                } else {
                    self.resp.write = Some(WriteCtx {
                        va: w.va.wrapping_add(u64::from(len)),
                        remaining: w.remaining - len,
                        ..w
                    });
                }
                Ok(1)
            }
            SendFirst | SendMiddle | SendLast | SendLastImm | SendOnly | SendOnlyImm => {
                let offset = self.resp.send_offset.unwrap_or(0);
                let Some(wqe) = self.resp.rq.front() else {
                    return Err(Refusal::NotReady);
                };
                if u64::from(offset) + u64::from(len) > u64::from(wqe.len) {
                    self.complete_recv_status(ctx, WcStatus::LocLenErr);
                    return invalid;
                }
                if sgl::scatter(ctx.mrs, self.pd, &wqe.sges, offset as usize, payload).is_err() {
                    self.complete_recv_status(ctx, WcStatus::LocProtErr);
                    return Err(Refusal::Fatal(Syndrome::NakRemoteOperational));
                }
                if op.ends_message() {
                    self.resp.send_offset = None;
                    self.resp.msn = psn::add(self.resp.msn, 1);
                    self.complete_recv(ctx, WcOpcode::Recv, offset + len, h.imm);
                } else {
                    self.resp.send_offset = Some(offset + len);
                }
                Ok(1)
            }
            ReadRequest => {
                let p = h.bth.psn;
                if self.resp.reads_queued() >= usize::from(self.attr.max_dest_rd_atomic.max(1)) {
                    return invalid;
                }
                let msn = psn::add(self.resp.msn, 1);
                let n = self.start_read(ctx, packet, p, msn, false)?;
                self.resp.msn = msn;
                if self.resp.reads_done.len() >= READS_REMEMBERED {
                    self.resp.reads_done.pop_front();
                }
                self.resp.reads_done.push_back((p, n, msn));
                Ok(n)
            }
            _ => invalid,
        }
    }

    /// Checks a READ request and queues its responses from PSN `p`, carrying
    /// `msn` (`again`: it answers a duplicate, see below); returns how many
    /// PSNs the responses take.
    fn start_read(
        &mut self,
        ctx: &mut Ctx<'_>,
        packet: &Packet<'_>,
        p: u32,
        msn: u32,
        again: bool,
    ) -> Result<u32, Refusal> {
        let Some(reth) = packet.headers.reth else {
            return Err(Refusal::Fatal(Syndrome::NakInvalidRequest));
        };
        if reth.dma_len > 1 << 31 {
            return Err(Refusal::Fatal(Syndrome::NakInvalidRequest));
        }
        self.remote(ctx, reth.rkey, reth.va, reth.dma_len, AccessFlags::REMOTE_READ)?;
        let npkts = reth.dma_len.div_ceil(self.attr.mtu).max(1);
        let stream = Out::Read(ReadStream {
            psn: p,
            va: reth.va,
            rkey: reth.rkey,
            remaining: reth.dma_len,
            index: 0,
            npkts,
            msn,
            again,
            twice: again,
        });
        if again {
            // In PSN order: before the first queued READ response after `p`
            // and the first ACK at or after it (an ACK must not overtake the
            // responses of a READ it acknowledges). A requester that asks
            // for one lost response gets it ahead of the stream it fell
            // out of; one that goes back and asks for several READs again,
            // in order, gets the answers in that order.
            let at = self.resp.out.iter().position(|o| match o {
                Out::Read(q) => psn::lt(p, q.psn),
                Out::Ack(a) => psn::le(p, a.psn),
            });
            match at {
                Some(i) => self.resp.out.insert(i, stream),
                None => self.resp.out.push_back(stream),
            }
        } else {
            self.resp.out.push_back(stream);
        }
        Ok(npkts)
    }

    fn write_mem(&self, ctx: &Ctx<'_>, rkey: u32, va: u64, data: &[u8]) -> Result<(), Refusal> {
        if data.is_empty() {
            return Ok(());
        }
        let dst = ctx
            .mrs
            .check_remote(rkey, self.pd, self.qpn, va, data.len(), AccessFlags::REMOTE_WRITE)
            .map_err(|_| Refusal::Fatal(Syndrome::NakRemoteAccess))?;
        access::write(dst, data);
        Ok(())
    }

    fn complete_recv(&mut self, ctx: &mut Ctx<'_>, opcode: WcOpcode, byte_len: u32, imm: Option<u32>) {
        if let Some(wqe) = self.resp.rq.pop_front() {
            self.push_recv(ctx.counters, wqe.wr_id, WcStatus::Success, opcode, byte_len, imm);
        }
    }

    fn complete_recv_status(&mut self, ctx: &mut Ctx<'_>, status: WcStatus) {
        self.resp.send_offset = None;
        if let Some(wqe) = self.resp.rq.pop_front() {
            self.push_recv(ctx.counters, wqe.wr_id, status, WcOpcode::Recv, 0, None);
        }
    }

    /// The next ACK, NAK or READ response, in order.
    pub(crate) fn responder_transmit(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<usize> {
        match *self.resp.out.front()? {
            Out::Ack(a) => {
                if a.copies > 1 {
                    if let Some(Out::Ack(front)) = self.resp.out.front_mut() {
                        front.copies -= 1;
                    }
                } else {
                    self.resp.out.pop_front();
                }
                self.emit_ack(ctx, buf, a.psn, a.aeth)
            }
            Out::Read(s) => {
                let mtu = self.attr.mtu;
                let plen = s.remaining.min(mtu);
                let opcode = match (s.npkts, s.index) {
                    (1, _) => Opcode::ReadResponseOnly,
                    (_, 0) => Opcode::ReadResponseFirst,
                    (n, i) if i + 1 == n => Opcode::ReadResponseLast,
                    _ => Opcode::ReadResponseMiddle,
                };
                let aeth = (opcode != Opcode::ReadResponseMiddle).then_some(AethRepr {
                    syndrome: Syndrome::Ack {
                        credits: CREDITS_INVALID,
                    },
                    msn: s.msn,
                });
                let headers = Headers {
                    bth: self.bth(opcode, s.psn, false),
                    reth: None,
                    aeth,
                    imm: None,
                };
                let hlen = headers.header_len();
                if buf.len() < headers.datagram_len(plen as usize) {
                    return None;
                }
                if plen > 0 {
                    // Checked per packet: deregistration stops a READ midway.
                    let src = ctx.mrs.check_remote(
                        s.rkey,
                        self.pd,
                        self.qpn,
                        s.va,
                        plen as usize,
                        AccessFlags::REMOTE_READ,
                    );
                    match src {
                        Ok(src) => {
                            access::read(src, &mut buf[hlen..hlen + plen as usize]);
                        }
                        Err(_) => {
                            self.fatal(ctx, s.psn, Syndrome::NakRemoteAccess);
                            return self.transmit(ctx, buf);
                        }
                    }
                }
                let len = headers.emit(plen as usize, &self.pseudo(ctx), buf, |_| {})?;
                let next = ReadStream {
                    psn: psn::add(s.psn, 1),
                    va: s.va.wrapping_add(u64::from(plen)),
                    remaining: s.remaining - plen,
                    index: s.index + 1,
                    ..s
                };
                if s.twice {
                    // The same packet once more (see `ReadStream::twice`).
                    if let Some(Out::Read(front)) = self.resp.out.front_mut() {
                        front.twice = false;
                    }
                } else if next.index >= next.npkts {
                    self.resp.out.pop_front();
                } else if let Some(front) = self.resp.out.front_mut() {
                    *front = Out::Read(next);
                }
                Some(len)
            }
        }
    }
}
