//! The metrics an operator's Prometheus reads (issue 39, finding 4), read
//! through the `prometheus-parse` crate: requests by operation and status,
//! latency by operation, HTTP bytes by direction, connections, limits, the
//! data directory's free space; and a label set that no client can grow
//! (tests/metrics_access.rs: who may read them).
#![allow(clippy::unwrap_used)]

mod support;

use aws_sdk_s3::primitives::ByteStream;
use support::{client, raw, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_are_counted_by_operation_and_status_with_latency_and_bytes() {
    let (h, _dir) = start(|_| {}).await;
    let s3 = client(&h);
    s3.create_bucket().bucket("counted").send().await.unwrap();
    let body = vec![7u8; 3000];
    s3.put_object()
        .bucket("counted")
        .key("k")
        .body(ByteStream::from(body.clone()))
        .send()
        .await
        .unwrap();
    for _ in 0..2 {
        let got = s3.get_object().bucket("counted").key("k").send().await.unwrap();
        assert_eq!(got.body.collect().await.unwrap().into_bytes().len(), 3000);
    }
    let e = s3.get_object().bucket("counted").key("absent").send().await;
    assert_eq!(support::code(&e.unwrap_err()), "NoSuchKey");

    let m = support::metrics::scrape(h.addr()).await;
    let req = |op: &str, status: &str| {
        m.value(
            "hipobj_s3_requests_total",
            &[("operation", op), ("status", status)],
        )
    };
    assert_eq!(req("CreateBucket", "200"), Some(1.0));
    assert_eq!(req("PutObject", "200"), Some(1.0));
    assert_eq!(req("GetObject", "200"), Some(2.0));
    assert_eq!(req("GetObject", "404"), Some(1.0));
    assert_eq!(
        m.value(
            "hipobj_s3_request_duration_seconds_count",
            &[("operation", "GetObject")]
        ),
        Some(3.0)
    );
    let histogram = m
        .samples("hipobj_s3_request_duration_seconds")
        .find(|s| s.labels.get("operation") == Some("PutObject"))
        .expect("a PutObject latency histogram");
    assert!(matches!(&histogram.value, prometheus_parse::Value::Histogram(b) if b.len() > 5));
    let bytes_in = m
        .value("hipobj_http_bytes_total", &[("direction", "in")])
        .unwrap();
    let bytes_out = m
        .value("hipobj_http_bytes_total", &[("direction", "out")])
        .unwrap();
    assert!(bytes_in >= 3000.0, "{bytes_in}");
    assert!(bytes_out >= 6000.0, "{bytes_out}");
    // The rest of what an operator watches is there too.
    let free = m.value("hipobj_store_disk_free_bytes", &[]).unwrap();
    assert!(free > 0.0);
    assert!(m.value("hipobj_store_disk_size_bytes", &[]).unwrap() >= free);
    assert!(m.value("hipobj_http_connections", &[]).unwrap() >= 1.0);
    assert_eq!(
        m.value(
            "hipobj_limits_hit_total",
            &[("limit", "max_connections_per_address")]
        ),
        Some(0.0)
    );
    assert_eq!(
        m.value("hipobj_rdma_bytes_total", &[("direction", "out")]),
        Some(0.0)
    );
    for name in [
        "hipobj_http_requests_total",
        "hipobj_rdma_gets_total",
        "hipobj_http_connections_closed_for_room_total",
        "hipobj_store_metadata_refusals_total",
    ] {
        assert!(m.value(name, &[]).is_some(), "{name} kept its name");
    }
    assert!(
        m.value("hipobj_server_cpu_seconds_total", &[("role", "s3")])
            .is_some()
    );
    h.shutdown().await;
}

/// A stranger sending requests for ever new buckets and keys (and made-up
/// subresources, methods and paths) adds no series: no label holds a name
/// a client chose.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_buckets_and_keys_do_not_grow_the_series_count() {
    let (h, _dir) = start(|_| {}).await;
    let s3 = client(&h);
    let round = |n: usize| {
        let s3 = s3.clone();
        let addr = h.addr();
        async move {
            for i in 0..n {
                let b = format!("bucket-{n}-{i}");
                let _ = s3.head_bucket().bucket(&b).send().await;
                let _ = s3.get_object().bucket(&b).key(format!("key-{i}")).send().await;
                let req = format!("GET /{b}/k{i}?x{i}=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                let _ = raw(addr, &req).await;
                let req = format!("M{i}X /{b} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                let _ = raw(addr, &req).await;
            }
        }
    };
    let series = |text: &str| {
        let m = support::metrics::parse(text);
        let n = m.samples("hipobj_s3_requests_total").count();
        for s in m.all() {
            for v in s.labels.values() {
                let chosen =
                    v.contains("bucket-") || v.contains("key-") || (v.starts_with('M') && v.ends_with('X'));
                assert!(!chosen, "a client's name became a label: {s:?}");
            }
        }
        n
    };
    round(5).await;
    let first = series(&support::metrics::text(h.addr()).await);
    assert!(first > 0, "no hipobj_s3_requests_total series");
    round(200).await;
    let text = support::metrics::text(h.addr()).await;
    let later = series(&text);
    assert!(later <= first + 1, "{first} series, then {later}:\n{text}");
    assert!(later < 20, "{text}");
    h.shutdown().await;
}
