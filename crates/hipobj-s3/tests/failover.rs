//! FailoverClient's policy against test doubles: which failures move a
//! call to the next endpoint (no response, a connection dropped mid-request,
//! 502/503/504) and which are returned at once (the request's own errors),
//! that the client stays where a call succeeded, and the attempt limit.
//! The real thing, gateways killed during RDMA transfers, is
//! hipobj-server's tests/failover.rs.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use hipobj_platform::fake::FakePlatform;
use hipobj_s3::{FailoverClient, RdmaS3Client, RetryPolicy, Span};
use support::{Resp, runtime, sdk, start};
use tokio::io::AsyncReadExt;

fn object() -> Vec<u8> {
    (0..1000u32).map(|i| (i * 13 % 251) as u8).collect()
}

/// A gateway double: declines RDMA (so calls move the bytes over HTTP),
/// serves `obj`, answers 404 for anything else.
fn gateway(rt: &tokio::runtime::Runtime) -> support::Double {
    start(rt, |req, _| {
        if req.token().is_some() {
            Resp::error(501, "NotImplemented").header(hipobj_proto::REPLY_HEADER, "501")
        } else if req.target.starts_with("/bkt/obj") {
            Resp::new(200).header("etag", "\"e\"").body(object())
        } else {
            Resp::error(404, "NoSuchKey")
        }
    })
}

/// A port nobody listens on.
fn dead() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    url
}

/// A server that reads each request's first bytes and closes the
/// connection without answering, as a gateway killed mid-request does.
fn dropper(rt: &tokio::runtime::Runtime) -> String {
    let l = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    rt.spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let mut buf = [0u8; 64];
            let _ = s.read(&mut buf).await;
            drop(s);
        }
    });
    url
}

fn hipobj_client(p: &FakePlatform) -> hipobj::Client {
    hipobj::Client::builder(p.platform())
        .nic_hint("fake0")
        .build()
        .unwrap()
}

fn failover(rt: &tokio::runtime::Runtime, h: &hipobj::Client, urls: &[String]) -> FailoverClient {
    let eps = urls
        .iter()
        .map(|u| RdmaS3Client::new(sdk(u), h.clone(), rt.handle().clone()))
        .collect();
    FailoverClient::new(eps).unwrap().policy(RetryPolicy {
        attempts: None,
        backoff: Duration::ZERO,
    })
}

#[test]
fn a_dead_or_dropping_endpoint_moves_the_call_on_and_the_client_stays_there() {
    let rt = runtime();
    let p = FakePlatform::host_only();
    let h = hipobj_client(&p);
    let live = gateway(&rt);
    let fo = failover(&rt, &h, &[dead(), dropper(&rt), live.endpoint()]);
    let mut buf = vec![0u8; 4096];
    let mut reg = h.register(std::mem::take(&mut buf)).unwrap();

    let s = fo
        .get_object(&mut reg, Span::whole(4096), "bkt", "obj", None)
        .unwrap();
    assert_eq!(s.endpoint, 2);
    assert_eq!(&reg.to_vec()[..1000], &object()[..]);
    let tried: Vec<(usize, bool)> = s.failed.iter().map(|(i, e)| (*i, e.is_unreachable())).collect();
    assert_eq!(tried, [(0, true), (1, true)], "{:?}", s.failed);
    assert_eq!(fo.current(), 2);

    // The next call goes straight to the endpoint that worked.
    let before = live.requests().len();
    let s = fo
        .get_object(&mut reg, Span::whole(4096), "bkt", "obj", None)
        .unwrap();
    assert!(s.endpoint == 2 && s.failed.is_empty());
    // The endpoint declined RDMA on the first call, and that choice is
    // remembered per endpoint (hipobj-s3's negotiation): one plain GET.
    assert_eq!(
        live.requests().len(),
        before + 1,
        "one plain GET, no token request"
    );

    // A clone keeps its own place: starting_at spreads clients.
    let other = fo.clone().starting_at(4);
    assert_eq!((other.current(), fo.current()), (1, 2));
}

#[test]
fn the_requests_own_errors_are_returned_at_once() {
    let rt = runtime();
    let p = FakePlatform::host_only();
    let h = hipobj_client(&p);
    let (a, b) = (gateway(&rt), gateway(&rt));
    let fo = failover(&rt, &h, &[a.endpoint(), b.endpoint()]);
    let mut buf = vec![0u8; 16];
    let mut reg = h.register(std::mem::take(&mut buf)).unwrap();
    let e = fo
        .get_object(&mut reg, Span::whole(16), "bkt", "missing", None)
        .unwrap_err();
    assert_eq!((e.status(), e.s3_code()), (Some(404), Some("NoSuchKey")), "{e}");
    assert!(!e.may_fail_over());
    assert!(b.requests().is_empty(), "a 404 was sent to another endpoint");
    assert_eq!(fo.current(), 0);
}

#[test]
fn busy_gateways_fail_over_and_the_attempt_limit_holds() {
    let rt = runtime();
    let p = FakePlatform::host_only();
    let h = hipobj_client(&p);
    let busy = start(&rt, |_, _| Resp::error(503, "SlowDown"));
    let live = gateway(&rt);
    let fo = failover(&rt, &h, &[busy.endpoint(), live.endpoint()]);
    let mut buf = vec![0u8; 4096];
    let mut reg = h.register(std::mem::take(&mut buf)).unwrap();
    let s = fo
        .get_object(&mut reg, Span::whole(4096), "bkt", "obj", None)
        .unwrap();
    assert_eq!(s.endpoint, 1);
    assert_eq!(s.failed[0].1.status(), Some(503));

    // One attempt: the dead endpoint's error comes back as it is.
    let one = failover(&rt, &h, &[dead(), live.endpoint()]).policy(RetryPolicy {
        attempts: Some(1),
        backoff: Duration::ZERO,
    });
    let e = one
        .get_object(&mut reg, Span::whole(4096), "bkt", "obj", None)
        .unwrap_err();
    assert!(e.is_unreachable() && e.may_fail_over(), "{e}");
    assert_eq!(one.current(), 1, "the next call starts at the next endpoint");

    // Every endpoint down: the last error, naming the earlier tries.
    let none = failover(&rt, &h, &[dead(), dead()]);
    let e = none.put_object(&reg, Span::whole(100), "bkt", "obj").unwrap_err();
    assert!(e.is_unreachable(), "{e}");
    assert!(e.to_string().contains("after 1 failed tries: endpoint 0:"), "{e}");
    assert!(FailoverClient::new(Vec::new()).is_err());
}
