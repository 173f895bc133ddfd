//! The requester's loss control: round-trip and rate estimation, the send
//! window while losses come, and the retransmission timer's arithmetic.
//!
//! Nothing here knows a QP. The requester tells [`LossControl`] what
//! happened (a packet sent, PSNs acknowledged, a loss reported, the timer
//! fired) with the PSNs and the time it needs, and asks it how many packets
//! may be in flight ([`LossControl::allowance`]) and when the timer fires
//! ([`LossControl::rto`]). The losses it answers are random drops, not
//! congestion: RoCE leaves congestion to the fabric.

use std::time::Duration;

use super::Time;
use crate::wire::psn;

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
pub(super) const CWND_MIN: u32 = 16;

/// Round-trip estimation (RFC 6298) from one probed PSN at a time.
#[derive(Debug, Default)]
pub(super) struct RttEstimator {
    /// Smoothed round-trip time and its variation, in nanoseconds, once a
    /// first sample exists.
    srtt: Option<u64>,
    rttvar: u64,
    /// The smallest round trip sampled, in nanoseconds: the path's own
    /// delay, with no queue in it.
    min_rtt: Option<u64>,
    /// The PSN whose acknowledgement gives the next round-trip sample, and
    /// when it was sent. A rewind drops it (Karn's rule), and the next packet
    /// sent, a retransmission or not, becomes the probe: after a go-back-N
    /// rewind the responder has dropped the earlier copies of everything
    /// from `una` on, so the acknowledgement is for the copy timed (only a
    /// spurious rewind breaks that, and gives a sample that is too short,
    /// which `RTO_MIN` bounds). Sampling only packets never sent before
    /// would take no sample at all while losses keep rewinding.
    probe: Option<(u32, Time)>,
    /// After the retransmission timer went back, the PSNs before this one
    /// may be acknowledged for copies sent before it fired (the timer can
    /// fire with nothing lost): none of them is timed.
    untimed_below: Option<u32>,
}

impl RttEstimator {
    /// PSN `p` went out at `now`: it becomes the probe if none is out and
    /// it may be timed.
    fn on_sent(&mut self, p: u32, now: Time) {
        match self.untimed_below {
            Some(k) if psn::lt(p, k) => {}
            _ => {
                self.untimed_below = None;
                if self.probe.is_none() {
                    self.probe = Some((p, now));
                }
            }
        }
    }

    /// Takes a round-trip sample if `una` has passed the probed PSN.
    fn on_ack(&mut self, una: u32, now: Time) {
        let Some((p, sent)) = self.probe else { return };
        if !psn::lt(p, una) {
            return;
        }
        self.probe = None;
        let m = (now.saturating_since(sent).as_nanos() as u64).max(1);
        self.min_rtt = Some(self.min_rtt.map_or(m, |x| x.min(m)));
        match self.srtt {
            None => {
                self.srtt = Some(m);
                self.rttvar = m / 2;
            }
            Some(s) => {
                self.rttvar = (3 * self.rttvar + s.abs_diff(m)) / 4;
                self.srtt = Some((7 * s + m) / 8);
            }
        }
    }

    /// Karn's rule: the probed PSN will be sent again, or its answer is
    /// asked for again, so it gives no sample.
    fn forget_probe(&mut self) {
        self.probe = None;
    }

    /// The timer went back over everything before `max_sent`: none of it
    /// is timed.
    fn untime_below(&mut self, max_sent: u32) {
        self.untimed_below = Some(max_sent);
    }

    /// srtt + 4 rttvar, at least `RTO_MIN`; `None` before a first sample.
    fn base_rto(&self) -> Option<u64> {
        Some((self.srtt? + 4 * self.rttvar).max(RTO_MIN))
    }
}

