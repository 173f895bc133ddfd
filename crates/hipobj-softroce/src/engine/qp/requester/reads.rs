//! The requester's READs: placing their responses, ahead of a gap when
//! one was lost (see `Ahead`), and asking
//! again for the responses a gap is missing, one question at a time.

use hipobj_platform::{SendOp, WcStatus};

use crate::engine::Ctx;
use crate::engine::qp::Qp;
use crate::mem::sgl;
use crate::wire::psn;
use crate::wire::reth::RethRepr;
use crate::wire::{Headers, Opcode};

/// A READ request sent again for the responses missing at `una`: it asks
/// for that gap alone, not for the rest of the request, since what came
/// after the gap was placed. When the answer fills it, `una` moves past
/// everything placed, and the next gap, if any, is asked for at once: one
/// question at a time, each from `una`. Since `una` only moves forward,
/// each READ asked again within a request starts no earlier than the one
/// before: the kernel's rxe answers a duplicate READ only from the start
/// of the previous one on, so a question for an earlier gap after a later
/// one would never be answered. (Asking for every known gap at once, from
/// `una` to the last, resends what lies between them: on `SimNet`'s paced
/// link at 1 % loss that was 0.65 of lossless, the gap alone 0.91.)
///
/// The request goes out twice: it is one small packet, and when it is lost
/// the requester learns of it only from its retransmission timer. (The
/// responder answers each copy; the second answer drops what is still
/// queued of the first, and the requester takes any second copy of a
/// response as a duplicate.)
#[derive(Clone, Copy, Debug)]
pub(super) struct Reask {
    pub(super) psn: u32,
    pub(super) npkts: u32,
    /// Copies of the request still to send.
    pub(super) copies: u8,
}

impl Reask {
    pub(super) fn end(&self) -> u32 {
        psn::add(self.psn, self.npkts)
    }
}

impl Qp {
    pub(super) fn on_read_response(&mut self, ctx: &mut Ctx<'_>, r: u32, payload: &[u8]) {
        let Some(first_psn) = self
            .req
            .sq
            .iter()
            .find(|w| w.holds(r) && w.is_read())
            .map(|w| w.first_psn)
        else {
            ctx.counters.drop_unexpected += 1;
            return;
        };
        if psn::lt(self.req.una, first_psn) && psn::le(r, self.req.max_sent) {
            // A response to this READ acknowledges everything before it, but
            // not an earlier READ still missing responses (then `una` stays
            // in that one, and the gap below asks for them again).
            self.advance(ctx, first_psn, true);
        }
        let una = self.req.una;
        if r != una {
            if psn::lt(r, una) {
                ctx.counters.duplicates += 1;
            } else if ctx.config.place_ahead {
                self.on_response_ahead(ctx, r, payload);
            } else {
                // Dropped: ask again from the gap, the whole rest.
                ctx.counters.drop_unexpected += 1;
                self.retry_implied(ctx);
            }
            return;
        }
        if !self.place_response(ctx, r, payload) {
            return;
        }
        // Responses placed ahead that follow without a gap count too.
        let run = self.req.ahead.run();
        self.advance(ctx, psn::add(r, 1 + run), false);
        if !self.req.ahead.is_empty() && self.req.reask.is_none() {
            // More responses are missing further on.
            self.ask_again(ctx);
        }
        // ACKs that came while this READ was missing responses were held at
        // it; now that it is whole they count.
        let acked = self.req.acked;
        self.advance(ctx, acked, true);
    }

