//! The server's RDMA request path: `hipobj_target::Target::serve`, the one
//! call the S3 server hands every token request to, on the soft NIC
//! (two devices in this process, bytes over loopback UDP) against client
//! QPs the harness drives through the verbs seam. For each request the
//! fuzzer picks the token (the right key, the read-only region's, a
//! forged or bit-flipped one; an address anywhere around the registered
//! region; lengths from 0 to past the server's limit and ranges that wrap;
//! impossible QP numbers, zero or multicast GIDs, another host's address;
//! the DC transport), the caller (two access keys, each with its own client
//! QP; the request's address: this host, the client's, another host's, or
//! unknown), and the request: a GET of an object of any size with or
//! without a range selection (`Range`: a 206), a source that fails to open
//! or mid-object; a PUT whose store fails to open, mid-body, or at commit
//! because the body's checksum (`x-amz-checksum-*`) does not match.
//!
//! Invariants, checked against the client's memory and CQ after every
//! request (docs/protocol.md §4):
//!
//! * no byte outside the registered read-write region changes, ever (guard
//!   bytes and the read-only region); a failed PUT, a bind, and a refused
//!   request change nothing; a failed GET leaves in the token's range only
//!   the old bytes or the selection's own bytes at their offsets;
//! * a success only for a token with the right key and range on the
//!   caller's bound QP: a GET's reply counts exactly the selection (206 for
//!   a range), its bytes landed exactly there, and the client's CQ holds the
//!   WRITE WITH IMMEDIATE carrying the token's key; a PUT's store got
//!   exactly the token's bytes and committed, and a store commits only for
//!   a success;
//! * every refusal is the one the token earns, in the order of the
//!   target's checks: DC declined; a zero, oversized or wrapping length,
//!   an impossible QP number or a zero or multicast GID invalid; another
//!   host's address not the caller's; a selection larger than the token
//!   refused before any byte moves;
//! * at most `max_bindings` bindings.
//!
//! Input: steps of fixed shape (see `step`). Seeds: fuzz/corpus/target_request.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use hipobj_platform::rc::{self, RcPath};
use hipobj_platform::selection::{self, Selection};
use hipobj_platform::vendor::{QpLimits, VendorProfile};
use hipobj_platform::{
    AccessFlags, CompletionQueue, Device, Gid, MemoryRegion, NoTopology, ProtectionDomain, QpAttr,
    QpAttrMask, QpInitAttr, QpState, QueuePair, RecvWr, WcOpcode, WcStatus, WorkCompletion,
};
use hipobj_proto::{Reply, Token, Transport};
use hipobj_softroce::{HostBuffer, SoftConfig, SoftVerbs};
use hipobj_target::{Answer, Caller, Request, Selected, Sink, Source, Target, TargetConfig, TargetError};
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;
use common::{Input, debug};

const PAGE: usize = 4096;
// Client memory: guard | RW (remote read and write) | guard | RO (remote
// read only) | guard. Only RW and RO are registered.
const RW: usize = PAGE;
const RW_LEN: usize = 8 * PAGE;
const RO: usize = RW + RW_LEN + PAGE;
const RO_LEN: usize = 2 * PAGE;
const TOTAL: usize = RO + RO_LEN + PAGE;
const MAX_TRANSFER: u64 = 64 * 1024;
const MAX_BINDINGS: usize = 1;

struct ClientQp {
    key: &'static str,
    qp: Box<dyn QueuePair>,
    cq: Arc<dyn CompletionQueue>,
    /// Receives posted and not yet completed.
    recvs: usize,
}

struct World {
    target: Target,
    clients: [ClientQp; 2],
    mem: HostBuffer,
    rw: Box<dyn MemoryRegion>,
    ro: Box<dyn MemoryRegion>,
    device: Arc<dyn Device>,
    sel: Selection,
    _pd: Arc<dyn ProtectionDomain>,
    _verbs: (Arc<SoftVerbs>, Arc<SoftVerbs>),
}

fn soft(name: &str) -> Arc<SoftVerbs> {
    Arc::new(SoftVerbs::new(SoftConfig {
        name: name.into(),
        ..SoftConfig::default()
    }))
}

