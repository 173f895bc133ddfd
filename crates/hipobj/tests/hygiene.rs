//! Issue 11's failure hygiene and proof rules on the fake NIC, each as the
//! attacker or the accident that used to get through: a success without
//! proof, a lease that failed without being marked, a token connection whose
//! replacement failed, unlimited binding rounds, and server tokens that name
//! no real queue pair.
#![allow(clippy::unwrap_used, unsafe_code)]

mod support;

use hipobj::{Direction, ErrorKind};
use hipobj_platform::fake::{FakeDeviceSpec, Fault};
use hipobj_platform::{AccessFlags, Gid, MemRegion, QpState};
use hipobj_proto::{Reply, Token};

use support::{Script, deliver_get_proof, done, fake, host_buf, server_token, started};

fn bind_reply_for(token: Token) -> String {
    Reply::Bind { token, psn: 7 }.to_string()
}

fn bind_reply() -> String {
    support::bind_reply(7)
}

fn qpn_of(hex: &str) -> u32 {
    Token::decode(hex.as_bytes()).unwrap().qpn
}

/// Finding 1 (fake NIC half): on a bound connection, every success form but
/// the full one, and the full one without the GET's WRITE WITH IMMEDIATE,
/// fails the GET; so does a proof carrying another key.
#[test]
fn a_get_succeeds_only_with_the_full_reply_and_its_write_with_immediate() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 1);
    let inst = lib.instance().unwrap();
    let buf = host_buf(512);
    inst.register_host(buf).unwrap();
    let bind_then = |last: &str| {
        let mut s = Script::replying(&[&bind_reply(), last]);
        let r = inst.transfer(Direction::Get, buf.addr(), 512, 0, &mut s);
        (r.map_err(|e| e.kind()), qpn_of(&s.tokens[0]))
    };
    let unproven = [
        "200".to_owned(),
        "ok".to_owned(),
        "204".to_owned(),
        "206".to_owned(),
        Reply::WithToken {
            status: 200,
            token: server_token(),
        }
        .to_string(),
        done(512),
    ];
    for reply in &unproven {
        let (r, qpn) = bind_then(reply);
        assert_eq!(r, Err(ErrorKind::RdmaError), "{reply:?} was taken as a success");
        assert_eq!(p.verbs.qp_state(qpn), None, "{reply:?}: the QP was not destroyed");
    }
    // A WRITE WITH IMMEDIATE of another key (another transfer's) is no proof.
    let mut wrong_key = WrongKey {
        inner: Script::replying(&[&bind_reply(), &done(512)]),
        verbs: p.verbs.clone(),
    };
    assert_eq!(
        inst.transfer(Direction::Get, buf.addr(), 512, 0, &mut wrong_key)
            .unwrap_err()
            .kind(),
        ErrorKind::RdmaError
    );
    // And the real thing works.
    inst.transfer(
        Direction::Get,
        buf.addr(),
        512,
        0,
        &mut Script::serving(&p, &[&bind_reply(), &done(512)]),
    )
    .unwrap();
}

/// Delivers a WRITE WITH IMMEDIATE whose value is not the token's key.
struct WrongKey {
    inner: Script,
    verbs: std::sync::Arc<hipobj_platform::fake::FakeVerbs>,
}

impl hipobj::Control for WrongKey {
    fn send_request(&mut self, token: &str) -> Result<(), hipobj::ControlError> {
        self.inner.send_request(token)
    }
    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, hipobj::ControlError> {
        if self.inner.tokens.len() == 2 {
            let t = Token::decode(self.inner.tokens[1].as_bytes()).unwrap();
            assert!(self.verbs.deliver_write_with_imm(t.qpn, t.rkey ^ 0x100, 0));
        }
        self.inner.recv_reply(reply)
    }
}

