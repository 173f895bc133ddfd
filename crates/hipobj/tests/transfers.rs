//! The transfer sequence against a scripted S3 side on the fake NIC: the
//! token, the binding handshake, every failure ending in the spec's code
//! with the pool healthy, and the Busy and shutdown rules of the pool.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use hipobj::{Direction, ErrorKind};
use hipobj_platform::QpState;
use hipobj_platform::fake::FakeDeviceSpec;
use hipobj_proto::{Reply, Token};

use support::{Script, bind_reply, done, done_status, fake, host_buf, server_token, started};

#[test]
fn the_token_describes_the_range_and_the_leased_qp() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 2);
    let inst = lib.instance().unwrap();
    let buf = host_buf(4096);
    inst.register_host(buf).unwrap();
    let mut s = Script::serving(&p, &[&bind_reply(7), &done(100)]);
    inst.transfer(Direction::Get, buf.addr(), 100, 1000, &mut s)
        .unwrap();
    assert_eq!(s.tokens.len(), 2, "a binding round sends the request twice");
    assert_eq!(s.tokens[0], s.tokens[1], "with the same token");
    let t = Token::decode(s.tokens[0].as_bytes()).unwrap();
    assert_eq!(t.transport, hipobj_proto::Transport::Rc);
    assert_eq!(t.addr, buf.addr() as u64 + 1000);
    assert_eq!(t.len, 100);
    assert_eq!(t.gid, inst.device().gid().0);
    assert_eq!(t.port, 1);
    assert_eq!(t.lid, 0);
    assert_eq!(
        t.rkey,
        inst.buffers().find(buf.addr()).unwrap().rkey(Direction::Get)
    );
    assert_eq!(
        p.verbs.qp_state(t.qpn),
        Some(QpState::Rts),
        "the bound QP is in RTS"
    );

    // The next transfer reuses the bound QP and needs one round.
    let mut s2 = Script::serving(&p, &[&done(4096)]);
    inst.transfer(Direction::Put, buf.addr(), 4096, 0, &mut s2)
        .unwrap();
    assert_eq!(s2.tokens.len(), 1);
    assert_eq!(Token::decode(s2.tokens[0].as_bytes()).unwrap().qpn, t.qpn);
    // A 206 naming the bound server QP, with the count, is accepted.
    inst.transfer(
        Direction::Get,
        buf.addr(),
        10,
        0,
        &mut Script::serving(&p, &[&done_status(206, 10)]),
    )
    .unwrap();
}

/// Runs one transfer with `replies` and checks it fails with `kind`, that
/// the connection it used is destroyed and replaced, and that the pool
/// still serves a transfer afterwards.
fn fails_and_pool_recovers(replies: &[&str], send_fails: bool, kind: ErrorKind) {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 1);
    let inst = lib.instance().unwrap();
    let buf = host_buf(256);
    inst.register_host(buf).unwrap();
    let mut s = Script::replying(replies);
    s.send_fails = send_fails;
    let e = inst
        .transfer(Direction::Get, buf.addr(), 256, 0, &mut s)
        .unwrap_err();
    assert_eq!(e.kind(), kind, "replies {replies:?}: {e}");
    let used = Token::decode(s.tokens[0].as_bytes()).unwrap().qpn;
    assert_eq!(
        p.verbs.qp_state(used),
        None,
        "the failed connection's QP is destroyed"
    );
    assert_eq!(inst.pool().size(), 1, "and replaced");
    assert_eq!(p.verbs.live().qps, 2);
    let mut ok = Script::serving(&p, &[&bind_reply(1), &done(256)]);
    inst.transfer(Direction::Get, buf.addr(), 256, 0, &mut ok)
        .unwrap();
}

#[test]
fn declined_rdma_is_an_s3_error() {
    fails_and_pool_recovers(&["501"], false, ErrorKind::S3Error);
}

#[test]
fn error_replies_are_s3_errors() {
    for r in ["404", "500", "err", "409"] {
        fails_and_pool_recovers(&[r], false, ErrorKind::S3Error);
    }
}

#[test]
fn malformed_or_missing_replies_are_s3_errors() {
    fails_and_pool_recovers(&["20"], false, ErrorKind::S3Error);
    fails_and_pool_recovers(&["200 OK"], false, ErrorKind::S3Error);
    fails_and_pool_recovers(&[], false, ErrorKind::S3Error);
}

#[test]
fn a_failing_send_is_an_s3_error() {
    fails_and_pool_recovers(&["200"], true, ErrorKind::S3Error);
}

