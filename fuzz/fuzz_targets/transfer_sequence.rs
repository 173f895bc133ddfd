//! The client's transfer sequence (`hipObjGet`/`hipObjPut`, the core's
//! `Instance::transfer`) on the fake platform, against an S3 side the
//! fuzzer plays: for every round it picks the reply (a binding reply for
//! one of two servers or a bogus server token, the full success form with
//! the right or a wrong server QP, status or count, every bare success, error
//! statuses, raw bytes, a replay of an earlier reply, a failing callback, a
//! reply longer than the buffer) and what the "server's RDMA" does around it
//! and when (the GET's WRITE WITH IMMEDIATE with the token's key or another,
//! on the token's QP or another, before or after the reply, twice; a QP
//! broken into the error state), plus verbs faults and stray completions
//! between calls. Invariants, after every call (docs/protocol.md §3, §5):
//!
//! * a success only with its proof: the last reply is the full
//!   `NNN:<token>:<count>` with the count asked for, naming the server QP
//!   the leased QP was last connected to, and for a GET a WRITE WITH
//!   IMMEDIATE carrying the last token's key landed on that token's QP in
//!   the last round;
//! * a failure is `S3Error` or `RdmaError`, and leaves the QP the last token
//!   named out of RTS (destroyed);
//! * every grant ends before the call returns: no memory-window binding is
//!   live, and (without windows) no QP keeps a remote access right;
//! * the pool is whole (unless an injected fault hit a replacement), and
//!   after shutdown no verbs object is left.
//!
//! Input: a flags byte, then steps (see `run`); short inputs read zeros.
//! Seeds: fuzz/corpus/transfer_sequence (fuzz/seeds.py).
#![no_main]

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use hipobj::{Control, ControlError, Direction, ErrorKind};
use hipobj_platform::fake::{FakePlatform, FakeVerbs, Fault};
use hipobj_platform::{AccessFlags, MemRegion, QpState};
use hipobj_proto::{Reply, Token, parse_reply};
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;
use common::{Input, bogus, debug, server, start};

const BUF: usize = 64 * 1024;

fn buffer() -> MemRegion {
    static BUF_REGION: OnceLock<MemRegion> = OnceLock::new();
    *BUF_REGION.get_or_init(|| MemRegion::from_static(Box::leak(vec![0u8; BUF].into_boxed_slice())))
}

/// What the harness knows of the client's QPs and of this call.
#[derive(Default)]
struct Model {
    /// The server each client QP was last connected to, as far as the
    /// binding replies show (qpn -> server token).
    bound: HashMap<u32, Token>,
    /// A binding reply given for the QP of the round's token: if the next
    /// token names the same QP, the client connected it.
    pending: Option<(u32, Token)>,
    /// Every reply handed out, for replays.
    history: Vec<Vec<u8>>,
}

/// The fuzzer's S3 side for one call.
struct S3<'i, 'd> {
    input: &'i mut Input<'d>,
    verbs: Arc<FakeVerbs>,
    model: &'i mut Model,
    size: usize,
    tokens: Vec<Token>,
    /// Proofs that landed in the current round: (qpn, immediate).
    round_proofs: Vec<(u32, u32)>,
    last_reply: Option<Vec<u8>>,
}

impl S3<'_, '_> {
    /// The server's RDMA as the fuzzer plays it, for the current token.
    fn rdma(&mut self) {
        let Some(t) = self.tokens.last().copied() else {
            return;
        };
        let act = self.input.u8();
        let imm = match (act >> 3) % 4 {
            0 => t.rkey,
            1 => t.rkey ^ (1 << (self.input.u8() % 32)),
            2 => self.input.u32(),
            // A key from an earlier token of this call.
            _ => self.tokens.first().map_or(t.rkey, |f| f.rkey),
        };
        let qpn = if act & 0x20 != 0 {
            self.verbs
                .qp_nums()
                .get(usize::from(self.input.u8()))
                .copied()
                .unwrap_or(t.qpn)
        } else {
            t.qpn
        };
        match act % 8 {
            1 | 2 => self.prove(qpn, imm),
            3 => {
                self.prove(qpn, imm);
                self.prove(qpn, imm);
            }
            4 => {
                debug(format_args!("break qp {qpn:#x}"));
                self.verbs.break_qp(qpn);
            }
            _ => {}
        }
    }

