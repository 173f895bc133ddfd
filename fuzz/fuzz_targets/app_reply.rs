//! Application-driven transfers (docs/protocol.md §6) on the fake platform:
//! `hipObjGetRdmaToken`, `hipObjHandleRdmaReply` and `hipObjPutRdmaToken`
//! (the core's `Instance::rdma_token`, `handle_token_reply` and
//! `release_token`, which the C functions call) in any order the fuzzer
//! picks, with the replies it picks (binding replies for two servers or a
//! bogus one, the full success with the right or a wrong server QP, status
//! or count, bare successes, errors, raw bytes, replays), WRITE WITH
//! IMMEDIATEs with the latest token's key, an older token's or any other, on
//! the token connection or elsewhere, broken QPs, verbs faults, and the
//! buffer deregistered and registered again. Invariants after every step:
//!
//! * a success only with its proof: the full form, from the server QP the
//!   token connection was last bound to, counting the latest token's
//!   length, while that token still grants (not released, not replaced, no
//!   failed reply since), and for a GET token a WRITE WITH IMMEDIATE with
//!   its key delivered since the last binding, token or success;
//! * at most one binding round per token or per completed transfer;
//! * a failed reply leaves no QP of the old token connection in RTS, and
//!   the next token names a new QP;
//! * nothing grants access except the latest live token: no memory window
//!   is bound otherwise, and one that is covers exactly that token's range
//!   with only its right (without windows: the token connection's QP has
//!   only that right, and none once the token is gone);
//! * after shutdown no verbs object is left.
//!
//! Input: a flags byte, then steps (see `run`). Seeds:
//! fuzz/corpus/app_reply (fuzz/seeds.py).
#![no_main]

use std::sync::OnceLock;

use hipobj::{Direction, ErrorKind};
use hipobj_platform::fake::Fault;
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

/// The latest token from `rdma_token`, as the harness tracks it.
#[derive(Clone, Copy, Debug)]
struct Live {
    token: Token,
    dir: Direction,
    /// Whether it still grants: not released, no failed reply since.
    granting: bool,
    /// Whether the next 409 may bind.
    may_bind: bool,
    /// WRITE WITH IMMEDIATEs with its key delivered to its QP since the
    /// last binding, token or success.
    proofs: usize,
}

const FAULTABLE: [&str; 6] = [
    "post_send",
    "bind_mw",
    "modify_qp",
    "poll_cq",
    "post_recv",
    "create_qp",
];