#[test]
fn a_second_binding_request_fails_the_transfer() {
    fails_and_pool_recovers(&[&bind_reply(1), &bind_reply(2)], false, ErrorKind::S3Error);
}

#[test]
fn success_from_an_unbound_connection_is_an_rdma_error() {
    fails_and_pool_recovers(&["200"], false, ErrorKind::RdmaError);
    fails_and_pool_recovers(&[&done(256)], false, ErrorKind::RdmaError);
}

#[test]
fn success_echoing_another_server_qp_is_an_rdma_error() {
    let mut other = server_token();
    other.qpn += 1;
    let echo = Reply::Done {
        status: 200,
        token: other,
        bytes: 256,
    }
    .to_string();
    fails_and_pool_recovers(&[&bind_reply(3), &echo], false, ErrorKind::RdmaError);
}

#[test]
fn a_qp_that_went_to_error_is_caught_without_waiting() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 1);
    let inst = lib.instance().unwrap();
    let buf = host_buf(256);
    inst.register_host(buf).unwrap();
    inst.transfer(
        Direction::Get,
        buf.addr(),
        256,
        0,
        &mut Script::serving(&p, &[&bind_reply(1), &done(256)]),
    )
    .unwrap();
    let mut s = Script::replying(&[&done(256)]);
    let verbs = p.verbs.clone();
    let tokens = Arc::new(Mutex::new(0u32));
    let t2 = tokens.clone();
    s.on_send = Some(Box::new(move || {
        // The NIC reports a fatal error on the connection mid-transfer.
        let qpn = *verbs.qp_nums().first().unwrap();
        *t2.lock().unwrap() = qpn;
        for q in verbs.qp_nums() {
            verbs.break_qp(q);
        }
    }));
    let started_at = std::time::Instant::now();
    let e = inst
        .transfer(Direction::Get, buf.addr(), 256, 0, &mut s)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RdmaError, "{e}");
    assert!(
        started_at.elapsed() < Duration::from_secs(1),
        "the check must not wait"
    );
}

/// Issue 15's failure at 256 PUTs in flight: the connection a PUT leased
/// had gone to ERR while idle in the pool (on the soft NIC, a late duplicate
/// READ from the server reached it after the last transfer had invalidated
/// its window), after the lease's CQ check and before the PUT's window bind,
/// which failed with WR_FLUSH_ERR. Nothing had been sent to the server then,
/// so the transfer must go on with a fresh connection, and the dead QP must
/// be destroyed, not reused.
#[test]
fn a_connection_that_died_idle_is_replaced_before_the_request_goes_out() {
    for windows in [true, false] {
        for dir in [Direction::Put, Direction::Get] {
            let p = fake(0, support::windows(windows));
            let lib = started(&p, 1);
            let inst = lib.instance().unwrap();
            let buf = host_buf(256);
            inst.register_host(buf).unwrap();
            let mut s = Script::serving(&p, &[&bind_reply(1), &done(256)]);
            inst.transfer(Direction::Get, buf.addr(), 256, 0, &mut s).unwrap();
            let dead = Token::decode(s.tokens[0].as_bytes()).unwrap().qpn;
            assert_eq!(p.verbs.qp_state(dead), Some(QpState::Rts));
            let qps = p.verbs.live().qps;

            assert!(p.verbs.arm_break_at_next_use(dead));
            let mut s = Script::serving(&p, &[&bind_reply(2), &done(256)]);
            inst.transfer(dir, buf.addr(), 256, 0, &mut s)
                .unwrap_or_else(|e| panic!("windows {windows}, {dir:?}: {e}"));
            let what = format!("windows {windows}, {dir:?}: {:?}", s.tokens);
            assert!(!s.tokens.is_empty(), "{what}");
            for t in &s.tokens {
                let t = Token::decode(t.as_bytes()).unwrap();
                assert_ne!(t.qpn, dead, "a request named the dead QP: {what}");
            }
            assert_eq!(p.verbs.qp_state(dead), None, "the dead QP was destroyed: {what}");
            assert_eq!(inst.pool().size(), 1, "{what}");
            assert_eq!(
                p.verbs.live().qps,
                qps,
                "the dead QP's place went to one fresh QP: {what}"
            );
            assert!(p.verbs.live_mw_binds().is_empty(), "{what}");
        }
    }
}

