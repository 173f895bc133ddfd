//! Streaming uploads. PUTs whose body is `Transfer-Encoding: chunked` with
//! no length (a stream of unknown size): stored byte for byte, the signed
//! payload hash still checked, and the memory they take bounded per body
//! and for all of them, against a stranger who opens many such uploads at
//! once. And `Expect: 100-continue`: the body is asked for only when the
//! request can succeed.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use sha2::{Digest, Sha256};
use support::sigv4;
use support::wire::{connect_from, metric, metrics, read_response, request_from};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const KEY: (&str, &str) = (support::AK, support::SK);

fn ip(last: u8) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(127, 0, 0, last)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// HTTP/1.1 chunked encoding of `data` in pieces of `piece` bytes, with
/// the last chunk.
fn chunked(data: &[u8], piece: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for c in data.chunks(piece) {
        out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        out.extend_from_slice(c);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// A signed PUT of `path` whose payload hash is `payload`, its body sent
/// chunked without Content-Length.
fn put_head(path: &str, payload: &str) -> Vec<u8> {
    let s = sigv4::sign("PUT", path, "127.0.0.1", payload, &[], KEY);
    s.head("PUT", path, &[("transfer-encoding", "chunked".into())])
        .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_chunked_body_without_a_length_is_stored_exactly_and_its_hash_checked() {
    let (h, dir) = support::start(|c| c.http.unsized_body_limit = 1 << 20).await;
    let c = support::client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let data = support::pattern(300_001, 3);
    let sha = hex(&Sha256::digest(&data));
    for (key, payload) in [("signed", sha.as_str()), ("unsigned", "UNSIGNED-PAYLOAD")] {
        let mut req = put_head(&format!("/bkt/{key}"), payload);
        req.extend_from_slice(&chunked(&data, 7000));
        let r = request_from(ip(2), h.addr(), &req, Duration::from_secs(20))
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{key}: {}", String::from_utf8_lossy(&r.body));
        let got = c.get_object().bucket("bkt").key(key).send().await.unwrap();
        let got = got.body.collect().await.unwrap().into_bytes();
        assert_eq!(got.as_ref(), &data[..], "{key}");
    }
    // The signed hash of other bytes: refused, nothing stored.
    let mut req = put_head("/bkt/forged", &sha);
    let mut other = data.clone();
    other[150_000] ^= 1;
    req.extend_from_slice(&chunked(&other, 7000));
    let r = request_from(ip(2), h.addr(), &req, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    assert!(c.head_object().bucket("bkt").key("forged").send().await.is_err());
    // Past the limit of one body: 411 MissingContentLength, nothing stored.
    let big = support::pattern((1 << 20) + 1, 4);
    let mut req = put_head("/bkt/big", "UNSIGNED-PAYLOAD");
    req.extend_from_slice(&chunked(&big, 64 << 10));
    let r = request_from(ip(2), h.addr(), &req, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(r.status, 411, "{}", String::from_utf8_lossy(&r.body));
    assert!(String::from_utf8_lossy(&r.body).contains("<Code>MissingContentLength</Code>"));
    assert!(c.head_object().bucket("bkt").key("big").send().await.is_err());
    assert!(support::files(&dir.path().join(".tmp")).is_empty());
    h.shutdown().await;
}

/// The attacker opens uploads without a length and never finishes them:
/// the bytes the server holds for them stop at the budget, the next one is
/// told to slow down (503) at once instead of being held too, and an
/// honest upload goes through as soon as the attacker's are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn held_bodies_stop_at_the_budget_for_a_stranger_with_many_sockets() {
    let (h, _dir) = support::start(|c| {
        c.http.unsized_body_limit = 1 << 20;
        c.http.unsized_body_budget = 2 << 20;
        c.anonymous = true;
    })
    .await;
    let c = support::client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    // Three unsigned bodies of 900 KiB each, not ended: two fit.
    let piece = support::pattern(900 << 10, 5);
    let mut attackers = Vec::new();
    for i in 0..3u8 {
        let mut s = connect_from(ip(20 + i), h.addr()).await.unwrap();
        let head = format!(
            "PUT /bkt/a{i} HTTP/1.1\r\nHost: 127.0.0.1\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(format!("{:x}\r\n", piece.len()).as_bytes())
            .await
            .unwrap();
        s.write_all(&piece).await.unwrap();
        s.write_all(b"\r\n").await.unwrap();
        attackers.push(s);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut third = attackers.pop().unwrap();
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        read_response(&mut third, &mut Vec::new()),
    )
    .await
    .expect("the third body is answered at once")
    .unwrap();
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    assert!(String::from_utf8_lossy(&r.body).contains("<Code>SlowDown</Code>"));
    // An honest upload without a length meets the same full budget...
    let data = support::pattern(600 << 10, 6);
    let honest = || {
        let mut req = put_head("/bkt/honest", "UNSIGNED-PAYLOAD");
        req.extend_from_slice(&chunked(&data, 32 << 10));
        req
    };
    let r = request_from(ip(3), h.addr(), &honest(), Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(r.status, 503);
    // ...and goes through once the attacker's connections are gone.
    drop(attackers);
    drop(third);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = request_from(ip(3), h.addr(), &honest(), Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let got = c.get_object().bucket("bkt").key("honest").send().await.unwrap();
    assert_eq!(got.body.collect().await.unwrap().into_bytes().as_ref(), &data[..]);
    for i in 0..3 {
        let key = format!("a{i}");
        assert!(
            c.head_object().bucket("bkt").key(&key).send().await.is_err(),
            "{key}"
        );
    }
    let m = metrics(h.addr()).await;
    assert_eq!(metric(&m, "hipobj_http_unsized_bodies_refused_total"), 2, "{m}");
    h.shutdown().await;
}

/// `Expect: 100-continue`: a PUT that cannot succeed (no such bucket) is
/// answered before its body is sent, one that can gets `100 Continue`, and
/// then its body is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn expect_100_continue_asks_for_the_body_only_when_it_can_be_stored() {
    let (h, _dir) = support::start(|_| {}).await;
    let c = support::client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let data = support::pattern(100_000, 8);
    for (path, want_continue) in [("/nobucket/k", false), ("/bkt/k", true)] {
        let s = sigv4::sign("PUT", path, "127.0.0.1", "UNSIGNED-PAYLOAD", &[], KEY);
        let head = s.head(
            "PUT",
            path,
            &[
                ("content-length", data.len().to_string()),
                ("expect", "100-continue".into()),
            ],
        );
        let mut conn = connect_from(ip(4), h.addr()).await.unwrap();
        conn.write_all(head.as_bytes()).await.unwrap();
        let mut first = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut first))
            .await
            .expect("an answer before the body")
            .unwrap();
        let line = String::from_utf8_lossy(&first[..n])
            .lines()
            .next()
            .unwrap_or("")
            .to_owned();
        if want_continue {
            assert_eq!(line, "HTTP/1.1 100 Continue", "{path}");
            conn.write_all(&data).await.unwrap();
            let mut rest = first[n..n].to_vec();
            let r = read_response(&mut conn, &mut rest).await.unwrap();
            assert_eq!(r.status, 200, "{path}: {}", String::from_utf8_lossy(&r.body));
        } else {
            assert!(line.starts_with("HTTP/1.1 404"), "{path}: {line}");
        }
    }
    let got = c.get_object().bucket("bkt").key("k").send().await.unwrap();
    assert_eq!(got.body.collect().await.unwrap().into_bytes().as_ref(), &data[..]);
    h.shutdown().await;
}