fn world() -> &'static Mutex<World> {
    static W: OnceLock<Mutex<World>> = OnceLock::new();
    W.get_or_init(|| {
        let sv = soft("fuzz-target-srv");
        let cv = soft("fuzz-target-cli");
        let target = Target::open(
            sv.as_ref(),
            &NoTopology,
            Some("fuzz-target-srv"),
            TargetConfig {
                max_bindings: MAX_BINDINGS,
                max_transfer: MAX_TRANSFER,
                chunk: PAGE,
                completion_timeout: Duration::from_secs(2),
                ..TargetConfig::default()
            },
        )
        .expect("the target on the soft NIC");
        let (device, sel) = selection::select(cv.as_ref(), &NoTopology, None, Some("fuzz-target-cli"))
            .expect("client device");
        let pd = device.alloc_pd().expect("pd");
        let mem = HostBuffer::new(TOTAL);
        let region = |off, len| mem.region().slice(off, len).expect("inside the buffer");
        let rw = pd
            .reg_mr(
                region(RW, RW_LEN),
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            )
            .expect("rw");
        let ro = pd
            .reg_mr(region(RO, RO_LEN), AccessFlags::REMOTE_READ)
            .expect("ro");
        let client = |key| {
            let cq = device.create_cq(16).expect("cq");
            let qp = pd
                .create_qp(&QpInitAttr {
                    send_cq: cq.clone(),
                    recv_cq: cq.clone(),
                    max_send_wr: 4,
                    max_recv_wr: 4,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    sq_sig_all: false,
                })
                .expect("qp");
            ClientQp {
                key,
                qp,
                cq,
                recvs: 0,
            }
        };
        let clients = [client("alice"), client("bob")];
        let mut w = World {
            target,
            clients,
            mem,
            rw,
            ro,
            device,
            sel,
            _pd: pd,
            _verbs: (sv, cv),
        };
        for i in 0..2 {
            w.reset(i);
        }
        w.fill();
        Mutex::new(w)
    })
}

const GUARD: u8 = 0xa5;
const RO_FILL: u8 = 0x3c;
/// What the read-write region holds where no GET landed: the selection's
/// bytes are all below 0x80, so this never comes from a server.
const RW_FILL: u8 = 0xee;

fn object_byte(seed: u8, i: usize) -> u8 {
    (seed as usize).wrapping_add(i.wrapping_mul(13)) as u8 & 0x7f
}

impl World {
    fn fill(&self) {
        let mut image = vec![GUARD; TOTAL];
        image[RW..RW + RW_LEN].fill(RW_FILL);
        image[RO..RO + RO_LEN].fill(RO_FILL);
        self.mem.write(0, &image);
    }

    /// Back to INIT with remote rights and one receive posted (bound to no one).
    fn reset(&mut self, i: usize) {
        let c = &mut self.clients[i];
        let r = c.qp.modify(
            &QpAttr {
                qp_state: QpState::Reset,
                ..QpAttr::default()
            },
            QpAttrMask::STATE,
        );
        assert!(r.is_ok(), "reset: {r:?}");
        drain(c.cq.as_ref());
        c.recvs = 0;
        let r = rc::to_init(
            c.qp.as_ref(),
            self.sel.port,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        );
        assert!(r.is_ok(), "init: {r:?}");
        post_recv(c);
    }

    /// Connects client `i`'s QP to the server QP a binding reply names.
    fn connect(&mut self, i: usize, reply: &Reply) {
        let Reply::Bind { token, psn } = reply else {
            panic!("not a bind reply: {reply}")
        };
        self.reset(i);
        let attr = self.device.attr().expect("attr");
        let port = self.device.query_port(self.sel.port).expect("port");
        let path = RcPath {
            port: self.sel.port,
            sgid_index: self.sel.gid_index as u8,
            mtu: self.sel.mtu,
            dest_qpn: token.qpn,
            dgid: Gid(token.gid),
            rq_psn: *psn,
            sq_psn: 0,
            max_dest_rd_atomic: 16,
            max_rd_atomic: 1,
        };
        let r = rc::to_rts(
            self.clients[i].qp.as_ref(),
            &path,
            VendorProfile::Generic,
            &QpLimits::new(&attr, &port),
        );
        assert!(r.is_ok(), "rts: {:?}", r.err().map(|e| e.1));
    }