/// The window, the rate the path carries, and the timer's back-off.
#[derive(Debug)]
pub(super) struct LossControl {
    rtt: RttEstimator,
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
    /// When the retransmission timer was last armed.
    rto_armed: Time,
    /// Doublings of the retransmission timeout since the last progress.
    rto_backoff: u32,
    /// The send window now, in packets, never above the configured window
    /// (see `shrink`).
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
}

impl Default for LossControl {
    /// As on entering RTS: no sample, no loss, the whole window.
    fn default() -> Self {
        Self {
            rtt: RttEstimator::default(),
            delivered: 0,
            rate_mark: None,
            bdp: 0,
            rto_armed: Time::ZERO,
            rto_backoff: 0,
            cwnd: u32::MAX,
            clean_run: 0,
            gap_avg: u32::MAX,
            probing: false,
            before_rto: None,
        }
    }
}

impl LossControl {
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

    /// Whether a WRITE's lost packet costs only itself, for a responder
    /// that places what follows a gap (`peer_places`): losses come no
    /// closer than half a round trip's worth of packets apart, so the rest
    /// of the flight holds at most a gap or two more, each answered by a
    /// NAK of its own. With more, each further gap would cost a round trip,
    /// and sending everything again fills them all in one (on `SimNet`'s
    /// paced link at 10 % loss: 0.45 of lossless with this bound, 0.36 with
    /// none, 0.48 with a whole round trip; but on the loopback link the
    /// path holds 100 to 150 packets, about the gap between losses at 1 %,
    /// and a whole round trip would send most of those losses back to
    /// go-back-N). While it holds, a loss does not shrink the window to
    /// the gap between losses (`shrink`).
    pub(super) fn placing(&self, peer_places: bool) -> bool {
        peer_places && self.gap_avg >= self.bdp / 2
    }

    /// The window while losses come: what the path holds (`path`), but
    /// where a loss costs only itself (`placing`), what it holds in a
    /// smoothed round trip rather than the smallest one: on a link whose
    /// round trip is mostly two wake-ups of busy workers, the smallest is
    /// half the usual one, and a window of it leaves the link idle half
    /// the time.
    fn lossy_window(&self, peer_places: bool) -> u32 {
        let p = self.path();
        match (self.placing(peer_places), self.rtt.srtt, self.rtt.min_rtt) {
            (true, Some(s), Some(m)) if m > 0 => {
                u32::try_from(u64::from(p) * s / m).unwrap_or(u32::MAX).max(p)
            }
            _ => p,
        }
    }

    /// How many packets may be in flight for the next one, with `full` the
    /// configured window; `read_placed`: it is a READ request whose lost
    /// responses are asked for alone (see `Reask`), so a loss costs no
    /// window of them and READs keep the whole window.
    pub(super) fn allowance(&self, full: u32, read_placed: bool) -> u32 {
        if self.probing {
            1
        } else if read_placed {
            full
        } else if self.bdp > 0 && self.gap_avg != u32::MAX {
            // While losses come, never more than twice what the path holds:
            // more only queues in the sockets (with the whole 256-packet
            // window in flight the smoothed round trip grew to two to four
            // times the smallest), and a loss's NAK and the packet sent
            // again wait behind that queue. On a clean link the queue costs
            // nothing and the whole window goes (in runs alternating with a
            // bound there too, the lossless WRITE's median was 2.0 GB/s
            // against 1.9).
            self.cwnd
                .min(self.bdp.saturating_mul(2))
                .clamp(CWND_MIN.min(full), full)
        } else {
            self.cwnd.clamp(1, full)
        }
    }

    /// PSN `p` went out at `now`.
    pub(super) fn on_sent(&mut self, p: u32, now: Time) {
        self.rtt.on_sent(p, now);
    }

    /// A response to a READ was placed past a gap: it was delivered,
    /// though `una` does not pass it yet.
    pub(super) fn on_placed(&mut self) {
        self.delivered += 1;
    }