/// Finding 7 (fake NIC half): a count other than the one asked for is never
/// a success: fewer is `S3Error`, more is `RdmaError`.
#[test]
fn a_count_other_than_the_request_is_an_error() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 1);
    let inst = lib.instance().unwrap();
    let buf = host_buf(8192);
    inst.register_host(buf).unwrap();
    for (dir, count, kind) in [
        (Direction::Get, 100, ErrorKind::S3Error),
        (Direction::Get, 8193, ErrorKind::RdmaError),
        (Direction::Put, 8191, ErrorKind::S3Error),
        (Direction::Put, 0, ErrorKind::S3Error),
    ] {
        let mut s = Script::serving(&p, &[&bind_reply(), &done(count)]);
        let e = inst.transfer(dir, buf.addr(), 8192, 0, &mut s).unwrap_err();
        assert_eq!(e.kind(), kind, "{dir:?} counted {count}: {e}");
        assert_eq!(p.verbs.qp_state(qpn_of(&s.tokens[0])), None);
    }
}

/// Finding 6: a failed GPU synchronize after a transfer into GPU memory
/// fails the call and destroys the connection (it used to go back bound and
/// in RTS).
#[test]
fn a_failed_gpu_synchronize_destroys_the_connection() {
    let p = fake(1, FakeDeviceSpec::default());
    let lib = started(&p, 1);
    let inst = lib.instance().unwrap();
    let addr = p.gpu.alloc_device(0, 4096);
    // SAFETY: the fake GPU keeps the allocation for the rest of the test.
    let r = unsafe { MemRegion::new(addr, 4096) };
    inst.register_device(r).unwrap();
    p.faults.set("synchronize", Fault::Fail);
    for dir in [Direction::Put, Direction::Get] {
        let mut s = Script::serving(&p, &[&bind_reply(), &done(4096)]);
        let e = inst.transfer(dir, addr, 4096, 0, &mut s).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::RdmaError, "{dir:?}: {e}");
        let qpn = qpn_of(&s.tokens[0]);
        assert_eq!(
            p.verbs.qp_state(qpn),
            None,
            "{dir:?}: the QP stayed alive after the failure"
        );
    }
    p.faults.clear();
    inst.deregister(addr).unwrap();
}

/// Finding 6: a panic in the middle of a transfer (here in the S3 callback,
/// after the binding) leaves the connection destroyed, not back in the pool
/// bound and in RTS.
#[test]
fn a_panic_during_a_transfer_destroys_the_connection() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 1);
    let inst = lib.instance().unwrap();
    let buf = host_buf(256);
    inst.register_host(buf).unwrap();
    let mut s = Script::replying(&[&bind_reply(), &done(256)]);
    let mut sends = 0;
    s.on_send = Some(Box::new(move || {
        sends += 1;
        if sends == 2 {
            panic!("the application's S3 client panics");
        }
    }));
    let inst2 = inst.clone();
    let tokens = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = tokens.clone();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let mut rec = Recording { inner: s, seen };
        let _ = inst2.transfer(Direction::Get, buf.addr(), 256, 0, &mut rec);
    }));
    assert!(panicked.is_err());
    let qpn = qpn_of(&tokens.lock().unwrap()[0]);
    assert_eq!(
        p.verbs.qp_state(qpn),
        None,
        "the panicked transfer's QP went back to the pool"
    );
    assert_eq!(inst.pool().size(), 1, "and was replaced");
    inst.transfer(
        Direction::Get,
        buf.addr(),
        256,
        0,
        &mut Script::serving(&p, &[&bind_reply(), &done(256)]),
    )
    .unwrap();
}

struct Recording {
    inner: Script,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl hipobj::Control for Recording {
    fn send_request(&mut self, token: &str) -> Result<(), hipobj::ControlError> {
        self.seen.lock().unwrap().push(token.to_owned());
        self.inner.send_request(token)
    }
    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, hipobj::ControlError> {
        self.inner.recv_reply(reply)
    }
}

/// Finding 6: when the token connection's replacement fails, the old token
/// QP has already left RTS (it is destroyed), so the server's binding to it
/// reaches nothing.
#[test]
fn a_failed_token_connection_replacement_leaves_no_live_qp() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 1);
    let inst = lib.instance().unwrap();
    let buf = host_buf(256);
    inst.register_host(buf).unwrap();
    let hex = inst.rdma_token(buf.addr(), 256, Direction::Get).unwrap();
    let old = qpn_of(hex.as_str());
    assert_eq!(inst.handle_token_reply(bind_reply().as_bytes()).unwrap(), 409);
    assert_eq!(p.verbs.qp_state(old), Some(QpState::Rts));
    p.faults.set("create_qp", Fault::Fail);
    assert_eq!(
        inst.handle_token_reply(b"500").unwrap_err().kind(),
        ErrorKind::S3Error
    );
    assert_eq!(
        p.verbs.qp_state(old),
        None,
        "the old token QP is still alive after its replacement failed"
    );
    // Until a replacement can be built, tokens fail; then they work again.
    assert_eq!(
        inst.rdma_token(buf.addr(), 256, Direction::Get)
            .unwrap_err()
            .kind(),
        ErrorKind::RdmaError
    );
    p.faults.clear();
    let hex = inst.rdma_token(buf.addr(), 256, Direction::Get).unwrap();
    assert_ne!(qpn_of(hex.as_str()), old);
}

