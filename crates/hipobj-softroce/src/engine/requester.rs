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

use super::ahead::Ahead;
use super::qp::{Attrs, Qp, rnr_delay};
use super::{Ctx, Time};
use crate::mem::sgl;
use crate::wire::aeth::{AethRepr, Syndrome};
use crate::wire::psn;
use crate::wire::reth::RethRepr;
use crate::wire::{Headers, Opcode, Packet};

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
    pub fn end_psn(&self) -> u32 {
        psn::add(self.first_psn, self.npkts)
    }

    pub fn is_read(&self) -> bool {
        matches!(self.op, SendOp::Read { .. })
    }

    pub fn opcode(&self) -> WcOpcode {
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
    /// Smoothed round-trip time and its variation, in nanoseconds (RFC 6298),
    /// once a first sample exists.
    srtt: Option<u64>,
    rttvar: u64,
    /// The PSN whose acknowledgement gives the next round-trip sample, and
    /// when it was sent. A rewind drops it (Karn's rule), and the next packet
    /// sent, a retransmission or not, becomes the probe: after a go-back-N
    /// rewind the responder has dropped the earlier copies of everything
    /// from `una` on, so the acknowledgement is for the copy timed (only a
    /// spurious rewind breaks that, and gives a sample that is too short,
    /// which `RTO_MIN` bounds). Sampling only packets never sent before
    /// would take no sample at all while losses keep rewinding.
    rtt_probe: Option<(u32, Time)>,
    /// After the retransmission timer went back, the PSNs before this one
    /// may be acknowledged for copies sent before it fired (the timer can
    /// fire with nothing lost): none of them is timed.
    untimed_below: Option<u32>,
    /// The smallest round trip sampled, in nanoseconds: the path's own
    /// delay, with no queue in it.
    min_rtt: Option<u64>,
    /// Packets acknowledged since the QP entered RTS.
    delivered: u64,
    /// `delivered` and the time when the interval of the next rate sample
    /// began; `None` while nothing is in flight (idle time says nothing of
    /// the path).
    rate_mark: Option<(u64, Time)>,
    /// The packets the path carries in `min_rtt` (its bandwidth-delay
    /// product): the packets acknowledged over an interval at least
    /// `min_rtt` long, scaled to `min_rtt`; the largest sample holds, fading
    /// by a sixty-fourth per sample (so that the stalls of loss recovery
    /// do not talk it down). 0 before a first sample.
    bdp: u32,
    /// The retransmission timer: when it fires with no progress since it
    /// was armed, the requester goes back to `una` without spending a retry.
    pub rto_deadline: Option<Time>,
    /// When the retransmission timer was last armed.
    rto_armed: Time,
    /// Doublings of the retransmission timeout since the last progress.
    rto_backoff: u32,
    /// The send window now, in packets, never above the configured window
    /// (see `on_loss`).
    cwnd: u32,
    /// Packets acknowledged since the last loss.
    clean_run: u32,
    /// The packets acknowledged between two losses, averaged (weight 1/4
    /// per loss) over the losses so far; `u32::MAX` before the first.
    gap_avg: u32,
    /// Set when the retransmission timer went back to `una`: one packet (it
    /// asks for an ACK) goes out until the responder answers, instead of
    /// the whole window again.
    probing: bool,
    /// The window, `max_sent` and `gap_avg` when the retransmission timer
    /// fired: if the probe's answer acknowledges everything sent by then,
    /// no request was lost (an ACK was, or the timer fired early) and the
    /// window and the gap are given back.
    before_rto: Option<(u32, u32, u32)>,
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
struct Reask {
    psn: u32,
    npkts: u32,
    /// Copies of the request still to send.
    copies: u8,
}

impl Reask {
    fn end(&self) -> u32 {
        psn::add(self.psn, self.npkts)
    }
}

/// The retransmission timeout never goes below this (100 us). The soft
/// NIC's round trip on an idle loopback is tens of microseconds; a worker
/// that loses its core delays an ACK by more, and a timeout that fires then
/// costs a window of duplicates, not correctness. Before a first round-trip
/// sample the timer is not armed at all: a peer that never answered (a
/// responder in RESET, a wrong address) gets only the local ACK timeout's
/// retries, as verbs defines them.
const RTO_MIN: u64 = 100_000;

/// The retransmission timeout doubles at most this many times while nothing
/// moves. Losses here are not congestion: a timer that kept doubling would
/// hand recovery to the local ACK timeout after a few unlucky retries, and
/// that costs 67 ms in hipObject.
const RTO_DOUBLINGS: u32 = 3;

/// The window shrinks to no fewer packets than this on loss: fewer would
/// leave the link idle for most of a round trip.
const CWND_MIN: u32 = 16;

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

    /// The most packets worth keeping in flight while losses come: what the
    /// path holds and a quarter more, for the ACKs' spacing (one per quarter
    /// window) and for a path that got faster to show in the samples. More
    /// only queues, and what waits in the queue is sent again after the
    /// next loss, behind which the retransmission itself waits. Unbounded
    /// before a first round-trip sample.
    fn path(&self) -> u32 {
        match self.bdp {
            0 => u32::MAX,
            b => b.saturating_add(b / 4),
        }
    }

    /// Whether a WRITE's lost packet costs only itself (see `peer_places`):
    /// the responder keeps what follows a gap, and losses come no closer
    /// than half a round trip's worth of packets apart, so the rest of the
    /// flight holds at most a gap or two more, each answered by a NAK of
    /// its own. With more, each further gap would cost a round trip, and
    /// sending everything again fills them all in one (on `SimNet`'s paced
    /// link at 10 % loss: 0.45 of lossless with this bound, 0.36 with
    /// none, 0.48 with a whole round trip; but on the loopback link the
    /// path holds 100 to 150 packets, about the gap between losses at 1 %,
    /// and a whole round trip would send most of those losses back to
    /// go-back-N). While it holds, a loss does not shrink the window to
    /// the gap between losses (`on_loss`).
    fn placing(&self) -> bool {
        self.peer_places && self.gap_avg >= self.bdp / 2
    }

    /// The window while losses come: what the path holds (`path`), but
    /// where a loss costs only itself (`placing`), what it holds in a
    /// smoothed round trip rather than the smallest one: on a link whose
    /// round trip is mostly two wake-ups of busy workers, the smallest is
    /// half the usual one, and a window of it leaves the link idle half
    /// the time.
    fn lossy_window(&self) -> u32 {
        let p = self.path();
        match (self.placing(), self.srtt, self.min_rtt) {
            (true, Some(s), Some(m)) if m > 0 => {
                u32::try_from(u64::from(p) * s / m).unwrap_or(u32::MAX).max(p)
            }
            _ => p,
        }
    }

    /// Entering RTS with `sq_psn`.
    pub fn start(&mut self, sq_psn: u32, attr: &Attrs) {
        let p = sq_psn & psn::MASK;
        self.next_psn = p;
        self.una = p;
        self.max_sent = p;
        self.acked = p;
        self.read_reqs.clear();
        self.srtt = None;
        self.rttvar = 0;
        self.rtt_probe = None;
        self.min_rtt = None;
        self.untimed_below = None;
        self.delivered = 0;
        self.rate_mark = None;
        self.bdp = 0;
        self.rto_deadline = None;
        self.rto_backoff = 0;
        self.cwnd = u32::MAX;
        self.clean_run = 0;
        self.gap_avg = u32::MAX;
        self.probing = false;
        self.twice = false;
        self.before_rto = None;
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
    pub fn halt(&mut self) {
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

fn post_err(kind: VerbsErrorKind, why: &str) -> Result<(), VerbsError> {
    Err(VerbsError::new("ibv_post_send", kind, why))
}

impl Qp {
    pub fn post_send(&mut self, ctx: &mut Ctx<'_>, wr: &SendWr<'_>) -> Result<(), VerbsError> {
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

    /// The retransmission timeout: srtt + 4 rttvar, at least `RTO_MIN`, and
    /// the time the queue of what is in flight takes to drain, doubled per
    /// expiry without progress (at most `RTO_DOUBLINGS` times),
    /// never more than half the local ACK timeout (so that it fires first).
    /// `None` before a first sample.
    fn rto(&self) -> Option<std::time::Duration> {
        let r = &self.req;
        let srtt = r.srtt?;
        // What is in flight beyond what the path holds waits in a queue, and
        // the last of it is answered only once the queue has drained: add
        // the time that takes at the rate the samples measured. Before a
        // rate sample, or with one taken before the window opened, the path
        // counts as holding `CWND_MIN` packets: a first window sent whole
        // does not fire the timer before its first ACK can come back.
        let drain = r.min_rtt.map_or(0, |m| {
            let queued = psn::diff(r.max_sent, r.una)
                .saturating_sub(r.ahead.held() + r.peer_holds())
                .saturating_sub(r.bdp);
            u64::from(queued) * m / u64::from(r.bdp.max(CWND_MIN))
        });
        let base = (srtt + 4 * r.rttvar).max(RTO_MIN) + drain;
        let t = base.saturating_mul(1 << r.rto_backoff.min(RTO_DOUBLINGS));
        let cap = self
            .attr
            .ack_timeout()
            .map_or(u64::MAX, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        Some(std::time::Duration::from_nanos(t.min(cap / 2)))
    }

    fn arm_rto(&mut self, now: Time) {
        self.req.rto_armed = now;
        self.req.rto_deadline = self.rto().map(|t| now + t);
    }

    /// Takes a rate sample (see `bdp`) once the interval since the mark is
    /// at least `min_rtt` long, and starts the next interval.
    fn sample_rate(&mut self, now: Time) {
        let r = &mut self.req;
        let Some(min_rtt) = r.min_rtt else { return };
        match r.rate_mark {
            None => r.rate_mark = Some((r.delivered, now)),
            Some((d, t)) => {
                let span = now.saturating_since(t).as_nanos() as u64;
                if span >= min_rtt {
                    let carried = u128::from(r.delivered - d) * u128::from(min_rtt) / u128::from(span.max(1));
                    let carried = u32::try_from(carried).unwrap_or(u32::MAX);
                    r.bdp = carried.max(r.bdp - r.bdp / 64);
                    r.rate_mark = Some((r.delivered, now));
                }
            }
        }
    }

    /// Takes a round-trip sample if `una` has passed the probed PSN.
    fn sample_rtt(&mut self, now: Time) {
        let r = &mut self.req;
        let Some((p, sent)) = r.rtt_probe else { return };
        if !psn::lt(p, r.una) {
            return;
        }
        r.rtt_probe = None;
        let m = (now.saturating_since(sent).as_nanos() as u64).max(1);
        r.min_rtt = Some(r.min_rtt.map_or(m, |x| x.min(m)));
        match r.srtt {
            None => {
                r.srtt = Some(m);
                r.rttvar = m / 2;
            }
            Some(s) => {
                r.rttvar = (3 * r.rttvar + s.abs_diff(m)) / 4;
                r.srtt = Some((7 * s + m) / 8);
            }
        }
    }

    /// A loss was seen (a sequence NAK, a NAK implied by READ responses,
    /// the retransmission timer): the window becomes the mean run of
    /// packets acknowledged between losses, at least `CWND_MIN`.
    ///
    /// Go-back-N sends again whatever was in flight past the lost packet, so
    /// each loss costs about the window; a window of the packets the link
    /// carries between two losses spends at most about as much on resending
    /// as on new data, and no less than `CWND_MIN` keeps the link busy. The
    /// losses this answers are random drops, not congestion (RoCE leaves
    /// congestion to the fabric): halving on each loss, as before, held the
    /// window at the minimum at 1 % loss (a loss every 100 packets, a
    /// window grown back by one per window), where the link then idled
    /// through every round trip. `advance` gives the window back as the link
    /// stays clean.
    fn on_loss(&mut self, ctx: &Ctx<'_>) {
        let r = &mut self.req;
        let full = ctx.config.window;
        let run = r.clean_run.min(full);
        r.gap_avg = match r.gap_avg {
            u32::MAX => run,
            g => (3 * g + run) / 4,
        };
        r.clean_run = 0;
        // Where a loss costs only itself (`placing`), the window need not
        // shrink to the gap between losses: nothing in flight is sent
        // again. The path still bounds it (`lossy_window`, and twice the
        // path in `requester_transmit`).
        let gap = if r.placing() && r.bdp > 0 {
            u32::MAX
        } else {
            r.gap_avg
        };
        r.cwnd = gap.min(r.lossy_window()).clamp(CWND_MIN.min(full), full);
    }

    pub fn requester_transmit(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<usize> {
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
        let mtu = self.attr.mtu;
        let r = &self.req;
        let wqe = r.sq.get(r.cursor_idx)?;
        // A READ's lost responses are asked for alone (see `Reask`), so a
        // loss costs no window of them: READs keep the whole window.
        let window = if r.probing {
            1
        } else if wqe.is_read() && ctx.config.place_ahead {
            full
        } else if r.bdp > 0 && r.gap_avg != u32::MAX {
            // While losses come, never more than twice what the path holds:
            // more only queues in the sockets (with the whole 256-packet
            // window in flight the smoothed round trip grew to two to four
            // times the smallest), and a loss's NAK and the packet sent
            // again wait behind that queue. On a clean link the queue costs
            // nothing and the whole window goes (in runs alternating with a
            // bound there too, the lossless WRITE's median was 2.0 GB/s
            // against 1.9).
            r.cwnd
                .min(r.bdp.saturating_mul(2))
                .clamp(CWND_MIN.min(full), full)
        } else {
            r.cwnd.clamp(1, full)
        };
        let p = psn::add(wqe.first_psn, r.cursor_pkt);
        // READ responses placed ahead have arrived: they are not in flight.
        let in_flight = psn::diff(p, r.una).saturating_sub(r.ahead.held() + r.peer_holds());
        if in_flight >= window {
            return None;
        }
        let off = r.cursor_pkt * mtu;
        let (headers, plen, advance) = match wqe.op {
            SendOp::Read { remote_addr, rkey } => {
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
                let bytes = (wqe.len - off).min(chunk * mtu);
                let reth = RethRepr {
                    va: remote_addr.wrapping_add(u64::from(off)),
                    rkey,
                    dma_len: bytes,
                };
                let h = Headers {
                    bth: self.bth(Opcode::ReadRequest, p, true),
                    reth: Some(reth),
                    aeth: None,
                    imm: None,
                };
                (h, 0, chunk)
            }
            op => {
                let plen = (wqe.len - off).min(mtu);
                let first = r.cursor_pkt == 0;
                let last = r.cursor_pkt + 1 == wqe.npkts;
                let (opcode, imm, reth) = match op {
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
                            dma_len: wqe.len,
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
                };
                let every = ctx.config.ack_every.min((window / 4).max(1));
                let ack_req = last || r.since_ack_req + 1 >= every || in_flight + 1 >= window;
                let h = Headers {
                    bth: self.bth(opcode, p, ack_req),
                    reth,
                    aeth: None,
                    imm,
                };
                (h, plen, 1)
            }
        };
        let is_read = wqe.is_read();
        let npkts = wqe.npkts;
        let hlen = headers.header_len();
        if buf.len() < headers.datagram_len(plen as usize) {
            return None;
        }
        if plen > 0 {
            let dst = &mut buf[hlen..hlen + plen as usize];
            if sgl::gather(ctx.mrs, self.pd, &wqe.sges, off as usize, dst).is_err() {
                let at = self.req.cursor_idx;
                self.enter_error(ctx.counters, Some((at, WcStatus::LocProtErr)));
                return None;
            }
        }
        let len = headers.emit(plen as usize, &self.pseudo(ctx), buf, |_| {})?;
        let r = &mut self.req;
        if psn::lt(p, r.max_sent) {
            ctx.counters.retransmits += 1;
        }
        let end = psn::add(p, advance);
        let fresh = !psn::lt(p, r.max_sent);
        match r.untimed_below {
            Some(k) if psn::lt(p, k) => {}
            _ => {
                r.untimed_below = None;
                if r.rtt_probe.is_none() {
                    r.rtt_probe = Some((p, ctx.now));
                }
            }
        }
        if psn::lt(r.max_sent, end) {
            r.max_sent = end;
        }
        if is_read {
            r.reads_inflight.push_back(end);
            if fresh {
                r.read_reqs.push_back((p, end));
            }
        }
        r.since_ack_req = if headers.bth.ack_req {
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
            r.cursor_pkt += advance;
        }
        if r.cursor_pkt >= npkts {
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
        Some(len)
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
        r.rto_backoff = 0;
        r.probing = false;
        if let Some((cwnd, sent, gap_avg)) = r.before_rto.take()
            && psn::le(sent, target)
        {
            r.cwnd = cwnd;
            r.gap_avg = gap_avg;
        }
        // The window grows back to half the packets acknowledged since the
        // last loss, but while losses come no further than the path holds
        // (`Requester::path`): what a larger window adds waits in a queue
        // and is sent again after the next loss. A clean run four windows
        // long says the losses have stopped, and the whole window is back.
        r.clean_run = r.clean_run.saturating_add(acked_now);
        r.delivered += u64::from(acked_now - passed.min(acked_now));
        self.sample_rate(ctx.now);
        let r = &mut self.req;
        let full = ctx.config.window;
        if r.clean_run >= full.saturating_mul(4) {
            r.gap_avg = u32::MAX;
        }
        let cap = match r.gap_avg {
            u32::MAX => full,
            _ => r.lossy_window().min(full),
        };
        let half = (r.clean_run / 2).min(cap);
        if r.cwnd < half {
            r.cwnd = half;
        }
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
        self.sample_rtt(ctx.now);
        if self.req.una == self.req.max_sent {
            self.req.retry_deadline = None;
            self.req.rto_deadline = None;
            self.req.rate_mark = None;
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
        r.rtt_probe = None;
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
    pub fn on_response(&mut self, ctx: &mut Ctx<'_>, packet: &Packet<'_>) {
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

    fn on_read_response(&mut self, ctx: &mut Ctx<'_>, r: u32, payload: &[u8]) {
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
        } else if off > super::ahead::AHEAD_MAX {
            // Too far to remember: go back, as go-back-N would.
            ctx.counters.drop_unexpected += 1;
            self.retry_implied(ctx);
            return;
        } else {
            if !self.place_response(ctx, r, payload) {
                return;
            }
            self.req.ahead.hold(off);
            self.req.delivered += 1;
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
    fn ask_again(&mut self, ctx: &mut Ctx<'_>) {
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
        self.req.rtt_probe = None;
    }

    /// The READ request asked again, if one is waiting to go out.
    fn transmit_reask(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<usize> {
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

    fn note_acked(&mut self, to: u32) {
        if psn::lt(self.req.acked, to) {
            self.req.acked = to;
        }
    }

    pub fn requester_timeout(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        if self.req.rnr_until.is_some_and(|t| t <= now) {
            self.req.rnr_until = None;
        }
        if self.req.rto_deadline.is_some_and(|t| t <= now) {
            // The timeout counts what is in flight when it fires, which may
            // be more than when the timer was armed (the window was still
            // filling): then it waits for that.
            let later = self.rto().map(|t| self.req.rto_armed + t).filter(|&t| t > now);
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
                self.req.rto_backoff += 1;
                self.req.reask = None;
                self.ask_again(ctx);
                self.arm_rto(now);
            } else if self.req.una != self.req.max_sent && self.req.rnr_until.is_none() {
                // Nothing came back for a few round trips: the retransmission
                // (or the NAK asking for it) was lost, or the tail of a
                // message was. Go back now rather than at the local ACK
                // timeout; this is not one of retry_cnt's retries.
                ctx.counters.rto_rewinds += 1;
                self.req.rto_backoff += 1;
                if self.req.before_rto.is_none() {
                    self.req.before_rto = Some((self.req.cwnd, self.req.max_sent, self.req.gap_avg));
                }
                self.on_loss(ctx);
                let una = self.req.una;
                self.rewind(ctx, una);
                self.req.untimed_below = Some(self.req.max_sent);
                self.req.last_rewind = None;
                self.req.probing = true;
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
        self.req.probing = false;
        self.req.before_rto = None;
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
