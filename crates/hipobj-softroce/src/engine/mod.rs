//! The reliable-connected transport, with no I/O and no clock.
//!
//! An [`Engine`] holds every queue pair and memory region of one device. It
//! is driven from outside, in the style of quinn-proto and smoltcp:
//!
//! * [`Engine::handle_datagram`] takes one received UDP payload and the time.
//!   It is a pure function of the engine's state and its inputs (plus the
//!   registered memory it writes), never panics, and never touches memory
//!   for a datagram it drops; a fuzzer can call it directly.
//! * [`Engine::handle_timeout`] tells it the time has reached
//!   [`Engine::poll_timeout`].
//! * [`Engine::poll_transmit`] hands out the next datagram to send. It can
//!   return something new after any `handle_*` call, after
//!   [`Engine::post_send`], and after [`Engine::modify_qp`] to ERR (a NAK).
//! * Completions go straight into the [`Cq`]s named at QP creation.
//!
//! Verbs calls ([`Engine::create_qp`], [`Engine::modify_qp`],
//! [`Engine::post_send`], [`Engine::post_recv`], [`Engine::reg_mr`]) act on
//! the same state. The worker thread owns the clock and the sockets; tests
//! drive two engines with virtual time over an in-memory link.

mod ahead;
mod cq;
mod loss;
mod mw;
mod qp;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::ops::Add;
use std::sync::Arc;
use std::time::Duration;

use hipobj_platform::{
    AccessFlags, MemRegion, Mtu, QpAttr, QpAttrMask, QpState, RecvWr, SendWr, VerbsError, VerbsErrorKind,
};

use crate::mem::{Mr, MrTable};
use crate::wire::{self, Packet, PseudoHeader, ROCE_PORT};

pub use cq::Cq;
pub use mw::MwBind;
use mw::PendingQueue;
use qp::Qp;

/// A point in time, in nanoseconds since an epoch the driver picks. The
/// engine never reads a clock; every time it sees comes in as an argument.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(u64);

impl Time {
    /// The epoch.
    pub const ZERO: Time = Time(0);

    /// The time `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Self(nanos)
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// How long after `earlier` this is (zero if it is not after).
    pub fn saturating_since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        Time(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }
}

/// What the engine has seen and done, for tests and diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Datagrams handed to [`Engine::handle_datagram`].
    pub rx_datagrams: u64,
    /// Packets that arrived behind another in one datagram: the second and
    /// later packets of a UDP GRO batch or of a GSO super-packet a raw link
    /// saw whole (they are counted in `rx_datagrams` too).
    pub rx_coalesced: u64,
    /// Datagrams handed out by [`Engine::poll_transmit`].
    pub tx_datagrams: u64,
    /// Dropped: shorter than their headers.
    pub drop_truncated: u64,
    /// Dropped: longer than the largest packet or than the opcode allows.
    pub drop_oversized: u64,
    /// Dropped: an opcode this NIC does not implement.
    pub drop_bad_opcode: u64,
    /// Dropped: BTH version not 0.
    pub drop_bad_version: u64,
    /// Dropped: bad pad count or unaligned length.
    pub drop_bad_pad: u64,
    /// Dropped: ICRC mismatch.
    pub drop_bad_icrc: u64,
    /// Dropped by a raw link: an IPv4 packet to this device's RoCE port
    /// that is not a plain IPv4/UDP packet (options, a fragment, lengths
    /// that disagree).
    pub drop_bad_ip: u64,
    /// Dropped: a partition key other than the default.
    pub drop_bad_pkey: u64,
    /// Dropped: no QP with the destination QP number.
    pub drop_no_qp: u64,
    /// Dropped: the QP's state accepts no packets (RESET, INIT, ERR), or no
    /// packets of that kind (responses in RTR).
    pub drop_qp_state: u64,
    /// Dropped: an RC packet whose IPv4 source is not the address of the
    /// QP's connected peer (its destination GID), however well it is sealed.
    pub drop_foreign_source: u64,
    /// Dropped: a response that matches no outstanding request.
    pub drop_unexpected: u64,
    /// Requests refused (a fatal NAK) because the QP grants no remote access
    /// of that kind (`qp_access_flags`), before any key was looked at.
    pub refused_qp_rights: u64,
    /// Duplicate requests seen by responders (acknowledged, not executed;
    /// READs are answered again).
    pub duplicates: u64,
    /// Requests ahead of the expected PSN (the first of a run NAKed; WRITE
    /// middle packets placed, see `placed_ahead`, the rest dropped).
    pub out_of_sequence: u64,
    /// Packets placed in memory ahead of the PSN their QP waited for, after
    /// a loss before them: WRITE middle packets at a responder, READ
    /// responses at a requester. None of them crosses the link again.
    pub placed_ahead: u64,
    /// READ requests sent again for a gap in the responses, asking for the
    /// gap alone (what came after it was placed; see `placed_ahead`).
    pub read_reasks: u64,
    /// Sequence-error NAKs sent.
    pub naks_sequence: u64,
    /// RNR NAKs sent.
    pub naks_rnr: u64,
    /// Fatal NAKs sent (access, invalid request, operational).
    pub naks_fatal: u64,
    /// Requester local ACK timeouts that fired.
    pub timeouts: u64,
    /// Requester retransmission timeouts (sized from the measured round
    /// trip, well before the local ACK timeout) that went back to the oldest
    /// unacknowledged PSN without spending a retry.
    pub rto_rewinds: u64,
    /// Requester go-back-N rewinds (NAKs, timeouts, READ response gaps).
    pub rewinds: u64,
    /// Packets sent again with a PSN sent before.
    pub retransmits: u64,
    /// Completions lost to a full completion queue.
    pub cq_overruns: u64,
}