    /// One WRITE WITH IMMEDIATE of the whole current token's range (the
    /// client counts its byte count, docs/protocol.md §2).
    fn prove(&mut self, qpn: u32, imm: u32) {
        let len = self.tokens.last().map_or(0, |t| t.len as u32);
        if self.verbs.deliver_write_with_imm(qpn, imm, len) {
            self.round_proofs.push((qpn, imm));
        }
    }

    fn done_reply(&mut self, status: u16) -> Vec<u8> {
        let t = self.tokens.last().copied();
        let sel = self.input.u8();
        let token = match sel % 4 {
            0 | 1 => t
                .and_then(|t| self.model.bound.get(&t.qpn).copied())
                .unwrap_or_else(|| server(0)),
            2 => server(self.input.u8()),
            _ => {
                let mut s = server(self.input.u8());
                s.qpn ^= 1 << (self.input.u8() % 24);
                s
            }
        };
        let bytes = match (sel >> 2) % 6 {
            0..=2 => self.size as u64,
            3 => self.size as u64 - 1,
            4 => self.size as u64 + 1,
            _ => u64::from(self.input.u32()),
        };
        Reply::Done { status, token, bytes }.to_string().into_bytes()
    }

    fn choose_reply(&mut self) -> Result<Vec<u8>, ControlError> {
        let r = self.input.u8();
        Ok(match r % 16 {
            0..=2 => {
                let s = server(self.input.u8());
                Reply::Bind {
                    token: s,
                    psn: u32::from(self.input.u16()),
                }
                .to_string()
                .into_bytes()
            }
            3 => Reply::Bind {
                token: bogus(self.input.u8()),
                psn: 7,
            }
            .to_string()
            .into_bytes(),
            4..=7 => self.done_reply(200),
            8 => {
                let status = [204, 206, 200][usize::from(self.input.u8() % 3)];
                self.done_reply(status)
            }
            9 => {
                let forms = ["200", "ok", "204", "206", "200\r\n\0"];
                forms[usize::from(self.input.u8()) % forms.len()]
                    .as_bytes()
                    .to_vec()
            }
            10 => Reply::WithToken {
                status: 200,
                token: server(self.input.u8()),
            }
            .to_string()
            .into_bytes(),
            11 => {
                let forms = ["500", "404", "501", "err", "409", "503"];
                forms[usize::from(self.input.u8()) % forms.len()]
                    .as_bytes()
                    .to_vec()
            }
            12 => {
                let n = usize::from(self.input.u8() % 200);
                self.input.bytes(n)
            }
            13 => {
                let i = usize::from(self.input.u8());
                match self.model.history.len() {
                    0 => b"200".to_vec(),
                    n => self.model.history[i % n].clone(),
                }
            }
            14 => return Err(ControlError("the fuzzer's recvReply fails".into())),
            // A reply longer than the buffer (see recv_reply).
            _ => Vec::new(),
        })
    }
}

