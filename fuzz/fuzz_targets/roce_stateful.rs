//! The soft NIC's RC engine on a live connection, fed a sequence of
//! datagrams the fuzzer composes from its input: RDMA WRITE, READ request
//! and SEND packets near the expected PSN (or anywhere), with valid, foreign
//! or forged keys and addresses around each memory region, READ responses
//! and ACKs for a READ the QP has posted, replays of any earlier datagram
//! (duplicates and reordering), raw bytes, forged sources and destination
//! QPs, and the passage of time. After every step the RC invariants are
//! checked against the memory itself:
//!
//! * nothing outside a remotely writable key's range changes: guard pages
//!   between the regions, a region registered read-only, and a region with
//!   local access only (except the ranges the QP itself posted there);
//! * a successful receive completion reports at most the posted length and
//!   every byte it reports landed; a successful READ completion reports the
//!   posted length and every byte landed (the fuzzer's payload bytes never
//!   take the value the unfilled memory holds);
//! * no transmitted payload carries bytes from a guard page or from the
//!   local-only region (never remotely readable).
//!
//! Input format: a sequence of steps, each a tag byte and its operands (see
//! `step`); a short input is padded with zeros. Seeds: fuzz/corpus/roce_stateful.
#![no_main]

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, OnceLock};

use hipobj_platform::{
    AccessFlags, Gid, Mtu, QpAttr, QpAttrMask, QpState, RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus,
};
use hipobj_softroce::HostBuffer;
use hipobj_softroce::engine::{Cq, Engine, EngineConfig, QpConfig, Time};
use hipobj_softroce::wire::aeth::{AethRepr, Syndrome};
use hipobj_softroce::wire::bth::{BthRepr, DEFAULT_PKEY};
use hipobj_softroce::wire::reth::RethRepr;
use hipobj_softroce::wire::{Headers, Opcode, Packet, PseudoHeader, ROCE_PORT};
use libfuzzer_sys::fuzz_target;

const LOCAL: Ipv4Addr = Ipv4Addr::new(127, 71, 0, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(127, 71, 0, 2);
const PEER_QPN: u32 = 0x20;
const PAGE: usize = 4096;
const MTU: usize = 1024;

// Memory: seven pages, guards between three regions.
//   page 0 guard | 1 RW (remote read+write) | 2 guard | 3 RO (remote read)
//   | 4 guard | 5 LOCAL (local write only) | 6 guard
const RW: usize = PAGE;
const RO: usize = 3 * PAGE;
const LOC: usize = 5 * PAGE;
const TOTAL: usize = 7 * PAGE;
const GUARD_BYTE: u8 = 0xa5;
const RW_FILL: u8 = 0x11;
const RO_FILL: u8 = 0x22;
/// What the local-only region holds where nothing landed yet. The fuzzer's
/// payload bytes are all below 0xa0, so neither this nor GUARD_BYTE can
/// come from a peer.
const UNLANDED: u8 = 0xff;
/// Where SENDs land: the first half of LOCAL.
const RECV_OFF: usize = LOC;
const RECV_LEN: usize = 2048;
/// Where the QP's own RDMA READ lands: up to the second half of LOCAL.
const READ_OFF: usize = LOC + RECV_LEN;
const READ_MAX: usize = PAGE - RECV_LEN;

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

struct Keys {
    rw: u32,
    ro: u32,
    local: u32,
}

struct World {
    e: Engine,
    mem: &'static HostBuffer,
    keys: Keys,
    qpn: u32,
    scq: Arc<Cq>,
    rcq: Arc<Cq>,
    /// Every datagram delivered so far, for replays.
    history: Vec<(SocketAddrV4, Vec<u8>)>,
    /// The PSN the responder expects next, as far as this model knows.
    rq_psn: u32,
    /// The next response PSN for the requester, as far as this model knows.
    resp_psn: u32,
    /// Length of the READ the QP has outstanding, if any.
    read_len: Option<usize>,
    /// Whether the receive buffer was ever handed to the engine.
    recv_posted: bool,
    /// Bytes from READ_OFF handed to the engine by the outstanding READ.
    read_posted: usize,
    now: u64,
    out: Vec<u8>,
    /// A copy of the memory, read after each step.
    image: Vec<u8>,
}

fn mem() -> &'static HostBuffer {
    static MEM: OnceLock<HostBuffer> = OnceLock::new();
    MEM.get_or_init(|| HostBuffer::new(TOTAL))
}