impl Counters {
    /// All malformed datagrams dropped before reaching a QP.
    pub fn malformed(&self) -> u64 {
        self.drop_truncated
            + self.drop_oversized
            + self.drop_bad_opcode
            + self.drop_bad_version
            + self.drop_bad_pad
            + self.drop_bad_icrc
            + self.drop_bad_ip
    }

    fn count_parse_error(&mut self, e: wire::Error) {
        let c = match e {
            wire::Error::Truncated => &mut self.drop_truncated,
            wire::Error::Oversized => &mut self.drop_oversized,
            wire::Error::BadOpcode => &mut self.drop_bad_opcode,
            wire::Error::BadVersion => &mut self.drop_bad_version,
            wire::Error::BadPad => &mut self.drop_bad_pad,
            wire::Error::BadIcrc => &mut self.drop_bad_icrc,
        };
        *c += 1;
    }
}

/// How an engine behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// The address this device sends from and receives at.
    pub local: SocketAddrV4,
    /// The port's active MTU: the most any QP uses.
    pub mtu: Mtu,
    /// Packets a requester keeps in flight unacknowledged (READ response
    /// packets included).
    pub window: u32,
    /// A requester asks for an ACK at least every this many packets.
    pub ack_every: u32,
    /// Response packets one READ request asks for at most: a large READ
    /// goes out as several requests of this size, so that a lost response
    /// costs at most this much to ask again.
    pub read_chunk: u32,
    /// Most outstanding work requests per queue.
    pub max_qp_wr: u32,
    /// Most scatter/gather entries per work request.
    pub max_sge: u32,
    /// Whether packets that arrive after a loss are placed at once (see
    /// `engine::ahead`): WRITE middle packets at a responder, READ responses
    /// at a requester. Off, this NIC drops them as IBA describes and the
    /// kernel's rxe does, and recovers by go-back-N alone (the bench's
    /// comparison rows).
    pub place_ahead: bool,
}

impl EngineConfig {
    /// Defaults for a device at `ip`, UDP port 4791.
    pub fn new(ip: Ipv4Addr) -> Self {
        Self {
            local: SocketAddrV4::new(ip, ROCE_PORT),
            mtu: Mtu::Mtu4096,
            window: 256,
            ack_every: 64,
            read_chunk: 128,
            max_qp_wr: 16384,
            max_sge: 32,
            place_ahead: true,
        }
    }
}

/// A datagram [`Engine::poll_transmit`] wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Where to send it.
    pub dst: SocketAddrV4,
    /// Its length at the start of the buffer.
    pub len: usize,
}