impl Control for S3<'_, '_> {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        let t = Token::decode(token.as_bytes()).expect("the client sent a malformed token");
        assert_eq!(
            t.len, self.size as u64,
            "the token's length is not the transfer's"
        );
        if let Some((qpn, s)) = self.model.pending.take()
            && qpn == t.qpn
        {
            self.model.bound.insert(qpn, s);
        }
        debug(format_args!("send qpn {:#x} rkey {:#x}", t.qpn, t.rkey));
        self.tokens.push(t);
        self.round_proofs.clear();
        self.last_reply = None;
        let a = self.input.u8();
        if a % 16 == 15 {
            return Err(ControlError("the fuzzer's sendRequest fails".into()));
        }
        // The server's RDMA during the request, before its reply.
        if a & 0x10 != 0 {
            self.rdma();
        }
        Ok(())
    }

    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        let r = self.choose_reply()?;
        if r.is_empty() {
            return Ok(reply.len() + 1);
        }
        // ... or after it.
        if self.input.u8() & 1 != 0 {
            self.rdma();
        }
        let n = r.len().min(reply.len());
        reply[..n].copy_from_slice(&r[..n]);
        // Whatever produced it (chosen, replayed or raw), a binding reply
        // may connect the round's QP to the server it names.
        if let (Ok(Reply::Bind { token, .. }), Some(t)) = (parse_reply(&r[..n]), self.tokens.last()) {
            self.model.pending = Some((t.qpn, token));
        }
        if self.model.history.len() < 32 {
            self.model.history.push(r[..n].to_vec());
        }
        debug(format_args!(
            "reply {:?} proofs {:?}",
            String::from_utf8_lossy(&r[..n]),
            self.round_proofs
        ));
        self.last_reply = Some(r[..n].to_vec());
        Ok(n)
    }
}

const FAULTABLE: [&str; 7] = [
    "post_send",
    "bind_mw",
    "modify_qp",
    "poll_cq",
    "post_recv",
    "query_qp",
    "create_qp",
];

fn run(input: &mut Input<'_>) {
    let flags = input.u8();
    let mw = flags & 1 != 0;
    let pool = u32::from((flags >> 1) % 3) + 1;
    let (p, lib) = start(mw, pool);
    let faults = p.faults.clone();
    let inst = lib.instance().expect("initialized");
    let buf = buffer();
    inst.register_host(buf).expect("register");
    let mut model = Model::default();
    // The pool's size: it shrinks only when an injected fault stopped a
    // replacement, and never otherwise.
    let mut whole = pool as usize;
    let mut calls = 0;
    while !input.done() && calls < 24 {
        calls += 1;
        match input.u8() % 8 {
            // A verbs call that fails once, after some calls go through.
            0 => {
                let call = FAULTABLE[usize::from(input.u8()) % FAULTABLE.len()];
                let skip = u32::from(input.u8() % 8);
                faults.set_after(call, Fault::Fail, skip, 1);
                let before = faults.count(call);
                transfer(input, &inst, &p, &mut model, buf, mw);
                let fired = faults.count(call) - before > skip as usize;
                faults.clear();
                let size = inst.pool().size();
                if fired {
                    assert!(size <= whole, "the pool grew");
                    whole = size;
                } else {
                    assert_eq!(size, whole, "the pool is not whole");
                }
            }
            // Between calls: a stray WRITE WITH IMMEDIATE or a broken QP.
            1 => {
                let qps = p.verbs.qp_nums();
                let qpn = qps
                    .get(usize::from(input.u8()) % qps.len().max(1))
                    .copied()
                    .unwrap_or(0);
                if input.u8() & 1 == 0 {
                    let imm = input.u32();
                    p.verbs.deliver_write_with_imm(qpn, imm, 0);
                } else {
                    p.verbs.break_qp(qpn);
                }
            }
            _ => {
                transfer(input, &inst, &p, &mut model, buf, mw);
                assert_eq!(inst.pool().size(), whole, "the pool is not whole");
            }
        }
    }
    lib.shutdown();
    drop(inst);
    assert!(
        p.verbs.live().is_zero(),
        "shutdown left verbs objects alive: {:?}",
        p.verbs.live()
    );
}