/// Finding 9: one binding round per token: a server that answers 409 again
/// and again ends the application's loop (docs/c-api.md) with an error
/// instead of binding forever. A completed transfer allows one round again.
#[test]
fn an_application_driven_token_gets_one_binding_round() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 1);
    let inst = lib.instance().unwrap();
    let buf = host_buf(256);
    inst.register_host(buf).unwrap();
    let hex = inst.rdma_token(buf.addr(), 256, Direction::Get).unwrap();
    let t = Token::decode(hex.as_bytes()).unwrap();
    // The loop of docs/c-api.md against a server that always answers 409.
    let mut rounds = 0;
    let outcome = loop {
        rounds += 1;
        match inst.handle_token_reply(bind_reply().as_bytes()) {
            Ok(409) if rounds < 100 => continue,
            other => break other,
        }
    };
    assert_eq!(outcome.unwrap_err().kind(), ErrorKind::S3Error);
    assert_eq!(rounds, 2, "the second 409 ends it");
    assert_eq!(p.verbs.qp_state(t.qpn), None, "and the token QP is gone");

    // A fresh token: bind once, complete, and the same token may bind once more.
    let hex = inst.rdma_token(buf.addr(), 256, Direction::Get).unwrap();
    let t = Token::decode(hex.as_bytes()).unwrap();
    assert_eq!(inst.handle_token_reply(bind_reply().as_bytes()).unwrap(), 409);
    assert!(deliver_get_proof(&p.verbs, &t));
    assert_eq!(inst.handle_token_reply(done(256).as_bytes()).unwrap(), 200);
    assert_eq!(inst.handle_token_reply(bind_reply().as_bytes()).unwrap(), 409);
    assert!(inst.handle_token_reply(bind_reply().as_bytes()).is_err());
}

/// The server tokens a binding reply may not name: QP 0 and 1 (special),
/// numbers over 24 bits, the GID `::`, multicast GIDs (IPv6 and
/// IPv4-mapped), the IPv4-mapped broadcast and unspecified addresses, port 0.
fn bogus_server_tokens() -> Vec<(&'static str, Token)> {
    let base = server_token();
    let with = |f: &dyn Fn(&mut Token)| {
        let mut t = base;
        f(&mut t);
        t
    };
    let mut mcast6 = [0u8; 16];
    mcast6[0] = 0xff;
    mcast6[1] = 0x02;
    mcast6[15] = 1;
    vec![
        ("QPN 0", with(&|t| t.qpn = 0)),
        ("QPN 1", with(&|t| t.qpn = 1)),
        ("QPN 2^24", with(&|t| t.qpn = 1 << 24)),
        ("QPN u32::MAX", with(&|t| t.qpn = u32::MAX)),
        ("GID ::", with(&|t| t.gid = [0; 16])),
        ("GID ff02::1", with(&|t| t.gid = mcast6)),
        (
            "GID ::ffff:224.0.0.1",
            with(&|t| t.gid = Gid::from_ipv4(std::net::Ipv4Addr::new(224, 0, 0, 1)).0),
        ),
        (
            "GID ::ffff:255.255.255.255",
            with(&|t| t.gid = Gid::from_ipv4(std::net::Ipv4Addr::BROADCAST).0),
        ),
        (
            "GID ::ffff:0.0.0.0",
            with(&|t| t.gid = Gid::from_ipv4(std::net::Ipv4Addr::UNSPECIFIED).0),
        ),
        ("port 0", with(&|t| t.port = 0)),
    ]
}

