//! Who may read the metrics (issue 39, finding 4): with `metrics_token` a
//! request without the bearer token gets `401` and learns nothing; with
//! `metrics_listen` they are on an address of their own and the S3 port's
//! `/.hipobj/metrics` is `404`.
#![allow(clippy::unwrap_used)]

mod support;

use hipobj_server::config_text::Secret;
use support::{raw, start};

/// `metrics_token`: without it a request learns nothing (`401`, no body);
/// with it, the metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_metrics_token_keeps_strangers_out() {
    let (h, _dir) = start(|c| c.metrics_token = Some(Secret("tok-123".into()))).await;
    for auth in [
        "",
        "Authorization: Bearer wrong\r\n",
        "Authorization: tok-123\r\n",
    ] {
        let (status, text) = raw(
            h.addr(),
            &format!("GET /.hipobj/metrics HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"),
        )
        .await;
        assert_eq!(status, 401, "{text}");
        assert!(!text.contains("hipobj_"), "{text}");
    }
    let (status, text) = raw(
        h.addr(),
        "GET /.hipobj/metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-123\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200);
    assert!(support::metrics::value(&text, "hipobj_http_requests_total").is_some());
    h.shutdown().await;
}

/// `metrics_listen`: the metrics are on their own address (`/metrics`),
/// and the S3 port's `/.hipobj/metrics` is `404` with nothing in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_listener_of_their_own_takes_the_metrics_off_the_s3_port() {
    let (h, _dir) = start(|c| {
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
        c.metrics_token = Some(Secret("tok-456".into()));
    })
    .await;
    let (status, text) = raw(
        h.addr(),
        "GET /.hipobj/metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-456\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 404, "{text}");
    assert!(!text.contains("hipobj_"), "{text}");
    let at = h.metrics_addr().expect("a metrics address");
    let (status, text) = raw(
        at,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 401, "{text}");
    assert!(!text.contains("hipobj_"), "{text}");
    let (status, text) = raw(
        at,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-456\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let m = support::metrics::parse(&text);
    assert!(m.value("hipobj_http_requests_total", &[]).is_some(), "{text}");
    let (status, _) = raw(at, "GET /other HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
    assert_eq!(status, 404);
    h.shutdown().await;
}