fn transfer(
    input: &mut Input<'_>,
    inst: &hipobj::Instance,
    p: &FakePlatform,
    model: &mut Model,
    buf: MemRegion,
    mw: bool,
) {
    let dir = if input.u8() & 1 == 0 {
        Direction::Get
    } else {
        Direction::Put
    };
    let offset = usize::from(input.u8()) * 128;
    let size = usize::from(input.u16()) % (BUF - offset) + 1;
    model.pending = None;
    let mut s3 = S3 {
        input,
        verbs: p.verbs.clone(),
        model,
        size,
        tokens: Vec::new(),
        round_proofs: Vec::new(),
        last_reply: None,
    };
    debug(format_args!("{dir:?} {size} bytes at {offset}"));
    let r = inst.transfer(dir, buf.addr(), size, offset, &mut s3);
    debug(format_args!("  -> {r:?}"));
    for q in p.verbs.qp_nums() {
        debug(format_args!("  qp {q:#x} {:?}", p.verbs.qp_state(q)));
    }
    let S3 {
        tokens,
        round_proofs,
        last_reply,
        model,
        ..
    } = s3;
    let last = tokens.last().copied();
    match r {
        Ok(()) => {
            let last = last.expect("a success without any request");
            let reply = last_reply.expect("a success without a reply");
            let Ok(Reply::Done { status, token, bytes }) = parse_reply(&reply) else {
                panic!(
                    "a success on a reply that is not the full form: {:?}",
                    String::from_utf8_lossy(&reply)
                );
            };
            assert!(matches!(status, 200 | 204 | 206), "success on status {status}");
            assert_eq!(
                bytes, size as u64,
                "a success with a count other than the request"
            );
            let bound = model.bound.get(&last.qpn).copied();
            assert!(
                bound.is_some_and(|b| b.qpn == token.qpn && b.gid == token.gid),
                "a success naming server QP {:#x}, but the client QP {:#x} was connected to {:?}",
                token.qpn,
                last.qpn,
                bound.map(|b| b.qpn)
            );
            if dir == Direction::Get {
                assert!(
                    round_proofs.contains(&(last.qpn, last.rkey)),
                    "a GET succeeded without its WRITE WITH IMMEDIATE in the last round: {round_proofs:?}, token key {:#x}",
                    last.rkey
                );
            }
            assert_ne!(
                p.verbs.qp_state(last.qpn),
                None,
                "the connection of a success was destroyed"
            );
        }
        Err(e) => {
            assert!(
                matches!(e.kind(), ErrorKind::S3Error | ErrorKind::RdmaError),
                "a transfer failed with {:?}: {e}",
                e.kind()
            );
            // The QP the last token named was leased at the failure, unless
            // the last reply was a binding reply from another server than
            // the one it is bound to: then the client may have traded it
            // back to the pool, bound and usable (docs/protocol.md §3 step
            // 3), and failed on the connection it took instead.
            let traded = match (last, last_reply.as_deref().map(parse_reply)) {
                (Some(l), Some(Ok(Reply::Bind { token, .. }))) => {
                    model.bound.get(&l.qpn).is_some_and(|b| b.gid != token.gid)
                }
                _ => false,
            };
            if let Some(last) = last.filter(|_| !traded) {
                assert_ne!(
                    p.verbs.qp_state(last.qpn),
                    Some(QpState::Rts),
                    "a failed transfer left its QP {:#x} in RTS: {e}",
                    last.qpn
                );
            }
        }
    }
    // Every grant ended before the call returned: no window is bound, and
    // without windows no QP keeps a remote right (with windows the QPs
    // carry the rights and the windows fence them).
    let live = p.verbs.live_mw_binds();
    assert!(live.is_empty(), "a memory window still grants access: {live:?}");
    if mw {
        return;
    }
    for qpn in p.verbs.qp_nums() {
        let a = p.verbs.qp_access(qpn).unwrap_or_default();
        assert!(
            !a.contains(AccessFlags::REMOTE_READ) && !a.contains(AccessFlags::REMOTE_WRITE),
            "QP {qpn:#x} kept remote access {a:?} after the call"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    run(&mut Input(data));
});