/// Finding 10: a binding reply naming a bogus server QP is refused before
/// any QP is connected, by hipObjHandleRdmaReply and by a transfer.
#[test]
fn bogus_server_tokens_are_never_connected_to() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 1);
    let inst = lib.instance().unwrap();
    let buf = host_buf(256);
    inst.register_host(buf).unwrap();
    for (what, bogus) in bogus_server_tokens() {
        let hex = inst.rdma_token(buf.addr(), 256, Direction::Get).unwrap();
        let qpn = qpn_of(hex.as_str());
        let e = inst
            .handle_token_reply(bind_reply_for(bogus).as_bytes())
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::S3Error, "{what}: {e}");
        assert_eq!(p.verbs.qp_state(qpn), None, "{what}: the token QP survived");

        let rtr_before = p.faults.count("modify_qp");
        let mut s = Script::replying(&[&bind_reply_for(bogus)]);
        let e = inst
            .transfer(Direction::Get, buf.addr(), 256, 0, &mut s)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::S3Error, "{what}: {e}");
        let qpn = qpn_of(&s.tokens[0]);
        assert_eq!(p.verbs.qp_state(qpn), None, "{what}");
        // Destroying and replacing the QP moves the new one to INIT: one
        // modify. Connecting would have taken two more (RTR, RTS).
        assert_eq!(
            p.faults.count("modify_qp") - rtr_before,
            1,
            "{what}: a QP was connected"
        );
    }
}

/// A malicious server that sends a WRITE WITH IMMEDIATE with the right key
/// between transfers, then answers the next GET with a full success without
/// writing: the completion waiting on the CQ is not taken as that GET's
/// proof. The connection it sits on is destroyed when leased, and the GET
/// fails.
#[test]
fn a_write_with_immediate_sent_early_proves_no_later_get() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 1);
    let inst = lib.instance().unwrap();
    let buf = host_buf(512);
    inst.register_host(buf).unwrap();
    let mut s = Script::serving(&p, &[&bind_reply(), &done(512)]);
    inst.transfer(Direction::Get, buf.addr(), 512, 0, &mut s).unwrap();
    let t = Token::decode(s.tokens[0].as_bytes()).unwrap();
    // Between transfers: the next GET's proof, sent ahead of time.
    assert!(deliver_get_proof(&p.verbs, &t));
    let mut replay = Script::replying(&[&done(512)]);
    let e = inst
        .transfer(Direction::Get, buf.addr(), 512, 0, &mut replay)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RdmaError, "{e}");
    assert_eq!(
        p.verbs.qp_state(t.qpn),
        None,
        "the connection with the early completion was used"
    );
    assert_ne!(qpn_of(&replay.tokens[0]), t.qpn);
}

/// Issue 24 finding 5, on the fake NIC: the server's RDMA broke the
/// client's QP during the call (it is in ERR: its NIC refused an access),
/// and the server answered with a fresh binding (409). Before, the client
/// reset the QP, rebound it and succeeded, so the refused access left no
/// trace. Now the call fails with `RdmaError`, the connection is destroyed,
/// and nothing it granted outlives the call: no window stays bound, and
/// without windows no QP of the pool grants a remote right.
#[test]
fn a_qp_the_servers_rdma_broke_during_the_call_fails_it_and_grants_nothing() {
    for windows in [true, false] {
        let p = fake(0, support::windows(windows));
        let lib = started(&p, 1);
        let inst = lib.instance().unwrap();
        let buf = host_buf(512);
        inst.register_host(buf).unwrap();
        let mut s = Script::serving(&p, &[&bind_reply(), &done(512)]);
        inst.transfer(Direction::Get, buf.addr(), 512, 0, &mut s).unwrap();
        let qpn = qpn_of(&s.tokens[0]);

        let verbs = p.verbs.clone();
        let mut sent = 0;
        let mut s = Script::serving(&p, &[&bind_reply(), &done(512)]);
        s.on_send = Some(Box::new(move || {
            sent += 1;
            if sent == 1 {
                assert!(verbs.break_qp(qpn));
            }
        }));
        let e = inst
            .transfer(Direction::Get, buf.addr(), 512, 0, &mut s)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::RdmaError, "windows {windows}: {e}");
        assert_eq!(s.tokens.len(), 1, "windows {windows}: the request was sent again");
        assert_ne!(
            p.verbs.qp_state(qpn),
            Some(QpState::Rts),
            "windows {windows}: the broken connection is still in RTS"
        );
        if windows {
            assert!(p.verbs.live_mw_binds().is_empty(), "a grant outlived the call");
        } else {
            for q in p.verbs.qp_nums() {
                let access = p.verbs.qp_access(q).unwrap();
                assert!(
                    !access.contains(AccessFlags::REMOTE_WRITE) && !access.contains(AccessFlags::REMOTE_READ),
                    "{q:#x}: {access:?}"
                );
            }
        }
        // The pool's next connection works.
        let mut s = Script::serving(&p, &[&bind_reply(), &done(512)]);
        inst.transfer(Direction::Get, buf.addr(), 512, 0, &mut s).unwrap();
    }
}