fn run(input: &mut Input<'_>) {
    let flags = input.u8();
    let mw = flags & 1 != 0;
    let (p, lib) = start(mw, 1);
    let inst = lib.instance().expect("initialized");
    let buf = buffer();
    inst.register_host(buf).expect("register");
    let mut registered = true;
    let mut live: Option<Live> = None;
    // The server the token connection (by QP number) was last bound to.
    let mut bound: std::collections::HashMap<u32, Token> = Default::default();
    let mut history: Vec<Vec<u8>> = Vec::new();
    let mut older: Vec<Token> = Vec::new();
    let mut steps = 0;
    while !input.done() && steps < 48 {
        steps += 1;
        let op = input.u8();
        match op % 8 {
            // hipObjGetRdmaToken.
            0 | 1 => {
                let dir = if input.u8() & 1 == 0 {
                    Direction::Get
                } else {
                    Direction::Put
                };
                // 0xffff asks for one byte more than the buffer holds.
                let size = match input.u16() {
                    0xffff => BUF + 1,
                    v => usize::from(v),
                };
                let old_qpn = live.map(|l| l.token.qpn);
                match inst.rdma_token(buf.addr(), size, dir) {
                    Ok(hex) => {
                        let token = Token::decode(hex.as_bytes()).expect("a token we minted decodes");
                        debug(format_args!(
                            "token {dir:?} {size}: qpn {:#x} rkey {:#x}",
                            token.qpn, token.rkey
                        ));
                        assert!(registered && size > 0 && size <= BUF, "a token for {size} bytes");
                        assert_eq!((token.addr, token.len), (buf.addr() as u64, size as u64));
                        if let Some(l) = live {
                            older.push(l.token);
                        }
                        if old_qpn.is_some_and(|q| q != token.qpn) {
                            // A new token connection: it is bound to no one.
                            bound.remove(&token.qpn);
                        }
                        live = Some(Live {
                            token,
                            dir,
                            granting: true,
                            may_bind: true,
                            proofs: 0,
                        });
                    }
                    Err(e) => {
                        // A request refused before a token exists (size 0,
                        // too large, no buffer) leaves the latest token
                        // granting, as the client keeps it. One that failed
                        // later ended that grant: the model, still counting
                        // it as granting, can then miss a check but never
                        // raise a false one.
                        debug(format_args!("token {dir:?} {size}: {e}"));
                    }
                }
            }
            // hipObjHandleRdmaReply.
            2 | 3 => {
                let reply = choose_reply(input, live.as_ref(), &bound, &history);
                if history.len() < 32 {
                    history.push(reply.clone());
                }
                let r = inst.handle_token_reply(&reply);
                debug(format_args!(
                    "reply {:?} -> {r:?}",
                    String::from_utf8_lossy(&reply)
                ));
                check_reply(&reply, r, &mut live, &mut bound, &p);
            }
            // The server's WRITE WITH IMMEDIATE.
            4 => {
                let Some(l) = live.as_mut() else { continue };
                let sel = input.u8();
                let imm = match sel % 4 {
                    0 | 1 => l.token.rkey,
                    2 => older
                        .get(usize::from(input.u8()) % older.len().max(1))
                        .map_or(0, |t| t.rkey),
                    _ => input.u32(),
                };
                let qpn = if sel & 0x10 == 0 {
                    l.token.qpn
                } else {
                    let qps = p.verbs.qp_nums();
                    qps.get(usize::from(input.u8()) % qps.len().max(1))
                        .copied()
                        .unwrap_or(0)
                };
                // One WRITE WITH IMMEDIATE of the token's whole range.
                let landed = p.verbs.deliver_write_with_imm(qpn, imm, l.token.len as u32);
                debug(format_args!("proof qpn {qpn:#x} imm {imm:#x}: {landed}"));
                if landed && qpn == l.token.qpn && imm == l.token.rkey {
                    l.proofs += 1;
                }
            }
            // hipObjPutRdmaToken: the latest token, an older one, or junk.
            5 => {
                let sel = input.u8();
                let hex = match (sel % 3, live) {
                    (0, Some(l)) => {
                        if let Some(l) = live.as_mut() {
                            l.granting = false;
                        }
                        l.token.encode().as_str().to_owned()
                    }
                    (1, _) if !older.is_empty() => older[usize::from(input.u8()) % older.len()]
                        .encode()
                        .as_str()
                        .to_owned(),
                    _ => {
                        let n = usize::from(input.u8() % 100);
                        String::from_utf8_lossy(&input.bytes(n)).into_owned()
                    }
                };
                debug(format_args!("release {hex}"));
                inst.release_token(&hex);
            }
            // The token connection breaks, or a verbs call fails once in
            // the next step.
            6 => {
                if input.u8() & 1 == 0 {
                    if let Some(l) = live {
                        p.verbs.break_qp(l.token.qpn);
                    }
                } else {
                    let call = FAULTABLE[usize::from(input.u8()) % FAULTABLE.len()];
                    p.faults
                        .set_after(call, Fault::Fail, u32::from(input.u8() % 4), 1);
                    check_grants(&p, mw, live.as_ref());
                    continue;
                }
            }
            // Deregistration (which ends the grant) and registration again.
            _ => {
                if registered {
                    inst.deregister(buf.addr()).expect("deregister");
                    registered = false;
                    if let Some(l) = live.as_mut() {
                        l.granting = false;
                    }
                } else {
                    inst.register_host(buf).expect("register again");
                    registered = true;
                }
            }
        }
        p.faults.clear();
        check_grants(&p, mw, live.as_ref());
    }
    lib.shutdown();
    drop(inst);
    assert!(
        p.verbs.live().is_zero(),
        "shutdown left verbs objects alive: {:?}",
        p.verbs.live()
    );
}

fn choose_reply(
    input: &mut Input<'_>,
    live: Option<&Live>,
    bound: &std::collections::HashMap<u32, Token>,
    history: &[Vec<u8>],
) -> Vec<u8> {
    let size = live.map_or(1, |l| l.token.len);
    let r = input.u8();
    match r % 12 {
        0..=2 => Reply::Bind {
            token: server(input.u8()),
            psn: u32::from(input.u16()),
        }
        .to_string()
        .into_bytes(),
        3 => Reply::Bind {
            token: bogus(input.u8()),
            psn: 1,
        }
        .to_string()
        .into_bytes(),
        4..=6 => {
            let sel = input.u8();
            let token = match sel % 3 {
                0 | 1 => live
                    .and_then(|l| bound.get(&l.token.qpn).copied())
                    .unwrap_or_else(|| server(0)),
                _ => {
                    let mut s = server(input.u8());
                    s.qpn ^= u32::from(input.u8() & 3);
                    s
                }
            };
            let bytes = match (sel >> 2) % 5 {
                0..=2 => size,
                3 => size.wrapping_sub(1),
                _ => size + 1,
            };
            let status = [200, 204, 206][usize::from(sel >> 5) % 3];
            Reply::Done { status, token, bytes }.to_string().into_bytes()
        }
        7 => {
            let forms = ["200", "ok", "204", "206", "500", "501", "err", "409"];
            forms[usize::from(input.u8()) % forms.len()].as_bytes().to_vec()
        }
        8 => Reply::WithToken {
            status: 200,
            token: server(input.u8()),
        }
        .to_string()
        .into_bytes(),
        9 => {
            let i = usize::from(input.u8());
            history.get(i % history.len().max(1)).cloned().unwrap_or_default()
        }
        _ => {
            let n = usize::from(input.u8() % 200);
            input.bytes(n)
        }
    }
}