/// What a new QP needs (`ibv_qp_init_attr` with the CQs resolved).
#[derive(Clone, Debug)]
pub struct QpConfig {
    /// Protection domain.
    pub pd: u32,
    /// Where send work requests complete.
    pub send_cq: Arc<Cq>,
    /// Where receive work requests complete.
    pub recv_cq: Arc<Cq>,
    /// Most outstanding send work requests.
    pub max_send_wr: u32,
    /// Most outstanding receive work requests.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send work request.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive work request.
    pub max_recv_sge: u32,
    /// Whether every send work request completes.
    pub sq_sig_all: bool,
}

/// The borrowed surroundings of a QP while it handles an event.
pub(crate) struct Ctx<'a> {
    pub now: Time,
    pub mrs: &'a MrTable,
    pub counters: &'a mut Counters,
    pub config: &'a EngineConfig,
}

/// Every QP and memory region of one device, and the RC rules between them.
#[derive(Debug)]
pub struct Engine {
    config: EngineConfig,
    mrs: MrTable,
    qps: HashMap<u32, Qp>,
    /// The QPs that may have a packet to send, in the order they take
    /// turns. Every event that can give a QP something to send puts it here
    /// ([`Engine::wake`]): a work request posted, a packet received, a
    /// state change, a timer fired, a window operation run. `poll_transmit`
    /// looks at these alone, so a device with hundreds of idle QPs (a
    /// server's bindings) costs a sending QP nothing per packet; a QP with
    /// nothing to send leaves the queue until its next event.
    ready: VecDeque<u32>,
    /// The QPs in `ready`.
    queued: HashSet<u32>,
    next_qpn: u32,
    next_pd: u32,
    counters: Counters,
    /// Send-queue entries waiting behind a window operation, per QP.
    mw_pending: HashMap<u32, PendingQueue>,
}

fn not_found(op: &'static str, what: String) -> VerbsError {
    VerbsError::new(op, VerbsErrorKind::NotFound, what)
}