/// Found by the `transfer_sequence` fuzz target: a connection traded back
/// to the pool by a 409 from another server can carry a completion that
/// arrived while it was leased: here a WRITE WITH IMMEDIATE its own server
/// sent during a request that another server answered. When a later 409
/// trades it in again, that stale completion must not count as the new
/// GET's proof. Without memory windows every GET token of a buffer carries
/// the same key, so only the CQ check on the traded-in connection stops it
/// (docs/protocol.md §3 step 3, §5).
#[test]
fn a_stale_write_with_immediate_on_a_traded_in_connection_proves_nothing() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 2);
    let inst = lib.instance().unwrap();
    let buf = host_buf(512);
    inst.register_host(buf).unwrap();
    let b = Token {
        qpn: 0x77,
        gid: Gid::from_ipv4(std::net::Ipv4Addr::new(127, 8, 8, 8)).0,
        ..server_token()
    };
    let done_b = Reply::Done {
        status: 200,
        token: b,
        bytes: 512,
    }
    .to_string();
    // 1. A GET from server B binds connection X to B.
    let mut s = Script::serving(&p, &[&bind_reply_for(b), &done_b]);
    inst.transfer(Direction::Get, buf.addr(), 512, 0, &mut s).unwrap();
    let x = Token::decode(s.tokens[0].as_bytes()).unwrap();
    // 2. The next GET leases X (B answered last) but reaches server A,
    //    whose 409 trades X back to the pool; meanwhile B writes to X with
    //    an immediate carrying the buffer's key. The GET then completes on
    //    another connection, bound to A.
    let verbs = p.verbs.clone();
    let mut s = Script::serving(&p, &[&bind_reply(), &bind_reply(), &done(512)]);
    let mut sent = 0;
    s.on_send = Some(Box::new(move || {
        sent += 1;
        if sent == 1 {
            assert!(verbs.deliver_write_with_imm(x.qpn, x.rkey, 0));
        }
    }));
    inst.transfer(Direction::Get, buf.addr(), 512, 0, &mut s).unwrap();
    assert_eq!(qpn_of(&s.tokens[0]), x.qpn, "the GET did not lease X first");
    assert_ne!(qpn_of(&s.tokens[2]), x.qpn, "X was not traded away");
    // 3. A GET leases the connection bound to A, gets a 409 from B, is
    //    traded X, and B answers with a success and no new WRITE WITH
    //    IMMEDIATE: the stale one must not pass for this GET's proof.
    let mut s = Script::replying(&[&bind_reply_for(b), &done_b]);
    let r = inst.transfer(Direction::Get, buf.addr(), 512, 0, &mut s);
    assert_ne!(qpn_of(&s.tokens[0]), x.qpn, "the GET leased X itself");
    assert_eq!(
        r.map_err(|e| e.kind()),
        Err(ErrorKind::RdmaError),
        "a stale WRITE WITH IMMEDIATE proved a later GET"
    );
    assert_eq!(
        p.verbs.qp_state(x.qpn),
        None,
        "the connection with the stale completion survived"
    );
}
