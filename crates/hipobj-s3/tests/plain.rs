//! Plain-HTTP transfers through several gateways (`PlainFailover` with
//! `hipobj_s3::plain`), what a client with no RDMA at all runs: a gateway
//! that dies while it sends a GetObject body hands the call to the next
//! one, which sends the whole object; the request's own errors (a missing
//! key, a body longer than the buffer) stay where they happened.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use hipobj_s3::{PlainFailover, RetryPolicy, plain};
use support::{Resp, runtime, sdk, start};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn object() -> Vec<u8> {
    (0..1000u32).map(|i| (i * 7 % 251) as u8).collect()
}

/// A gateway double that serves `/bkt/obj` and answers 404 for the rest.
fn gateway(rt: &tokio::runtime::Runtime) -> support::Double {
    start(rt, |req, _| {
        if req.target.starts_with("/bkt/obj") {
            Resp::new(200).header("etag", "\"e\"").body(object())
        } else {
            Resp::error(404, "NoSuchKey")
        }
    })
}

/// A gateway that answers 200 with a 1000-byte Content-Length, sends the
/// first 100 bytes of the object and closes: one killed mid-body.
fn cut_off(rt: &tokio::runtime::Runtime) -> String {
    let l = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    rt.spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let mut out = b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\netag: \"e\"\r\n\r\n".to_vec();
            out.extend_from_slice(&object()[..100]);
            let _ = s.write_all(&out).await;
            drop(s);
        }
    });
    url
}

fn gateways(urls: &[String]) -> PlainFailover {
    PlainFailover::new(urls.iter().map(|u| sdk(u)).collect())
        .unwrap()
        .policy(RetryPolicy {
            attempts: None,
            backoff: Duration::ZERO,
        })
}

/// GetObject of `key` into `dst` through `gw`.
fn get(
    rt: &tokio::runtime::Runtime,
    gw: &PlainFailover,
    key: &str,
    dst: &mut [u8],
) -> Result<hipobj_s3::Served<u64>, hipobj_s3::Failed> {
    gw.try_each(|s3| {
        let got = plain::get_object(s3, "bkt", key, None, |at, chunk| {
            let slot = dst.get_mut(at..at + chunk.len()).ok_or_else(|| {
                hipobj_s3::Error::new(hipobj::ErrorKind::SizeTooLarge, "longer than the buffer")
            })?;
            slot.copy_from_slice(chunk);
            Ok(())
        });
        Ok(rt.block_on(got)?.bytes)
    })
}

#[test]
fn a_get_whose_body_breaks_off_is_sent_again_to_the_next_gateway() {
    let rt = runtime();
    let live = gateway(&rt);
    let gw = gateways(&[cut_off(&rt), live.endpoint()]);
    let mut dst = vec![0u8; 1000];
    let served = get(&rt, &gw, "obj", &mut dst).unwrap();
    assert_eq!(served.value, 1000);
    assert_eq!(served.endpoint, 1);
    assert_eq!(served.failed.len(), 1, "{:?}", served.failed);
    let (at, e) = &served.failed[0];
    assert_eq!(*at, 0);
    assert!(e.may_fail_over() && !e.is_unreachable(), "{e:?}");
    assert!(dst == object(), "the bytes are not the object's");
    // The client stays where the call was served.
    assert_eq!(gw.current(), 1);
    assert_eq!(live.requests().len(), 1);
}

#[test]
fn the_requests_own_errors_stay_on_the_gateway_that_gave_them() {
    let rt = runtime();
    let (first, second) = (gateway(&rt), gateway(&rt));
    let gw = gateways(&[first.endpoint(), second.endpoint()]);
    let mut dst = vec![0u8; 1000];
    let f = get(&rt, &gw, "missing", &mut dst).unwrap_err();
    assert_eq!(f.error.status(), Some(404), "{:?}", f.error);
    assert_eq!((f.endpoint, f.failed.len()), (0, 0));
    // A body longer than the buffer: the writer's error, at once.
    let mut small = vec![0u8; 999];
    let f = get(&rt, &gw, "obj", &mut small).unwrap_err();
    assert_eq!(f.error.kind(), hipobj::ErrorKind::SizeTooLarge);
    assert_eq!((f.endpoint, f.failed.len()), (0, 0));
    assert!(
        second.requests().is_empty(),
        "a request went to the second gateway"
    );
    assert_eq!(gw.current(), 0);
}