fn connect(e: &mut Engine, qpn: u32) {
    use QpAttrMask as M;
    let init = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        ..QpAttr::default()
    };
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: PEER_QPN,
        rq_psn: 0,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        dgid: Gid::from_ipv4(PEER),
        ..QpAttr::default()
    };
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: 0,
        timeout: 10,
        retry_cnt: 3,
        rnr_retry: 3,
        max_rd_atomic: 4,
        ..QpAttr::default()
    };
    let r = e.modify_qp(Time::ZERO, qpn, &init, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS);
    assert!(r.is_ok(), "INIT: {r:?}");
    let r = e.modify_qp(
        Time::ZERO,
        qpn,
        &rtr,
        M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER,
    );
    assert!(r.is_ok(), "RTR: {r:?}");
    let r = e.modify_qp(
        Time::ZERO,
        qpn,
        &rts,
        M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC,
    );
    assert!(r.is_ok(), "RTS: {r:?}");
}

impl World {
    fn new() -> Self {
        let mem = mem();
        let mut image = vec![GUARD_BYTE; TOTAL];
        image[RW..RW + PAGE].fill(RW_FILL);
        image[RO..RO + PAGE].fill(RO_FILL);
        image[LOC..LOC + PAGE].fill(UNLANDED);
        mem.write(0, &image);
        let mut config = EngineConfig::new(LOCAL);
        config.mtu = Mtu::Mtu1024;
        let mut e = Engine::new(config);
        let pd = e.alloc_pd();
        let region = |off: usize| mem.region().slice(off, PAGE).expect("inside the buffer");
        let reg = |e: &mut Engine, off: usize, access: AccessFlags| {
            e.reg_mr(pd, region(off), access).expect("registration")
        };
        let keys = Keys {
            rw: reg(
                &mut e,
                RW,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            ),
            ro: reg(&mut e, RO, AccessFlags::REMOTE_READ),
            local: reg(&mut e, LOC, AccessFlags::LOCAL_WRITE),
        };
        let scq = Arc::new(Cq::new(256));
        let rcq = Arc::new(Cq::new(256));
        let qpn = e
            .create_qp(QpConfig {
                pd,
                send_cq: scq.clone(),
                recv_cq: rcq.clone(),
                max_send_wr: 16,
                max_recv_wr: 16,
                max_send_sge: 1,
                max_recv_sge: 1,
                sq_sig_all: true,
            })
            .expect("create_qp");
        connect(&mut e, qpn);
        let mut w = Self {
            e,
            mem,
            keys,
            qpn,
            scq,
            rcq,
            history: Vec::new(),
            rq_psn: 0,
            resp_psn: 0,
            read_len: None,
            recv_posted: false,
            read_posted: 0,
            now: 1,
            out: vec![0; 9000],
            image: vec![0; TOTAL],
        };
        w.post_recv();
        w
    }

    fn addr(&self, off: usize) -> u64 {
        self.mem.addr() + off as u64
    }

    fn post_recv(&mut self) {
        let sge = Sge {
            addr: self.addr(RECV_OFF),
            length: RECV_LEN as u32,
            lkey: self.keys.local,
        };
        if self
            .e
            .post_recv(
                self.qpn,
                &RecvWr {
                    wr_id: 1,
                    sg_list: &[sge],
                },
            )
            .is_ok()
        {
            self.recv_posted = true;
        }
    }