impl Engine {
    /// An engine with no QPs and no memory regions.
    pub fn new(config: EngineConfig) -> Self {
        Self {
            config,
            mrs: MrTable::new(),
            qps: HashMap::new(),
            ready: VecDeque::new(),
            queued: HashSet::new(),
            next_qpn: 0x11,
            next_pd: 1,
            counters: Counters::default(),
            mw_pending: HashMap::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// A snapshot of the counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// A new protection domain number.
    pub fn alloc_pd(&mut self) -> u32 {
        let pd = self.next_pd;
        self.next_pd = self.next_pd.wrapping_add(1).max(1);
        pd
    }

    /// Registers `region` in protection domain `pd`, addressed by peers at
    /// the region's own address, and returns its key (lkey = rkey).
    pub fn reg_mr(&mut self, pd: u32, region: MemRegion, access: AccessFlags) -> Result<u32, VerbsError> {
        if access.contains(AccessFlags::REMOTE_WRITE) && !access.contains(AccessFlags::LOCAL_WRITE) {
            return Err(VerbsError::new(
                "ibv_reg_mr",
                VerbsErrorKind::InvalidArgument,
                "REMOTE_WRITE needs LOCAL_WRITE",
            ));
        }
        if access.contains(AccessFlags::REMOTE_ATOMIC) {
            return Err(VerbsError::new(
                "ibv_reg_mr",
                VerbsErrorKind::Unsupported,
                "the soft NIC does not implement atomics",
            ));
        }
        if region.is_empty() {
            return Err(VerbsError::new(
                "ibv_reg_mr",
                VerbsErrorKind::InvalidArgument,
                "empty memory region",
            ));
        }
        Ok(self.mrs.register(Mr {
            region,
            iova: region.addr() as u64,
            access,
            pd,
        }))
    }

    /// Deregisters a memory region: from the moment this returns, no packet
    /// and no work request reaches its memory.
    pub fn dereg_mr(&mut self, key: u32) -> bool {
        self.mrs.deregister(key)
    }

    /// Creates an RC QP in RESET and returns its number.
    pub fn create_qp(&mut self, cfg: QpConfig) -> Result<u32, VerbsError> {
        let c = &self.config;
        if cfg.max_send_wr > c.max_qp_wr
            || cfg.max_recv_wr > c.max_qp_wr
            || cfg.max_send_sge > c.max_sge
            || cfg.max_recv_sge > c.max_sge
        {
            return Err(VerbsError::new(
                "ibv_create_qp",
                VerbsErrorKind::InvalidArgument,
                format!(
                    "capabilities over the device limits ({} WRs, {} SGEs)",
                    c.max_qp_wr, c.max_sge
                ),
            ));
        }
        let mut qpn = self.next_qpn;
        while self.qps.contains_key(&qpn) {
            qpn = (qpn + 1) & wire::psn::MASK;
        }
        self.next_qpn = ((qpn + 1) & wire::psn::MASK).max(0x11);
        self.qps.insert(qpn, Qp::new(qpn, cfg));
        Ok(qpn)
    }

    /// Destroys a QP. Its outstanding work requests vanish with no
    /// completions, and packets for it are dropped from then on.
    pub fn destroy_qp(&mut self, qpn: u32) -> bool {
        // A stale entry in `ready` is skipped by `poll_transmit`.
        self.queued.remove(&qpn);
        self.forget_window_ops(qpn, true);
        self.qps.remove(&qpn).is_some()
    }

    /// Changes a QP's state and attributes as `ibv_modify_qp` does, at `now`.
    pub fn modify_qp(
        &mut self,
        now: Time,
        qpn: u32,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), VerbsError> {
        let qp = self
            .qps
            .get_mut(&qpn)
            .ok_or_else(|| not_found("ibv_modify_qp", format!("no QP {qpn:#x}")))?;
        let mut ctx = Ctx {
            now,
            mrs: &self.mrs,
            counters: &mut self.counters,
            config: &self.config,
        };
        qp.modify(&mut ctx, attr, mask)?;
        self.wake(qpn);
        match attr.qp_state {
            QpState::Reset => self.forget_window_ops(qpn, false),
            _ => self.run_window_ops(now, qpn),
        }
        Ok(())
    }

    /// A QP's state.
    pub fn qp_state(&self, qpn: u32) -> Result<QpState, VerbsError> {
        self.qps
            .get(&qpn)
            .map(|q| q.state)
            .ok_or_else(|| not_found("ibv_query_qp", format!("no QP {qpn:#x}")))
    }

    /// Posts a send work request (`ibv_post_send`) at `now`.
    pub fn post_send(&mut self, now: Time, qpn: u32, wr: &SendWr<'_>) -> Result<(), VerbsError> {
        self.wake(qpn);
        if self.post_send_ordered(now, qpn, wr)? {
            return Ok(());
        }
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return Err(not_found("ibv_post_send", format!("no QP {qpn:#x}")));
        };
        let mut ctx = Ctx {
            now,
            mrs: &self.mrs,
            counters: &mut self.counters,
            config: &self.config,
        };
        qp.post_send(&mut ctx, wr)
    }

    /// Posts a receive work request (`ibv_post_recv`).
    pub fn post_recv(&mut self, qpn: u32, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        self.wake(qpn);
        let counters = &mut self.counters;
        match self.qps.get_mut(&qpn) {
            Some(qp) => qp.post_recv(counters, wr),
            None => Err(not_found("ibv_post_recv", format!("no QP {qpn:#x}"))),
        }
    }

    /// Handles one received datagram (a UDP payload from `from`, sent to this
    /// device's address). Malformed datagrams and datagrams no QP may accept
    /// are dropped and counted; nothing else happens for them.
    ///
    /// The ICRC is checked over the IPv4 and UDP headers such a datagram
    /// has when the peer sends it as this NIC does (identification 0, DF;
    /// see [`PseudoHeader::ip_udp_header`]): this is the entry of a link
    /// that does not see the real headers.
    pub fn handle_datagram(&mut self, now: Time, from: SocketAddrV4, datagram: &[u8]) {
        self.handle_segment(now, from, datagram, &[0]);
    }

    /// Handles a datagram a UDP link received with UDP GRO: the packets
    /// of `data`, cut every `segment_size` bytes (the last one possibly
    /// shorter; the whole datagram is one packet without a size), each as
    /// [`Engine::handle_segment`] handles it under the identifications the
    /// sender's kernel gave its segments, which the link cannot see:
    ///
    /// The link's peers are soft NICs on UDP links, which send a packet
    /// alone under identification 0 and the segments of a GSO super-packet
    /// under `0, 1, 2, …` (`link::udp::GsoSender`). On loopback the kernel
    /// hands a GRO receiver each super-packet as it was sent, so packet `k`
    /// carries `k`. Where a kernel coalesced several super-packets (GRO on
    /// a real interface), the numbering starts again at 0 where each one
    /// began: so packet `k` is tried under `k - b`, where `b` is the last
    /// packet that verified under 0, then under 0. A packet that verifies
    /// under neither is dropped and counted (`drop_bad_icrc`), never
    /// accepted. `seen` is told each packet's bytes and the identification
    /// its ICRC verified under (the first one tried when none did).
    pub fn handle_gro(
        &mut self,
        now: Time,
        from: SocketAddrV4,
        data: &[u8],
        segment_size: Option<usize>,
        seen: &mut dyn FnMut(std::ops::Range<usize>, u16),
    ) {
        let size = segment_size.unwrap_or(data.len()).max(1);
        let mut base = 0;
        for (k, seg) in data.chunks(size).enumerate() {
            if k > 0 {
                self.counters.rx_coalesced += 1;
            }
            let ids = [(k - base) as u16, 0];
            let got = self.handle_segment(now, from, seg, &ids);
            if got == Some(0) {
                base = k;
            }
            seen(k * size..k * size + seg.len(), got.unwrap_or(ids[0]));
        }
    }

    /// Handles one received datagram as [`Engine::handle_datagram`] does,
    /// but checks its ICRC under each IP identification of `ids` in turn
    /// (the header as the kernel builds it otherwise): a UDP link that
    /// receives a GRO batch does not see the identifications, which the
    /// sender's kernel numbered per segment, so it names the likely ones.
    /// Returns the identification the ICRC verified under, `None` when it
    /// failed under every one (then the datagram is dropped and counted as
    /// a bad ICRC) or the datagram failed before the ICRC.
    pub fn handle_segment(
        &mut self,
        now: Time,
        from: SocketAddrV4,
        datagram: &[u8],
        ids: &[u16],
    ) -> Option<u16> {
        self.counters.rx_datagrams += 1;
        let pseudo = PseudoHeader {
            src: from,
            dst: self.config.local,
        };
        let mut packet = Err(wire::Error::BadIcrc);
        let mut verified = None;
        for (j, &id) in ids.iter().enumerate() {
            if ids[..j].contains(&id) {
                continue;
            }
            packet = Packet::parse_over(datagram, &pseudo.ip_udp_header_with_id(datagram.len(), id));
            if !matches!(packet, Err(wire::Error::BadIcrc)) {
                verified = packet.is_ok().then_some(id);
                break;
            }
        }
        self.handle_parsed(now, from, packet);
        verified
    }

    /// Handles one received IPv4 packet, headers included, as a raw link
    /// receives it. Packets for another address or UDP port are ignored
    /// (returns false; nothing is counted: they are not RoCE traffic of
    /// this device). A RoCE packet's ICRC is checked against the IPv4 and
    /// UDP headers it actually arrived with; one whose IPv4 or UDP header
    /// is malformed, carries options or is a fragment is dropped and
    /// counted in `drop_bad_ip`.
    pub fn handle_ipv4(&mut self, now: Time, packet: &[u8]) -> bool {
        let Some(ip) = wire::icrc::Ipv4Udp::parse(packet) else {
            // Only what could be RoCE for us is counted.
            let for_us = packet.len() >= 24
                && packet[16..20] == self.config.local.ip().octets()
                && packet[22..24] == ROCE_PORT.to_be_bytes();
            if for_us {
                self.counters.rx_datagrams += 1;
                self.counters.drop_bad_ip += 1;
            }
            return for_us;
        };
        if ip.dst != self.config.local {
            return false;
        }
        let whole = Packet::parse_over(ip.payload, &ip.ip_udp);
        let size = match whole {
            Err(wire::Error::BadIcrc | wire::Error::Oversized) => {
                wire::icrc::gso_segment_size(&ip.ip_udp, ip.payload)
            }
            _ => None,
        };
        let Some(size) = size else {
            self.counters.rx_datagrams += 1;
            self.handle_parsed(now, ip.src, whole);
            return true;
        };
        // A UDP GSO super-packet of a UDP link on the same host (loopback
        // hands raw sockets the packet before the kernel segments it): the
        // packets the kernel will make of it, each under the header the
        // segmentation gives it.
        let base = u16::from_be_bytes([ip.ip_udp[4], ip.ip_udp[5]]);
        for (k, seg) in ip.payload.chunks(size).enumerate() {
            self.counters.rx_datagrams += 1;
            if k > 0 {
                self.counters.rx_coalesced += 1;
            }
            let id = base.wrapping_add(k as u16);
            let hdr = wire::icrc::segment_header(&ip.ip_udp, seg.len(), id);
            let packet = Packet::parse_over(seg, &hdr);
            self.handle_parsed(now, ip.src, packet);
        }
        true
    }

    fn handle_parsed(&mut self, now: Time, from: SocketAddrV4, packet: wire::Result<Packet<'_>>) {
        let packet = match packet {
            Ok(p) => p,
            Err(e) => return self.counters.count_parse_error(e),
        };
        // Only the default partition (full or limited membership).
        if packet.headers.bth.pkey & 0x7fff != 0x7fff {
            self.counters.drop_bad_pkey += 1;
            return;
        }
        let dest_qp = packet.headers.bth.dest_qp;
        if !self.qps.contains_key(&dest_qp) {
            self.counters.drop_no_qp += 1;
            return;
        }
        // Even a packet the QP drops may leave it an ACK or NAK to send.
        self.wake(dest_qp);
        let Some(qp) = self.qps.get_mut(&dest_qp) else {
            return;
        };
        // RC: only the connected peer speaks to a QP. Its address is the
        // destination GID (IPv4-mapped); the UDP source port of RoCEv2 is
        // flow entropy, so it is not compared. A QP before RTR has no peer
        // yet and drops everything on its own (counted as a state drop).
        let connected = matches!(
            qp.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        );
        if connected && from.ip() != qp.peer().ip() {
            self.counters.drop_foreign_source += 1;
            return;
        }
        let mut ctx = Ctx {
            now,
            mrs: &self.mrs,
            counters: &mut self.counters,
            config: &self.config,
        };
        qp.handle_packet(&mut ctx, &packet);
        if !self.mw_pending.is_empty() {
            self.run_window_ops(now, packet.headers.bth.dest_qp);
        }
    }

    /// Fires every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        for (&qpn, qp) in self.qps.iter_mut() {
            if qp.next_timeout().is_some_and(|t| t <= now) && self.queued.insert(qpn) {
                self.ready.push_back(qpn);
            }
            let mut ctx = Ctx {
                now,
                mrs: &self.mrs,
                counters: &mut self.counters,
                config: &self.config,
            };
            qp.handle_timeout(&mut ctx);
        }
        self.run_all_window_ops(now);
    }

    /// The earliest time at which [`Engine::handle_timeout`] has work, if any.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.qps.values().filter_map(|q| q.next_timeout()).min()
    }

    /// Writes the next datagram to send into `buf` (which must hold
    /// [`wire::MAX_PACKET`] bytes) and says where it goes. QPs take turns.
    pub fn poll_transmit(&mut self, now: Time, buf: &mut [u8]) -> Option<Transmit> {
        for _ in 0..self.ready.len() {
            let qpn = self.ready.pop_front()?;
            if !self.queued.contains(&qpn) {
                continue; // destroyed since it was queued
            }
            let Some(qp) = self.qps.get_mut(&qpn) else {
                self.queued.remove(&qpn);
                continue;
            };
            let mut ctx = Ctx {
                now,
                mrs: &self.mrs,
                counters: &mut self.counters,
                config: &self.config,
            };
            if let Some(len) = qp.transmit(&mut ctx, buf) {
                // Its next packet waits for every other ready QP's.
                self.ready.push_back(qpn);
                self.counters.tx_datagrams += 1;
                return Some(Transmit { dst: qp.peer(), len });
            }
            self.queued.remove(&qpn);
        }
        None
    }

    /// How many QPs `poll_transmit` would look at now.
    #[cfg(test)]
    pub(crate) fn ready_qps(&self) -> usize {
        self.queued.len()
    }

    /// Puts QP `qpn` among those that may have a packet to send.
    fn wake(&mut self, qpn: u32) {
        if self.queued.insert(qpn) {
            self.ready.push_back(qpn);
        }
    }
}