fn check_reply(
    reply: &[u8],
    r: hipobj::Result<u16>,
    live: &mut Option<Live>,
    bound: &mut std::collections::HashMap<u32, Token>,
    p: &hipobj_platform::fake::FakePlatform,
) {
    let parsed = parse_reply(reply);
    match r {
        Ok(code) => {
            let l = live.as_mut().expect("a reply accepted with no token ever minted");
            match parsed {
                Ok(Reply::Bind { token, .. }) => {
                    assert_eq!(code, 409);
                    assert!(l.may_bind, "a second binding round was accepted");
                    l.may_bind = false;
                    l.proofs = 0;
                    bound.insert(l.token.qpn, token);
                }
                Ok(Reply::Done { status, token, bytes }) => {
                    assert_eq!(code, status);
                    assert!(l.granting, "a success for a token that no longer grants");
                    assert_eq!(
                        bytes, l.token.len,
                        "a success with a count other than the token's"
                    );
                    let b = bound.get(&l.token.qpn);
                    assert!(
                        b.is_some_and(|b| b.qpn == token.qpn && b.gid == token.gid),
                        "a success naming server QP {:#x}, the token connection is bound to {:?}",
                        token.qpn,
                        b.map(|b| b.qpn)
                    );
                    if l.dir == Direction::Get {
                        assert!(
                            l.proofs > 0,
                            "a GET token's success without its WRITE WITH IMMEDIATE"
                        );
                        l.proofs -= 1;
                    }
                    l.may_bind = true;
                }
                other => panic!("accepted {other:?} as code {code}"),
            }
        }
        Err(e) => {
            match parsed {
                Err(_) => {
                    // Malformed: refused before anything is touched.
                    assert_eq!(e.kind(), ErrorKind::InvalidValue, "{e}");
                    return;
                }
                Ok(_) => assert!(
                    matches!(e.kind(), ErrorKind::S3Error | ErrorKind::RdmaError),
                    "a reply failed with {:?}: {e}",
                    e.kind()
                ),
            }
            if let Some(l) = live.as_mut() {
                assert_ne!(
                    p.verbs.qp_state(l.token.qpn),
                    Some(QpState::Rts),
                    "a failed reply left the token connection {:#x} in RTS",
                    l.token.qpn
                );
                l.granting = false;
                l.may_bind = false;
            }
        }
    }
}

/// Nothing grants access but the latest live token, and that only over its
/// range with its right.
fn check_grants(p: &hipobj_platform::fake::FakePlatform, mw: bool, live: Option<&Live>) {
    let right = |d: Direction| match d {
        Direction::Get => AccessFlags::REMOTE_WRITE,
        Direction::Put => AccessFlags::REMOTE_READ,
    };
    let grants = p.verbs.live_mw_binds();
    let granting = live.filter(|l| l.granting);
    if mw {
        for g in &grants {
            let l = granting.unwrap_or_else(|| panic!("a window grants {g:?} with no live token"));
            assert_eq!(
                (g.qpn, g.rkey, g.addr, g.len, g.access),
                (l.token.qpn, l.token.rkey, l.token.addr, l.token.len, right(l.dir)),
                "a window grants more or other than the live token"
            );
        }
        return;
    }
    assert!(grants.is_empty());
    for qpn in p.verbs.qp_nums() {
        let a = p.verbs.qp_access(qpn).unwrap_or_default();
        let allowed = granting.filter(|l| l.token.qpn == qpn).map(|l| right(l.dir));
        for r in [AccessFlags::REMOTE_READ, AccessFlags::REMOTE_WRITE] {
            if a.contains(r) {
                assert_eq!(
                    allowed,
                    Some(r),
                    "QP {qpn:#x} has {a:?} with the live token {granting:?}"
                );
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    run(&mut Input(data));
});