    /// `una` moved to `una` at `now`, acknowledging `acked` packets of
    /// which `passed` were placed ahead (and counted when they came);
    /// `full` is the configured window. Resets the back-off, ends probing,
    /// gives back what the timer took if it fired for nothing, takes rate
    /// and round-trip samples, and grows the window back to half the
    /// packets acknowledged since the last loss, but while losses come no
    /// further than the path holds (`path`): what a larger window adds
    /// waits in a queue and is sent again after the next loss. A clean run
    /// four windows long says the losses have stopped, and the whole window
    /// is back.
    pub(super) fn on_ack(
        &mut self,
        una: u32,
        acked: u32,
        passed: u32,
        full: u32,
        peer_places: bool,
        now: Time,
    ) {
        self.rto_backoff = 0;
        self.probing = false;
        if let Some((cwnd, sent, gap_avg)) = self.before_rto.take()
            && psn::le(sent, una)
        {
            self.cwnd = cwnd;
            self.gap_avg = gap_avg;
        }
        self.clean_run = self.clean_run.saturating_add(acked);
        self.delivered += u64::from(acked - passed.min(acked));
        self.sample_rate(now);
        if self.clean_run >= full.saturating_mul(4) {
            self.gap_avg = u32::MAX;
        }
        let cap = match self.gap_avg {
            u32::MAX => full,
            _ => self.lossy_window(peer_places).min(full),
        };
        let half = (self.clean_run / 2).min(cap);
        if self.cwnd < half {
            self.cwnd = half;
        }
        self.rtt.on_ack(una, now);
    }

    /// Nothing is in flight: the next rate interval starts with the next
    /// packet acknowledged.
    pub(super) fn on_idle(&mut self) {
        self.rate_mark = None;
    }

    /// Takes a rate sample (see `bdp`) once the interval since the mark is
    /// at least `min_rtt` long, and starts the next interval.
    fn sample_rate(&mut self, now: Time) {
        let Some(min_rtt) = self.rtt.min_rtt else { return };
        match self.rate_mark {
            None => self.rate_mark = Some((self.delivered, now)),
            Some((d, t)) => {
                let span = now.saturating_since(t).as_nanos() as u64;
                if span >= min_rtt {
                    let carried =
                        u128::from(self.delivered - d) * u128::from(min_rtt) / u128::from(span.max(1));
                    let carried = u32::try_from(carried).unwrap_or(u32::MAX);
                    self.bdp = carried.max(self.bdp - self.bdp / 64);
                    self.rate_mark = Some((self.delivered, now));
                }
            }
        }
    }

    /// Karn's rule: what is in flight will be sent (or asked for) again,
    /// and gives no round-trip sample.
    pub(super) fn on_rewind(&mut self) {
        self.rtt.forget_probe();
    }

    /// The responder reported a loss (a sequence NAK, a NAK implied by
    /// READ responses) or the local ACK timer expired: probing ends, what
    /// the retransmission timer took is not given back, and the window
    /// shrinks.
    pub(super) fn on_loss(&mut self, full: u32, peer_places: bool) {
        self.probing = false;
        self.before_rto = None;
        self.shrink(full, peer_places);
    }

    /// The retransmission timer went back to `una` with `max_sent` the
    /// highest PSN sent: one packet probes the responder until it answers;
    /// if the answer acknowledges all sent before the timer fired, nothing
    /// was lost and the window comes back (`on_ack`).
    pub(super) fn on_timeout(&mut self, max_sent: u32, full: u32, peer_places: bool) {
        self.rto_backoff += 1;
        if self.before_rto.is_none() {
            self.before_rto = Some((self.cwnd, max_sent, self.gap_avg));
        }
        self.shrink(full, peer_places);
        self.rtt.untime_below(max_sent);
        self.probing = true;
    }

    /// The timer fired while a READ asked again for a gap: it asks again,
    /// and the timeout doubles.
    pub(super) fn on_reask_timeout(&mut self) {
        self.rto_backoff += 1;
    }