/// The retry above is for a QP that was already dead. A grant that a
/// healthy QP refuses fails the transfer, before any request goes out,
/// without spending the pool's other connections on the same failure.
#[test]
fn a_grant_refused_by_a_healthy_qp_fails_without_retrying() {
    let p = fake(0, support::windows(true));
    let lib = started(&p, 2);
    let inst = lib.instance().unwrap();
    let buf = host_buf(256);
    inst.register_host(buf).unwrap();
    // The next lease prefers the connection bound to this server.
    let mut s = Script::serving(&p, &[&bind_reply(1), &done(256)]);
    inst.transfer(Direction::Get, buf.addr(), 256, 0, &mut s).unwrap();
    let binds = p.faults.count("bind_mw");
    p.faults
        .set_after("bind_mw", hipobj_platform::fake::Fault::Fail, 0, 1);
    let mut s = Script::serving(&p, &[&done(256)]);
    let e = inst
        .transfer(Direction::Put, buf.addr(), 256, 0, &mut s)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RdmaError, "{e}");
    assert!(s.tokens.is_empty(), "nothing reached the server");
    assert_eq!(
        p.faults.count("bind_mw"),
        binds + 1,
        "one bind was tried, not retried"
    );
    assert_eq!(inst.pool().size(), 2);
}

#[test]
fn bad_transfer_arguments() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 1);
    let inst = lib.instance().unwrap();
    let buf = host_buf(256);
    inst.register_host(buf).unwrap();
    let mut s = Script::replying(&["200"]);
    let k = |r: hipobj::Result<()>| r.unwrap_err().kind();
    assert_eq!(
        k(inst.transfer(Direction::Get, buf.addr(), 0, 0, &mut s)),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        k(inst.transfer(Direction::Get, buf.addr(), 257, 0, &mut s)),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        k(inst.transfer(Direction::Get, buf.addr(), 1, 256, &mut s)),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        k(inst.transfer(Direction::Get, buf.addr(), 2, usize::MAX, &mut s)),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        k(inst.transfer(Direction::Put, buf.addr() + 1, 1, 0, &mut s)),
        ErrorKind::BufNotRegistered
    );
    assert_eq!(
        k(inst.transfer(Direction::Put, 0, 1, 0, &mut s)),
        ErrorKind::InvalidValue
    );
    assert!(s.tokens.is_empty(), "bad arguments never reach the S3 side");
}

#[test]
fn a_callback_transfer_gets_busy_when_every_connection_is_taken() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 1);
    let inst = lib.instance().unwrap();
    let buf = host_buf(256);
    inst.register_host(buf).unwrap();
    let inner_result = Arc::new(Mutex::new(None));
    let (inst2, r2) = (inst.clone(), inner_result.clone());
    let mut s = Script::replying(&["501"]);
    s.on_send = Some(Box::new(move || {
        let mut inner = Script::replying(&["200"]);
        *r2.lock().unwrap() = Some(
            inst2
                .transfer(Direction::Get, buf.addr(), 1, 0, &mut inner)
                .map_err(|e| e.kind()),
        );
    }));
    inst.transfer(Direction::Get, buf.addr(), 1, 0, &mut s)
        .unwrap_err();
    assert_eq!(*inner_result.lock().unwrap(), Some(Err(ErrorKind::Busy)));
}