    fn gid(&self) -> Gid {
        self.sel.gid
    }
}

fn post_recv(c: &mut ClientQp) {
    if c.recvs == 0
        && c.qp
            .post_recv(&RecvWr {
                wr_id: 7,
                sg_list: &[],
            })
            .is_ok()
    {
        c.recvs = 1;
    }
}

fn drain(cq: &dyn CompletionQueue) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut wc = [WorkCompletion::EMPTY; 8];
    while let Ok(n) = cq.poll(&mut wc) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&wc[..n]);
    }
    out
}

/// A GET's object, with an optional range selection, that may fail.
struct Object {
    seed: u8,
    start: usize,
    sel: Selected,
    fail_open: bool,
    /// Fail at this fill call.
    fail_at: Option<usize>,
    fills: usize,
    opened: bool,
}

impl Source for Object {
    type Error = &'static str;
    fn open(&mut self) -> Result<Selected, &'static str> {
        self.opened = true;
        if self.fail_open {
            return Err("NoSuchKey");
        }
        Ok(self.sel)
    }
    fn fill(&mut self, off: u64, buf: &mut [u8]) -> Result<(), &'static str> {
        assert!(self.opened, "filled before it was opened");
        assert!(
            off + buf.len() as u64 <= self.sel.len,
            "a fill past the selection"
        );
        self.fills += 1;
        if self.fail_at == Some(self.fills) {
            return Err("InternalError");
        }
        for (i, b) in buf.iter_mut().enumerate() {
            *b = object_byte(self.seed, self.start + off as usize + i);
        }
        Ok(())
    }
}

/// A PUT's store: takes the bytes, and verifies the body's checksum at commit.
struct Store {
    fail_open: bool,
    fail_at: Option<usize>,
    /// The checksum the request's header claims, if it has one.
    checksum: Option<u32>,
    body: Vec<u8>,
    len: Option<u64>,
    drains: usize,
    committed: bool,
}

fn checksum(b: &[u8]) -> u32 {
    b.iter().fold(0x811c_9dc5u32, |h, x| {
        (h ^ u32::from(*x)).wrapping_mul(0x0100_0193)
    })
}

impl Sink for Store {
    type Error = &'static str;
    fn open(&mut self, len: u64) -> Result<(), &'static str> {
        self.len = Some(len);
        if self.fail_open {
            return Err("AccessDenied");
        }
        Ok(())
    }
    fn drain(&mut self, off: u64, chunk: &[u8]) -> Result<(), &'static str> {
        assert_eq!(off, self.body.len() as u64, "chunks out of order");
        assert!(
            self.len.is_some_and(|l| off + chunk.len() as u64 <= l),
            "more bytes than opened for"
        );
        self.drains += 1;
        if self.fail_at == Some(self.drains) {
            return Err("IncompleteBody");
        }
        self.body.extend_from_slice(chunk);
        Ok(())
    }
    fn commit(&mut self) -> Result<(), &'static str> {
        assert_eq!(Some(self.body.len() as u64), self.len, "committed a short body");
        if self.checksum.is_some_and(|c| c != checksum(&self.body)) {
            return Err("BadDigest");
        }
        self.committed = true;
        Ok(())
    }
}

/// What the target's checks must answer for this token and caller, in
/// their order; `None` when the token is acceptable.
fn expected_refusal(t: &Token, caller: &Caller) -> Option<&'static str> {
    if t.transport != Transport::Rc {
        return Some("declined");
    }
    if t.len == 0 || t.len > MAX_TRANSFER || t.addr.checked_add(t.len).is_none() {
        return Some("invalid");
    }
    if !(2..=0x00ff_ffff).contains(&t.qpn) || t.gid == [0; 16] || t.gid[0] == 0xff {
        return Some("invalid");
    }
    let claimed = Gid(t.gid).to_ipv4()?;
    let ok = match caller.address? {
        IpAddr::V4(a) if a == claimed => true,
        a if a.is_loopback() => claimed.is_loopback(),
        _ => false,
    };
    (!ok).then_some("not the caller's")
}

