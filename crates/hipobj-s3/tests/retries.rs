//! Retries of transfers whose requests carry a token (issue 38, finding
//! 2), against a double that injects faults: a `503 SlowDown` and a
//! refused connection are tried again, each time with a fresh token, after
//! pauses that grow; a `4xx`, any other `5xx`, and a connection that broke
//! after the request went out (the server may have moved the bytes) are
//! tried once. The client runs on the fake NIC.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hipobj_platform::fake::{FakePlatform, FakeVerbs};
use hipobj_proto::Reply;
use hipobj_s3::{Protocol, RdmaS3Client, Span, TokenRetries};
use support::{Req, Resp, runtime, sdk, server_token, start, start_at};

fn client(
    rt: &tokio::runtime::Runtime,
    endpoint: &str,
    p: &FakePlatform,
    retries: TokenRetries,
) -> RdmaS3Client {
    let h = hipobj::Client::builder(p.platform())
        .nic_hint("fake0")
        .build()
        .unwrap();
    // The endpoint is taken as speaking the binding exchange: no probe
    // before a PUT, so every token request below is the transfer's own.
    RdmaS3Client::new(sdk(endpoint), h, rt.handle().clone())
        .known_protocol(Protocol::Binding)
        .token_retries(retries)
}

fn retries(attempts: u32, base_ms: u64) -> TokenRetries {
    TokenRetries {
        attempts,
        base: Duration::from_millis(base_ms),
        cap: Duration::from_secs(2),
    }
}

fn bind() -> Resp {
    let r = Reply::Bind {
        token: server_token(),
        psn: 0x77,
    };
    Resp::error(409, "RDMABindRequired").header(hipobj_proto::REPLY_HEADER, r.to_string())
}

/// The full success for `req`'s token; for a GET, the server's WRITE WITH
/// IMMEDIATE is played on the fake NIC first.
fn done(req: &Req, verbs: &FakeVerbs) -> Resp {
    let t = hipobj_proto::Token::decode(req.token().unwrap().as_bytes()).unwrap();
    if req.method == "GET" {
        assert!(verbs.deliver_write_with_imm(t.qpn, t.rkey, t.len as u32));
    }
    let r = Reply::Done {
        status: 200,
        token: server_token(),
        bytes: t.len,
    };
    Resp::new(200)
        .header(hipobj_proto::REPLY_HEADER, r.to_string())
        .header(hipobj_proto::BYTES_HEADER, t.len.to_string())
        .header("etag", "\"e\"")
}

/// Every token request's arrival time and token, as the double saw them.
type Seen = Arc<Mutex<Vec<(Instant, String)>>>;

fn note(seen: &Seen, req: &Req) {
    if let Some(t) = req.token() {
        seen.lock().unwrap().push((Instant::now(), t.to_owned()));
    }
}

fn put(c: &RdmaS3Client) -> hipobj_s3::Result<hipobj_s3::Transfer> {
    let reg = c.hipobj().register(vec![5u8; 4096]).unwrap();
    c.put_object(&reg, Span::whole(4096), "bkt", "obj")
}

#[test]
fn a_503_slowdown_is_retried_with_a_fresh_token_after_growing_pauses() {
    let rt = runtime();
    let p = FakePlatform::host_only();
    let (seen, verbs): (Seen, _) = (Arc::default(), p.verbs.clone());
    let s = seen.clone();
    let d = start(&rt, move |req, i| {
        note(&s, req);
        match i {
            0 | 1 => Resp::error(503, "SlowDown"),
            2 => bind(),
            _ => done(req, &verbs),
        }
    });
    let c = client(&rt, &d.endpoint(), &p, retries(4, 80));
    let t = put(&c).unwrap();
    assert!(t.rdma);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 4, "two SlowDowns, the bind, the PUT");
    // A fresh token for each try (the bind's resend repeats its own).
    assert!(seen[0].1 != seen[1].1 && seen[1].1 != seen[2].1 && seen[0].1 != seen[2].1);
    assert_eq!(seen[2].1, seen[3].1);
    let (g1, g2) = (seen[1].0 - seen[0].0, seen[2].0 - seen[1].0);
    assert!(g1 >= Duration::from_millis(40), "first pause {g1:?}");
    assert!(g2 >= Duration::from_millis(80), "second pause {g2:?}");
}

#[test]
fn a_slowdown_that_does_not_end_fails_after_the_set_number_of_tries() {
    let rt = runtime();
    let p = FakePlatform::host_only();
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let d = start(&rt, move |req, _| {
        note(&s, req);
        Resp::error(503, "SlowDown")
    });
    let e = put(&client(&rt, &d.endpoint(), &p, retries(3, 10))).unwrap_err();
    assert_eq!(seen.lock().unwrap().len(), 3);
    assert!(e.to_string().contains("after 3 tries"), "{e}");
    assert_eq!(e.status(), Some(503));
}

#[test]
fn a_4xx_and_every_other_5xx_are_tried_once() {
    let rt = runtime();
    for (status, code) in [
        (400, "InvalidRequest"),
        (403, "AccessDenied"),
        (404, "NoSuchBucket"),
        (429, "TooManyRequests"),
        (500, "InternalError"),
        (502, "BadGateway"),
        (503, "ServiceUnavailable"),
        (504, "GatewayTimeout"),
    ] {
        let p = FakePlatform::host_only();
        let seen: Seen = Arc::default();
        let s = seen.clone();
        let d = start(&rt, move |req, _| {
            note(&s, req);
            Resp::error(status, code)
        });
        let e = put(&client(&rt, &d.endpoint(), &p, retries(4, 10))).unwrap_err();
        assert_eq!(seen.lock().unwrap().len(), 1, "HTTP {status} {code} was retried");
        assert_eq!(e.status(), Some(status));
    }
}

#[test]
fn a_connection_broken_after_the_request_went_out_is_not_retried() {
    let rt = runtime();
    let p = FakePlatform::host_only();
    let seen: Seen = Arc::default();
    let s = seen.clone();
    // The server read the request (it may have moved the bytes) and the
    // connection died before the answer.
    let d = start(&rt, move |req, _| {
        note(&s, req);
        Resp::new(0)
    });
    let e = put(&client(&rt, &d.endpoint(), &p, retries(4, 10))).unwrap_err();
    assert_eq!(seen.lock().unwrap().len(), 1, "retried: {e}");
    assert!(e.is_unreachable() && !e.never_sent(), "{e}");
}

#[test]
fn a_refused_connection_is_retried_until_the_server_listens() {
    let rt = runtime();
    let p = FakePlatform::host_only();
    let at = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let c = client(&rt, &format!("http://{at}"), &p, retries(6, 100));
    let verbs = p.verbs.clone();
    let got = std::thread::scope(|scope| {
        let server = scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(150));
            start_at(
                &rt,
                at,
                move |req, i| if i == 0 { bind() } else { done(req, &verbs) },
            )
        });
        let mut reg = c.hipobj().register(vec![0u8; 4096]).unwrap();
        let got = c.get_object(&mut reg, Span::whole(4096), "bkt", "obj", None);
        let d = server.join().unwrap();
        assert_eq!(d.requests().len(), 2, "bind and GET, once each");
        got
    });
    let t = got.unwrap();
    assert!(t.rdma && t.bytes == 4096, "{t:?}");
}