#[test]
fn shutdown_wakes_waiters_with_not_initialized_and_the_holder_finishes() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = Arc::new(started(&p, 1));
    let inst = lib.instance().unwrap();
    let buf = host_buf(256);
    inst.register_host(buf).unwrap();
    let (in_callback_tx, in_callback_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Arc::new(Mutex::new(release_rx));
    let holder = {
        let inst = inst.clone();
        let p2 = p.clone();
        std::thread::spawn(move || {
            let mut s = Script::serving(&p2, &[&bind_reply(5), &done(256)]);
            let mut first = true;
            s.on_send = Some(Box::new(move || {
                if first {
                    first = false;
                    in_callback_tx.send(()).unwrap();
                    release_rx.lock().unwrap().recv().unwrap();
                }
            }));
            inst.transfer(Direction::Get, buf.addr(), 256, 0, &mut s)
        })
    };
    in_callback_rx.recv().unwrap();
    let waiter = {
        let inst = inst.clone();
        std::thread::spawn(move || {
            inst.transfer(
                Direction::Get,
                buf.addr(),
                256,
                0,
                &mut Script::replying(&["200"]),
            )
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    lib.shutdown();
    assert_eq!(
        waiter.join().unwrap().unwrap_err().kind(),
        ErrorKind::NotInitialized
    );
    // A new init can run while the old transfer is still in its callback.
    lib.init(&support::config(), || Ok(p.platform()), || support::options(1))
        .unwrap();
    release_tx.send(()).unwrap();
    holder.join().unwrap().unwrap();
    drop(inst);
    lib.shutdown();
    assert!(p.verbs.live().is_zero(), "{:?}", p.verbs.live());
}

#[test]
fn a_panic_while_replacing_a_connection_does_not_lose_the_slot() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 1);
    let inst = lib.instance().unwrap();
    let buf = host_buf(64);
    inst.register_host(buf).unwrap();
    p.faults.set("create_qp", hipobj_platform::fake::Fault::Panic);
    let inst2 = inst.clone();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _ = inst2.transfer(Direction::Get, buf.addr(), 64, 0, &mut Script::replying(&["501"]));
    }));
    assert!(
        panicked.is_err(),
        "the injected panic fires while replacing the connection"
    );
    p.faults.clear();
    // The pool lost its only connection, so it now says so instead of
    // making the next transfer wait forever.
    let (tx, rx) = mpsc::channel();
    let inst3 = inst.clone();
    std::thread::spawn(move || {
        let r = inst3.transfer(Direction::Get, buf.addr(), 64, 0, &mut Script::replying(&["200"]));
        tx.send(r.map_err(|e| e.kind())).unwrap();
    });
    let r = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the transfer hung on a lost slot");
    assert_eq!(r, Err(ErrorKind::RdmaError));
}

#[test]
fn application_driven_transfers_bind_the_token_connection() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 1);
    let inst = lib.instance().unwrap();
    let buf = host_buf(256);
    inst.register_host(buf).unwrap();
    let token_of = |dir, len| {
        let hex = inst.rdma_token(buf.addr(), len, dir).unwrap();
        Token::decode(hex.as_bytes()).unwrap()
    };
    let get = token_of(Direction::Get, 256);
    let first = get.qpn;
    assert_eq!(p.verbs.qp_state(first), Some(QpState::Init));
    // Malformed replies change nothing.
    let e = inst.handle_token_reply(b"2000").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidValue);
    assert_eq!(token_of(Direction::Get, 256).qpn, first);
    // The binding reply connects the token connection.
    assert_eq!(inst.handle_token_reply(bind_reply(9).as_bytes()).unwrap(), 409);
    assert_eq!(p.verbs.qp_state(first), Some(QpState::Rts));
    // A GET is done when its WRITE WITH IMMEDIATE (the token's key) has
    // completed and the reply names the bound QP and the token's length.
    assert!(support::deliver_get_proof(&p.verbs, &get));
    assert_eq!(inst.handle_token_reply(done(256).as_bytes()).unwrap(), 200);
    // A PUT has nothing on the CQ; its count is the PUT token's length.
    let put = token_of(Direction::Put, 100);
    assert_eq!(put.qpn, first, "tokens keep naming the bound connection");
    assert_eq!(
        inst.handle_token_reply(format!("{}\r\n", done_status(206, 100)).as_bytes())
            .unwrap(),
        206
    );
    // A decline replaces the connection: the old QP is gone for good.
    assert_eq!(
        inst.handle_token_reply(b"501").unwrap_err().kind(),
        ErrorKind::S3Error
    );
    assert_eq!(p.verbs.qp_state(first), None);
    let second = token_of(Direction::Get, 256).qpn;
    assert_ne!(second, first);
    // Success on a connection that was never bound is refused.
    assert_eq!(
        inst.handle_token_reply(done(256).as_bytes()).unwrap_err().kind(),
        ErrorKind::RdmaError
    );
    let third = token_of(Direction::Get, 256);
    assert_ne!(third.qpn, second);
    // So is success from a QP other than the bound one, proof or not.
    inst.handle_token_reply(bind_reply(1).as_bytes()).unwrap();
    assert!(support::deliver_get_proof(&p.verbs, &third));
    let mut other = server_token();
    other.qpn += 5;
    let wrong = Reply::Done {
        status: 200,
        token: other,
        bytes: 256,
    }
    .to_string();
    assert_eq!(
        inst.handle_token_reply(wrong.as_bytes()).unwrap_err().kind(),
        ErrorKind::RdmaError
    );
    // No connection leaked along the way: the pool's one and the token one.
    assert_eq!(p.verbs.live().qps, 2);
}