    /// A key and an address: the fuzzer picks which region's key (or a
    /// forged one) and an offset of up to ±32 KiB around that region.
    fn key_and_va(&self, input: &mut Input<'_>) -> (u32, u64) {
        let sel = input.u8();
        let off = i64::from(input.u16() as i16);
        let (key, base) = match sel % 5 {
            0 => (self.keys.rw, RW),
            1 => (self.keys.ro, RO),
            2 => (self.keys.local, LOC),
            3 => (input.u32(), RW),
            // A valid key with a forged bit pattern around it.
            _ => (self.keys.rw ^ (1 << (input.u8() % 32)), RW),
        };
        let va = (self.addr(base) as i64).wrapping_add(off) as u64;
        (key, va)
    }

    /// A PSN: near what the model expects, or anywhere.
    fn psn(input: &mut Input<'_>, expected: u32) -> u32 {
        let d = input.u8();
        if d == 0xff {
            input.u32() & 0x00ff_ffff
        } else {
            expected.wrapping_add(i32::from(d as i8) as u32) & 0x00ff_ffff
        }
    }

    /// Sends `h` with `payload_len` fuzzer bytes (all below 0xa0) from the
    /// peer, or a forged source / destination / pkey when `flags` says so.
    /// When `forbidden` (a key or range the packet has no right to), or
    /// when the packet names another QP or its ICRC is broken, no byte of
    /// memory may change.
    fn deliver(&mut self, mut h: Headers, payload_len: usize, seed: u8, flags: u8, forbidden: bool) {
        // (The engine does not check the source address beyond the ICRC,
        // docs/soft-roce.md: a forged source is a valid packet.)
        let before = (forbidden || flags & 0xa != 0).then(|| self.mem.to_vec());
        let mut from = SocketAddrV4::new(PEER, ROCE_PORT);
        if flags & 1 != 0 {
            from = SocketAddrV4::new(Ipv4Addr::new(127, 71, 0, 9), ROCE_PORT);
        }
        if flags & 2 != 0 {
            h.bth.dest_qp ^= 1;
        }
        if flags & 4 != 0 {
            h.bth.pkey = 0x1234;
        }
        let pseudo = PseudoHeader {
            src: from,
            dst: SocketAddrV4::new(LOCAL, ROCE_PORT),
        };
        let mut buf = vec![0; h.datagram_len(payload_len)];
        let ok = h.emit(payload_len, &pseudo, &mut buf, |p| {
            for (i, b) in p.iter_mut().enumerate() {
                *b = (seed as usize).wrapping_add(i.wrapping_mul(7)) as u8 % 0xa0;
            }
        });
        if ok.is_none() {
            return;
        }
        if flags & 8 != 0 {
            // A flipped bit after sealing: the ICRC must catch it. (Not in
            // the BTH's reserved byte 4, which the ICRC masks out.)
            let i = match usize::from(seed) % buf.len() {
                4 => 0,
                i => i,
            };
            buf[i] ^= 1;
        }
        self.send_raw(from, buf);
        if let Some(before) = before {
            let after = self.mem.to_vec();
            if before != after {
                let off = before.iter().zip(&after).position(|(a, b)| a != b).unwrap_or(0);
                panic!("a packet with no right to memory changed it at {off:#x}: {h:?}, flags {flags:#x}");
            }
        }
    }

    fn send_raw(&mut self, from: SocketAddrV4, datagram: Vec<u8>) {
        self.e
            .handle_datagram(Time::from_nanos(self.now), from, &datagram);
        if self.history.len() < 64 {
            self.history.push((from, datagram));
        }
    }