    /// A loss was seen: the window becomes the mean run of packets
    /// acknowledged between losses, at least `CWND_MIN`.
    ///
    /// Go-back-N sends again whatever was in flight past the lost packet, so
    /// each loss costs about the window; a window of the packets the link
    /// carries between two losses spends at most about as much on resending
    /// as on new data, and no less than `CWND_MIN` keeps the link busy. The
    /// losses this answers are random drops, not congestion (RoCE leaves
    /// congestion to the fabric): halving on each loss, as before, held the
    /// window at the minimum at 1 % loss (a loss every 100 packets, a
    /// window grown back by one per window), where the link then idled
    /// through every round trip. `on_ack` gives the window back as the link
    /// stays clean.
    fn shrink(&mut self, full: u32, peer_places: bool) {
        let run = self.clean_run.min(full);
        self.gap_avg = match self.gap_avg {
            u32::MAX => run,
            g => (3 * g + run) / 4,
        };
        self.clean_run = 0;
        // Where a loss costs only itself (`placing`), the window need not
        // shrink to the gap between losses: nothing in flight is sent
        // again. The path still bounds it (`lossy_window`, and twice the
        // path in `allowance`).
        let gap = if self.placing(peer_places) && self.bdp > 0 {
            u32::MAX
        } else {
            self.gap_avg
        };
        self.cwnd = gap
            .min(self.lossy_window(peer_places))
            .clamp(CWND_MIN.min(full), full);
    }

    /// The timer is armed at `now`.
    pub(super) fn arm(&mut self, now: Time) {
        self.rto_armed = now;
    }

    /// When the timer armed last fires (see `rto`).
    pub(super) fn deadline(&self, outstanding: u32, ack_timeout: Option<Duration>) -> Option<Time> {
        self.rto(outstanding, ack_timeout).map(|t| self.rto_armed + t)
    }