fn kind<E>(e: &TargetError<E>) -> &'static str {
    match e {
        TargetError::Declined => "declined",
        TargetError::InvalidToken(_) => "invalid",
        TargetError::NotTheCallers(_) => "not the caller's",
        TargetError::BufferTooSmall { .. } => "buffer too small",
        TargetError::Busy(_) | TargetError::StagingBusy(_) => "busy",
        TargetError::Verbs(_) => "verbs",
        TargetError::Transfer(_) => "transfer",
        TargetError::Store(_) => "store",
    }
}

fn step(w: &mut World, input: &mut Input<'_>) {
    let head = input.u8();
    let i = usize::from(head & 1);
    let is_get = head & 2 == 0;
    let qpn_own = w.clients[i].qp.qp_num();
    let gid_own = w.gid();
    // The token.
    let tsel = input.u8();
    let rkey = match tsel % 8 {
        0..=4 => w.rw.rkey(),
        5 => w.ro.rkey(),
        6 => w.rw.rkey() ^ (1 << (input.u8() % 32)),
        _ => input.u32(),
    };
    let base = w.mem.addr();
    let off = 2 * i64::from(input.u16() as i16) + RW as i64;
    let addr = (base as i64).wrapping_add(off) as u64;
    let len = match (tsel >> 3) % 8 {
        0..=4 => u64::from(input.u16()) % (RW_LEN as u64 + 64),
        5 => 0,
        6 => MAX_TRANSFER + 1 + u64::from(input.u8()),
        _ => u64::MAX - addr + 1 + u64::from(input.u8() % 4),
    };
    let odd = input.u8();
    let qpn = match odd % 16 {
        1 => 0,
        2 => 1,
        3 => 1 << 24,
        _ => qpn_own,
    };
    let gid = match (odd >> 4) % 8 {
        1 => [0; 16],
        2 => {
            let mut g = [0u8; 16];
            g[0] = 0xff;
            g[1] = 0x02;
            g
        }
        3 => Gid::from_ipv4(Ipv4Addr::new(10, 9, 8, 7)).0,
        _ => gid_own.0,
    };
    let transport = if odd == 0xff { Transport::Dc } else { Transport::Rc };
    let token = Token {
        transport,
        qpn,
        gid,
        rkey,
        addr,
        len,
        port: w.sel.port,
        lid: 0,
    };
    // The caller: this host over loopback, the client's own address, another
    // host, or unknown. A foreign GID is only sent where the address check
    // refuses it (a binding to it would send RDMA off the host).
    let client_ip = gid_own.to_ipv4().map(IpAddr::V4);
    let mut address = match input.u8() % 4 {
        0 => Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        1 => client_ip,
        2 => Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))),
        _ => None,
    };
    if gid != gid_own.0 && Gid(gid).to_ipv4().is_some_and(|v| !v.is_loopback()) && address.is_none() {
        address = client_ip;
    }
    let caller = Caller {
        access_key: w.clients[i].key.to_owned(),
        address,
    };
    // The request.
    let rsel = input.u8();
    let fail_at = (rsel & 0x30 == 0x30).then(|| usize::from(input.u8() % 4) + 1);
    let fail_open = rsel & 0xc0 == 0xc0;
    let before = w.mem.to_vec();
    drain_client(w, i);
    debug(format_args!(
        "{} client {i} caller {:?}: token qpn {:#x} rkey {:#x} off {off} len {len} {:?}",
        if is_get { "GET" } else { "PUT" },
        caller.address,
        token.qpn,
        token.rkey,
        token.transport
    ));
    let (answer, object, store) = if is_get {
        let size = usize::from(input.u16()) % (RW_LEN + 256);
        let (start, sel) = if rsel & 1 != 0 {
            let start = usize::from(input.u16()) % (size + 1);
            let n = usize::from(input.u16()) % (size - start + 1);
            (
                start,
                Selected {
                    len: n as u64,
                    partial: true,
                },
            )
        } else {
            (
                0,
                Selected {
                    len: size as u64,
                    partial: false,
                },
            )
        };
        let mut o = Object {
            seed: input.u8(),
            start,
            sel,
            fail_open,
            fail_at,
            fills: 0,
            opened: false,
        };
        let a = w.target.serve(&caller, &token, Request::Get(&mut o));
        (a, Some(o), None)
    } else {
        let sum = match (rsel >> 1) % 4 {
            0 | 1 => None,
            2 => Some(input.u32()),
            // The right checksum of what the client's memory holds there.
            _ => {
                let (s, e) = (
                    addr.wrapping_sub(base) as usize,
                    addr.wrapping_sub(base).wrapping_add(len) as usize,
                );
                before.get(s..e).map(checksum)
            }
        };
        let mut s = Store {
            fail_open,
            fail_at,
            checksum: sum,
            body: Vec::new(),
            len: None,
            drains: 0,
            committed: false,
        };
        let a = w.target.serve(&caller, &token, Request::Put(&mut s));
        (a, None, Some(s))
    };
    debug(format_args!("  -> {answer:?}"));
    let after = w.mem.to_vec();
    let changed = |lo: usize, hi: usize| before[lo..hi] != after[lo..hi];
    // Outside the read-write region nothing ever changes.
    assert!(!changed(0, RW), "the guard before the region was written");
    assert!(
        !changed(RW + RW_LEN, TOTAL),
        "the read-only region or a guard was written"
    );
    assert!(
        w.target.stats().bindings <= MAX_BINDINGS,
        "more bindings than the limit"
    );
    let refusal = expected_refusal(&token, &caller);
    match answer {
        Ok(Answer::Bind { reply, after_failure }) => {
            assert_eq!(refusal, None, "bound a token that earns a refusal");
            match (&after_failure, &object) {
                (Some(_), Some(o)) => only_object_bytes(&before, &after, &token, base, o, "a rebind"),
                _ => assert!(!changed(RW, RW + RW_LEN), "a binding reply wrote the buffer"),
            }
            assert!(
                store.is_none_or(|s| !s.committed),
                "a store committed on a binding reply"
            );
            // A first binding opens nothing; one made after the RDMA on the
            // old binding failed may have opened the object (nothing landed).
            if after_failure.is_none() {
                assert!(
                    object.is_none_or(|o| !o.opened),
                    "the object was opened for a binding reply"
                );
            }
            if token.qpn == qpn_own && token.gid == gid_own.0 {
                w.connect(i, &reply);
            }
        }
        Ok(Answer::Done { status, bytes, reply }) => {
            assert_eq!(refusal, None, "a success for a token that earns a refusal");
            // The bytes that moved lay under the key the token named: the
            // read-write region's (a GET, or a PUT), or the read-only one's
            // (a PUT). A zero-byte GET's empty WRITE touches no memory.
            let moved = Token { len: bytes, ..token };
            let lawful = (token.rkey == w.rw.rkey() && within(&moved, base + RW as u64, RW_LEN))
                || (store.is_some() && token.rkey == w.ro.rkey() && within(&moved, base + RO as u64, RO_LEN));
            assert!(
                lawful || bytes == 0,
                "a success for {bytes} bytes under another key or outside its region: {token:?}"
            );
            let Reply::Done {
                bytes: rb,
                status: rs,
                ..
            } = reply
            else {
                panic!("a success whose reply is {reply}")
            };
            assert_eq!((rs, rb), (status, bytes), "the reply and the answer differ");
            let at = token.addr.wrapping_sub(base) as usize;
            if let Some(o) = object {
                assert_eq!(bytes, o.sel.len, "a GET counted other than its selection");
                assert_eq!(status, if o.sel.partial { 206 } else { 200 });
                let n = bytes as usize;
                if n == 0 {
                    assert!(!changed(RW, RW + RW_LEN), "an empty GET wrote");
                } else {
                    for (k, b) in after[at..at + n].iter().enumerate() {
                        assert_eq!(
                            *b,
                            object_byte(o.seed, o.start + k),
                            "byte {k} of the GET is wrong"
                        );
                    }
                    assert!(
                        !changed(RW, at) && !changed(at + n, RW + RW_LEN),
                        "a GET wrote outside its selection"
                    );
                }
                // The proof on the client's CQ.
                let c = &mut w.clients[i];
                let deadline = Instant::now() + Duration::from_secs(5);
                let wcs = loop {
                    let wcs = drain(c.cq.as_ref());
                    if !wcs.is_empty() || Instant::now() > deadline {
                        break wcs;
                    }
                    std::thread::yield_now();
                };
                assert!(
                    wcs.iter().any(|wc| wc.status == WcStatus::Success
                        && wc.opcode == WcOpcode::RecvRdmaWithImm
                        && wc.imm_data == Some(token.rkey)),
                    "a GET's success with no WRITE WITH IMMEDIATE of the token's key: {wcs:?}"
                );
                c.recvs = c.recvs.saturating_sub(wcs.len());
                post_recv(c);
            }
            if let Some(s) = store {
                assert_eq!(bytes, token.len, "a PUT counted other than the token");
                assert!(s.committed, "a PUT's success without a commit");
                assert!(
                    s.body == before[at..at + token.len as usize],
                    "the store got other bytes"
                );
                assert!(!changed(RW, RW + RW_LEN), "a PUT wrote the client's buffer");
            }
        }
        Err(e) => {
            let k = kind(&e);
            if let Some(want) = refusal {
                assert_eq!(k, want, "{e:?}");
            } else {
                assert!(
                    !matches!(k, "declined" | "invalid" | "not the caller's" | "busy"),
                    "an acceptable token refused: {e:?}"
                );
            }
            if let Some(s) = store {
                assert!(!s.committed, "a store committed for a failed PUT: {e:?}");
                assert!(
                    !changed(RW, RW + RW_LEN),
                    "a failed PUT wrote the client's buffer"
                );
            }
            if let Some(o) = object {
                if k == "buffer too small" {
                    assert!(o.sel.len > token.len, "refused a selection that fits: {e:?}");
                }
                if matches!(
                    k,
                    "buffer too small" | "declined" | "invalid" | "not the caller's"
                ) {
                    assert!(!changed(RW, RW + RW_LEN), "a refused GET wrote: {e:?}");
                }
                only_object_bytes(&before, &after, &token, base, &o, "a failed GET");
            }
        }
    }
    // Put the region back for the next request.
    if before != after {
        w.fill();
    }
}