    /// A READ response past `una`: a response before it was lost. It is
    /// placed and remembered, and the missing ones are asked for again
    /// (unless that is under way), not the whole rest of the request.
    fn on_response_ahead(&mut self, ctx: &mut Ctx<'_>, r: u32, payload: &[u8]) {
        if !psn::lt(r, self.req.max_sent) {
            // Never asked for.
            ctx.counters.drop_unexpected += 1;
            return;
        }
        let off = psn::diff(r, self.req.una);
        if self.req.ahead.has(off) {
            ctx.counters.duplicates += 1;
        } else if off > crate::engine::ahead::AHEAD_MAX {
            // Too far to remember: go back, as go-back-N would.
            ctx.counters.drop_unexpected += 1;
            self.retry_implied(ctx);
            return;
        } else {
            if !self.place_response(ctx, r, payload) {
                return;
            }
            self.req.ahead.hold(off);
            self.req.loss.on_placed();
            ctx.counters.placed_ahead += 1;
        }
        // A gap inside the answer to the READ asked again (its responses
        // come in order): ask again at once rather than on the timer.
        let answer_gap = self
            .req
            .reask
            .is_some_and(|q| q.copies == 0 && psn::lt(q.psn, r) && psn::lt(r, q.end()));
        if self.req.reask.is_none() || answer_gap {
            self.ask_again(ctx);
        }
    }

    /// Writes READ response `r` where it belongs; false if it was dropped
    /// (a length that does not fit) or the QP failed (local protection).
    fn place_response(&mut self, ctx: &mut Ctx<'_>, r: u32, payload: &[u8]) -> bool {
        let Some(at) = self.req.sq.iter().position(|w| w.holds(r)) else {
            return false;
        };
        let w = &self.req.sq[at];
        let off = psn::diff(r, w.first_psn) * self.attr.mtu;
        let expect = (w.len - off.min(w.len)).min(self.attr.mtu);
        if payload.len() != expect as usize {
            ctx.counters.drop_unexpected += 1;
            return false;
        }
        if !payload.is_empty() && sgl::scatter(ctx.mrs, self.pd, &w.sges, off as usize, payload).is_err() {
            self.enter_error(ctx.counters, Some((at, WcStatus::LocProtErr)));
            return false;
        }
        true
    }

    /// Asks again for the responses missing at `una`, up to the first one
    /// placed ahead, within the READ request that holds `una` (see
    /// [`Reask`]). It spends one of retry_cnt's retries, as the gap is a
    /// NAK in all but name; with none left the QP fails.
    pub(super) fn ask_again(&mut self, ctx: &mut Ctx<'_>) {
        let una = self.req.una;
        let Some(&(_, end)) = self
            .req
            .read_reqs
            .iter()
            .find(|&&(f, e)| psn::le(f, una) && psn::lt(una, e))
        else {
            // Not inside a request executed: go back, as before.
            self.retry_implied(ctx);
            return;
        };
        if self.req.retry_left == 0 {
            let at = self.req.index_of(una);
            self.enter_error(ctx.counters, Some((at, WcStatus::RetryExcErr)));
            return;
        }
        self.req.retry_left -= 1;
        let npkts = self.req.ahead.first_hole().min(psn::diff(end, una));
        self.req.reask = Some(Reask {
            psn: una,
            npkts,
            copies: 2,
        });
        // Karn: the responses asked for again give no round-trip sample.
        self.req.loss.on_rewind();
    }

    /// The READ request asked again, if one is waiting to go out.
    pub(super) fn transmit_reask(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<usize> {
        let q = self.req.reask.filter(|q| q.copies > 0)?;
        let mtu = self.attr.mtu;
        let at = self.req.sq.iter().position(|w| w.holds(q.psn) && w.is_read());
        let Some(w) = at.map(|i| &self.req.sq[i]) else {
            self.req.reask = None;
            return None;
        };
        let SendOp::Read { remote_addr, rkey } = w.op else {
            return None;
        };
        let off = psn::diff(q.psn, w.first_psn) * mtu;
        let bytes = (w.len - off).min(q.npkts * mtu);
        let h = Headers {
            bth: self.bth(Opcode::ReadRequest, q.psn, true),
            reth: Some(RethRepr {
                va: remote_addr.wrapping_add(u64::from(off)),
                rkey,
                dma_len: bytes,
            }),
            aeth: None,
            imm: None,
        };
        if buf.len() < h.datagram_len(0) {
            return None;
        }
        let len = h.emit(0, &self.pseudo(ctx), buf, |_| {})?;
        if let Some(q) = self.req.reask.as_mut() {
            q.copies -= 1;
        }
        ctx.counters.read_reasks += 1;
        ctx.counters.retransmits += 1;
        Some(len)
    }
}