    /// The retransmission timeout with `outstanding` packets in flight:
    /// srtt + 4 rttvar, at least `RTO_MIN`, and the time the queue of what
    /// is in flight takes to drain, doubled per expiry without progress (at
    /// most `RTO_DOUBLINGS` times), never more than half the local ACK
    /// timeout (so that it fires first). `None` before a first sample.
    pub(super) fn rto(&self, outstanding: u32, ack_timeout: Option<Duration>) -> Option<Duration> {
        let base = self.rtt.base_rto()?;
        // What is in flight beyond what the path holds waits in a queue, and
        // the last of it is answered only once the queue has drained: add
        // the time that takes at the rate the samples measured. Before a
        // rate sample, or with one taken before the window opened, the path
        // counts as holding `CWND_MIN` packets: a first window sent whole
        // does not fire the timer before its first ACK can come back.
        let drain = self.rtt.min_rtt.map_or(0, |m| {
            let queued = outstanding.saturating_sub(self.bdp);
            u64::from(queued) * m / u64::from(self.bdp.max(CWND_MIN))
        });
        let t = (base + drain).saturating_mul(1 << self.rto_backoff.min(RTO_DOUBLINGS));
        let cap = ack_timeout.map_or(u64::MAX, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        Some(Duration::from_nanos(t.min(cap / 2)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    fn at(us: u64) -> Time {
        Time::from_nanos(us * US)
    }

    /// A control that has timed PSN 0 with a round trip of `rtt_us`.
    fn sampled(rtt_us: u64) -> LossControl {
        let mut c = LossControl::default();
        c.on_sent(0, at(0));
        c.on_ack(1, 1, 0, 256, false, at(rtt_us));
        c
    }

    #[test]
    fn the_first_sample_sets_srtt_and_half_of_it_as_variation() {
        let c = sampled(50);
        assert_eq!(c.rtt.srtt, Some(50 * US));
        assert_eq!(c.rtt.min_rtt, Some(50 * US));
        assert_eq!(c.rtt.rttvar, 25 * US);
    }

    #[test]
    fn later_samples_are_smoothed_as_rfc_6298_has_it() {
        let mut c = sampled(80);
        c.on_sent(1, at(100));
        c.on_ack(2, 1, 0, 256, false, at(140));
        // srtt = 7/8 80 + 1/8 40 = 75; rttvar = 3/4 40 + 1/4 40 = 40.
        assert_eq!(c.rtt.srtt, Some(75 * US));
        assert_eq!(c.rtt.rttvar, 40 * US);
        assert_eq!(c.rtt.min_rtt, Some(40 * US));
    }

    #[test]
    fn no_sample_before_una_passes_the_probe_nor_after_a_rewind() {
        let mut c = LossControl::default();
        c.on_sent(5, at(0));
        // An ACK up to the probe, not past it: no sample.
        c.on_ack(5, 5, 0, 256, false, at(10));
        assert_eq!(c.rtt.srtt, None);
        // Karn: the probed PSN is to be sent again.
        c.on_rewind();
        c.on_ack(6, 1, 0, 256, false, at(20));
        assert_eq!(c.rtt.srtt, None);
        // The next packet sent is the new probe.
        c.on_sent(6, at(30));
        c.on_ack(7, 1, 0, 256, false, at(42));
        assert_eq!(c.rtt.srtt, Some(12 * US));
    }

    #[test]
    fn after_the_timer_went_back_nothing_sent_before_it_is_timed() {
        let mut c = sampled(50);
        c.on_timeout(100, 256, false);
        c.on_rewind();
        // PSN 40 goes out again, below what was sent when the timer fired.
        c.on_sent(40, at(1000));
        c.on_ack(41, 40, 0, 256, false, at(1001));
        assert_eq!(
            c.rtt.srtt,
            Some(50 * US),
            "a copy sent before the timer is not timed"
        );
        // PSN 100, the first sent after: it is.
        c.on_sent(100, at(2000));
        c.on_ack(101, 60, 0, 256, false, at(2030));
        assert_eq!(c.rtt.min_rtt, Some(30 * US));
    }

    #[test]
    fn the_timeout_is_at_least_rto_min_and_none_before_a_sample() {
        let c = LossControl::default();
        assert_eq!(c.rto(0, None), None);
        // srtt 10 us + 4 * 5 us = 30 us, under RTO_MIN.
        let c = sampled(10);
        assert_eq!(c.rto(0, None), Some(Duration::from_nanos(RTO_MIN)));
    }

    #[test]
    fn the_timeout_doubles_at_most_rto_doublings_times_and_stays_under_half_the_ack_timeout() {
        let mut c = sampled(200);
        // srtt 200 + 4 * 100 = 600 us.
        let base = 600 * US;
        assert_eq!(c.rto(0, None), Some(Duration::from_nanos(base)));
        for n in 1..=5u32 {
            c.on_reask_timeout();
            let doublings = n.min(RTO_DOUBLINGS);
            assert_eq!(c.rto(0, None), Some(Duration::from_nanos(base << doublings)));
        }
        let ack_timeout = Duration::from_millis(2);
        assert_eq!(c.rto(0, Some(ack_timeout)), Some(ack_timeout / 2));
        // Progress resets the back-off.
        c.on_ack(2, 1, 0, 256, false, at(1000));
        assert_eq!(c.rto(0, None), Some(Duration::from_nanos(base)));
    }

    #[test]
    fn the_timeout_waits_for_a_queue_beyond_the_path_to_drain() {
        let c = sampled(200);
        // No rate sample yet: the path counts as CWND_MIN packets, and each
        // one queued beyond it adds min_rtt / CWND_MIN.
        let base = c.rto(0, None);
        let queued = c.rto(CWND_MIN * 3, None);
        assert_eq!(queued, base.map(|b| b + Duration::from_nanos(3 * 200 * US)));
    }

    #[test]
    fn a_loss_shrinks_the_window_to_the_gap_between_losses_and_clean_runs_give_it_back() {
        let full = 256;
        let mut c = LossControl::default();
        assert_eq!(c.allowance(full, false), full, "no loss yet: the whole window");
        // 100 packets acknowledged, then a loss: the window is that run.
        c.on_ack(100, 100, 0, full, false, at(100));
        c.on_loss(full, false);
        assert_eq!(c.cwnd, 100);
        // A loss after 8 packets: the average gap is (3 * 100 + 8) / 4.
        c.on_ack(108, 8, 0, full, false, at(200));
        c.on_loss(full, false);
        assert_eq!(c.cwnd, 77);
        // Never below CWND_MIN.
        for _ in 0..20 {
            c.on_loss(full, false);
        }
        assert_eq!(c.cwnd, CWND_MIN);
        // A clean run four windows long brings the whole window back.
        let mut una = 108;
        for _ in 0..4 {
            una += full;
            c.on_ack(una, full, 0, full, false, at(300));
        }
        assert_eq!(c.allowance(full, false), full);
    }

    #[test]
    fn after_the_timer_fires_one_packet_probes_and_a_full_ack_gives_the_window_back() {
        let full = 256;
        let mut c = LossControl::default();
        c.on_ack(200, 200, 0, full, false, at(100));
        c.on_loss(full, false);
        // More progress, then the timer fires with PSNs up to 300 sent.
        c.on_ack(210, 10, 0, full, false, at(150));
        let (cwnd_then, gap_then) = (c.cwnd, c.gap_avg);
        c.on_timeout(300, full, false);
        assert!(c.cwnd < cwnd_then, "the timer shrinks the window");
        assert!(c.probing);
        assert_eq!(c.allowance(full, false), 1);
        assert_eq!(c.allowance(full, true), 1, "probing holds READs too");
        // The probe's answer acknowledges everything sent by then: nothing
        // was lost, and the window from before the timer is back.
        c.on_ack(300, 90, 0, full, false, at(400));
        assert!(!c.probing);
        assert_eq!((c.cwnd, c.gap_avg), (cwnd_then, gap_then));
    }

    #[test]
    fn a_reported_loss_forgets_what_the_timer_took() {
        let full = 256;
        let mut c = LossControl::default();
        c.on_ack(200, 200, 0, full, false, at(100));
        c.on_timeout(300, full, false);
        assert_eq!(c.cwnd, 200);
        c.on_loss(full, false);
        assert!(!c.probing);
        // The gap averages (3 * 200 + 0) / 4; the ACK past 300 gives
        // nothing back now: the loss was real.
        c.on_ack(300, 100, 0, full, false, at(400));
        assert_eq!(c.cwnd, 150);
    }

    #[test]
    fn reads_placed_past_a_gap_keep_the_whole_window() {
        let full = 256;
        let mut c = LossControl::default();
        c.on_ack(100, 100, 0, full, false, at(100));
        c.on_loss(full, false);
        assert_eq!(c.allowance(full, false), 100);
        assert_eq!(c.allowance(full, true), full);
    }

    #[test]
    fn the_rate_sample_measures_what_the_path_carries_in_min_rtt() {
        let full = 256;
        // min_rtt 50 us; the interval starts at the first ACK after it.
        let mut c = sampled(50);
        assert_eq!(c.bdp, 0);
        c.on_ack(2, 1, 0, full, false, at(100));
        // 40 packets over 100 us: 20 in 50 us.
        c.on_ack(42, 40, 0, full, false, at(200));
        assert_eq!(c.bdp, 20);
        // Packets placed ahead count once, when they come.
        c.on_placed();
        c.on_placed();
        c.on_ack(44, 2, 2, full, false, at(250));
        assert_eq!(c.delivered, 44);
        // Idle time says nothing of the path: the next interval starts anew.
        c.on_idle();
        assert_eq!(c.rate_mark, None);
    }
}