    fn bth(opcode: Opcode, psn: u32, dest_qp: u32) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            pad_count: 0,
            pkey: DEFAULT_PKEY,
            dest_qp,
            ack_req: true,
            psn,
        }
    }

    fn step(&mut self, input: &mut Input<'_>) {
        match input.u8() % 10 {
            // An RDMA WRITE packet.
            0 => {
                let opcode = [
                    Opcode::WriteOnly,
                    Opcode::WriteFirst,
                    Opcode::WriteMiddle,
                    Opcode::WriteLast,
                    Opcode::WriteOnlyImm,
                    Opcode::WriteLastImm,
                ][usize::from(input.u8() % 6)];
                let psn = Self::psn(input, self.rq_psn);
                let (rkey, va) = self.key_and_va(input);
                let dma_len = u32::from(input.u16() % 4096);
                let len = usize::from(input.u16()) % (MTU + 8);
                let seed = input.u8();
                let flags = input.u8();
                let has_reth = matches!(
                    opcode,
                    Opcode::WriteOnly | Opcode::WriteFirst | Opcode::WriteOnlyImm
                );
                let has_imm = matches!(opcode, Opcode::WriteOnlyImm | Opcode::WriteLastImm);
                let h = Headers {
                    bth: Self::bth(opcode, psn, self.qpn),
                    reth: has_reth.then_some(RethRepr { va, rkey, dma_len }),
                    aeth: None,
                    imm: has_imm.then_some(0x1234_5678),
                };
                if psn == self.rq_psn && flags & 15 == 0 {
                    self.rq_psn = (self.rq_psn + 1) & 0x00ff_ffff;
                }
                // A single-packet WRITE outside the one writable region, or
                // under any other key, must not land at all.
                let rw = self.addr(RW);
                let inside = va >= rw && va.saturating_add(u64::from(dma_len)) <= rw + PAGE as u64;
                let only = matches!(opcode, Opcode::WriteOnly | Opcode::WriteOnlyImm);
                let forbidden = only && !(rkey == self.keys.rw && inside);
                self.deliver(h, len, seed, flags, forbidden);
            }
            // An RDMA READ request.
            1 => {
                let psn = Self::psn(input, self.rq_psn);
                let (rkey, va) = self.key_and_va(input);
                let dma_len = u32::from(input.u16() % 8192);
                let flags = input.u8();
                let h = Headers {
                    bth: Self::bth(Opcode::ReadRequest, psn, self.qpn),
                    reth: Some(RethRepr { va, rkey, dma_len }),
                    aeth: None,
                    imm: None,
                };
                if psn == self.rq_psn && flags & 15 == 0 {
                    let packets = (dma_len as usize).div_ceil(MTU).max(1) as u32;
                    self.rq_psn = (self.rq_psn + packets) & 0x00ff_ffff;
                }
                self.deliver(h, 0, 0, flags, false);
            }
            // A SEND packet.
            2 => {
                let opcode = [
                    Opcode::SendOnly,
                    Opcode::SendFirst,
                    Opcode::SendMiddle,
                    Opcode::SendLast,
                    Opcode::SendOnlyImm,
                    Opcode::SendLastImm,
                ][usize::from(input.u8() % 6)];
                let psn = Self::psn(input, self.rq_psn);
                let len = usize::from(input.u16()) % (MTU + 8);
                let seed = input.u8();
                let flags = input.u8();
                let has_imm = matches!(opcode, Opcode::SendOnlyImm | Opcode::SendLastImm);
                let h = Headers {
                    bth: Self::bth(opcode, psn, self.qpn),
                    reth: None,
                    aeth: None,
                    imm: has_imm.then_some(7),
                };
                if psn == self.rq_psn && flags & 15 == 0 {
                    self.rq_psn = (self.rq_psn + 1) & 0x00ff_ffff;
                }
                self.deliver(h, len, seed, flags, false);
            }
            // Replay an earlier datagram: duplicates and reordering.
            3 => {
                let i = usize::from(input.u8());
                if !self.history.is_empty() {
                    let (from, d) = self.history[i % self.history.len()].clone();
                    self.e.handle_datagram(Time::from_nanos(self.now), from, &d);
                }
            }
            // Time passes: up to about 17 s in powers of two.
            4 => {
                self.now = self.now.saturating_add(1u64 << (input.u8() % 35));
                self.e.handle_timeout(Time::from_nanos(self.now));
            }
            // Whatever the engine wants to send, checked.
            5 => self.drain(),
            // Raw bytes, with a valid ICRC sealed on.
            6 => {
                let len = usize::from(input.u8());
                let mut d: Vec<u8> = (0..len).map(|_| input.u8() % 0xa0).collect();
                d.extend_from_slice(&[0; 4]);
                let from = SocketAddrV4::new(PEER, ROCE_PORT);
                PseudoHeader {
                    src: from,
                    dst: SocketAddrV4::new(LOCAL, ROCE_PORT),
                }
                .seal(&mut d);
                self.send_raw(from, d);
            }
            // The QP posts an RDMA READ from the peer into LOCAL.
            7 => {
                let len = usize::from(input.u16()) % READ_MAX + 1;
                let rkey = input.u32();
                if self.read_len.is_none() {
                    let sge = Sge {
                        addr: self.addr(READ_OFF),
                        length: len as u32,
                        lkey: self.keys.local,
                    };
                    let wr = SendWr {
                        wr_id: 2,
                        op: SendOp::Read {
                            remote_addr: 0x1000,
                            rkey,
                        },
                        sg_list: &[sge],
                        signaled: true,
                    };
                    if self.e.post_send(Time::from_nanos(self.now), self.qpn, &wr).is_ok() {
                        self.read_len = Some(len);
                        self.read_posted = len;
                    }
                }
            }
            // A READ response or an ACK/NAK, as from the peer.
            8 => {
                let opcode = [
                    Opcode::ReadResponseOnly,
                    Opcode::ReadResponseFirst,
                    Opcode::ReadResponseMiddle,
                    Opcode::ReadResponseLast,
                    Opcode::Acknowledge,
                ][usize::from(input.u8() % 5)];
                let psn = Self::psn(input, self.resp_psn);
                let len = usize::from(input.u16()) % (MTU + 8);
                let seed = input.u8();
                let flags = input.u8();
                let syndrome = match input.u8() % 4 {
                    0 => Syndrome::Ack { credits: 0x1f },
                    1 => Syndrome::NakSequence,
                    2 => Syndrome::RnrNak { timer: 1 },
                    _ => Syndrome::NakRemoteAccess,
                };
                let msn = u32::from(input.u8());
                let has_aeth = !matches!(opcode, Opcode::ReadResponseMiddle);
                let payload = if opcode == Opcode::Acknowledge { 0 } else { len };
                let h = Headers {
                    bth: Self::bth(opcode, psn, self.qpn),
                    reth: None,
                    aeth: has_aeth.then_some(AethRepr { syndrome, msn }),
                    imm: None,
                };
                if psn == self.resp_psn && flags & 15 == 0 {
                    self.resp_psn = (self.resp_psn + 1) & 0x00ff_ffff;
                }
                self.deliver(h, payload, seed, flags, false);
            }
            // A packet for a QP number that does not exist.
            _ => {
                let qpn = input.u32() & 0x00ff_ffff;
                let h = Headers {
                    bth: Self::bth(Opcode::WriteOnly, 0, qpn),
                    reth: Some(RethRepr {
                        va: self.addr(RW),
                        rkey: self.keys.rw,
                        dma_len: 16,
                    }),
                    aeth: None,
                    imm: None,
                };
                if qpn != self.qpn {
                    self.deliver(h, 16, 1, 0, true);
                }
            }
        }
        self.check();
    }

    /// Takes every datagram the engine wants to send and checks that no
    /// payload carries bytes no peer may read.
    fn drain(&mut self) {
        for _ in 0..64 {
            let Some(t) = self.e.poll_transmit(Time::from_nanos(self.now), &mut self.out) else {
                break;
            };
            assert_eq!(t.dst, SocketAddrV4::new(PEER, ROCE_PORT), "sent to someone else");
            let d = &self.out[..t.len];
            let p = Packet::parse_unverified(d).expect("the engine sent a malformed packet");
            assert!(
                !p.payload.iter().any(|b| *b == GUARD_BYTE || *b == UNLANDED),
                "a payload carries bytes from a guard page or a local-only region: {:?}",
                p.headers
            );
        }
    }

    /// The invariants, on the memory and the completion queues.
    fn check(&mut self) {
        let mut image = std::mem::take(&mut self.image);
        self.mem.read(0, &mut image);
        // Whole-slice comparisons (one memcmp each): per-byte loops here
        // would be instrumented for the fuzzer and cost more than the engine.
        static GUARD: [u8; PAGE] = [GUARD_BYTE; PAGE];
        static RO_IMAGE: [u8; PAGE] = [RO_FILL; PAGE];
        static EMPTY: [u8; PAGE] = [UNLANDED; PAGE];
        for page in [0, 2, 4, 6] {
            let at = page * PAGE;
            if image[at..at + PAGE] != GUARD[..] {
                let off = at
                    + image[at..at + PAGE]
                        .iter()
                        .position(|b| *b != GUARD_BYTE)
                        .unwrap_or(0);
                panic!("guard byte at {off:#x} overwritten");
            }
        }
        assert!(
            image[RO..RO + PAGE] == RO_IMAGE[..],
            "the read-only region was written"
        );
        // The local-only region may change only where the QP posted a
        // receive (the first half) or its own READ (from READ_OFF).
        if !self.recv_posted {
            assert!(
                image[RECV_OFF..RECV_OFF + RECV_LEN] == EMPTY[..RECV_LEN],
                "the receive buffer was written with no receive posted"
            );
        }
        let free = READ_OFF + self.read_posted;
        assert!(
            image[free..LOC + PAGE] == EMPTY[..LOC + PAGE - free],
            "local-only region written outside any posted range"
        );
        let mut wcs = [hipobj_platform::WorkCompletion {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            vendor_err: 0,
            byte_len: 0,
            imm_data: None,
            qp_num: 0,
        }; 16];
        let n = self.rcq.poll(&mut wcs).expect("poll");
        for wc in &wcs[..n] {
            if wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv {
                let len = wc.byte_len as usize;
                assert!(len <= RECV_LEN, "a receive reports {len} bytes into {RECV_LEN}");
                let landed = &image[RECV_OFF..RECV_OFF + len];
                assert!(
                    !landed.contains(&UNLANDED),
                    "a receive completed for {len} bytes that did not all land"
                );
            }
            // The buffer is used again: forget what landed in it.
            self.mem.write(RECV_OFF, &[UNLANDED; RECV_LEN]);
            self.post_recv();
        }
        let n = self.scq.poll(&mut wcs).expect("poll");
        for wc in &wcs[..n] {
            if wc.wr_id == 2 {
                let len = self
                    .read_len
                    .take()
                    .expect("a READ completion with no READ posted");
                if wc.status == WcStatus::Success {
                    assert_eq!(wc.opcode, WcOpcode::RdmaRead);
                    assert_eq!(wc.byte_len as usize, len, "READ completion length");
                    assert!(
                        !image[READ_OFF..READ_OFF + len].contains(&UNLANDED),
                        "a READ completed for {len} bytes that did not all land"
                    );
                }
                self.mem.write(READ_OFF, &[UNLANDED; READ_MAX]);
                self.read_posted = 0;
            }
        }
        self.image = image;
    }
}

fuzz_target!(|data: &[u8]| {
    let mut w = World::new();
    let mut input = Input(data);
    let mut steps = 0;
    while !input.done() && steps < 256 {
        w.step(&mut input);
        steps += 1;
    }
    w.drain();
    w.check();
});