/// After a GET that did not succeed: the read-write region holds only its
/// old bytes, or the selection's own bytes at their offsets in the token's
/// range (the server may have written part of it before the failure).
fn only_object_bytes(before: &[u8], after: &[u8], token: &Token, base: u64, o: &Object, what: &str) {
    let at = token.addr.wrapping_sub(base) as usize;
    for p in RW..RW + RW_LEN {
        if before[p] != after[p] {
            let k = p.wrapping_sub(at);
            assert!(
                p >= at && (k as u64) < o.sel.len && after[p] == object_byte(o.seed, o.start + k),
                "{what} left a foreign byte at {p:#x}"
            );
        }
    }
}

/// Whether the token's range lies in `len` bytes from `lo`.
fn within(t: &Token, lo: u64, len: usize) -> bool {
    t.addr >= lo && t.addr.checked_add(t.len).is_some_and(|e| e <= lo + len as u64)
}

/// Takes whatever the client's CQ holds and keeps one receive posted.
fn drain_client(w: &mut World, i: usize) {
    let c = &mut w.clients[i];
    let wcs = drain(c.cq.as_ref());
    c.recvs = c.recvs.saturating_sub(wcs.len());
    post_recv(c);
}

fuzz_target!(|data: &[u8]| {
    let mut w = world().lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut input = Input(data);
    let mut steps = 0;
    while !input.done() && steps < 16 {
        step(&mut w, &mut input);
        steps += 1;
    }
});
