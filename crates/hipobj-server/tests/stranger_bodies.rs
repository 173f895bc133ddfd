//! Issue 37, finding 6: a chunked PUT without a length is held in memory
//! (crate::unsized_body) only once its signature verifies. A made-up
//! Authorization (an unknown key, or a known key with a wrong signature)
//! gets its 403 before the server reads a byte of the body, so strangers
//! cannot hold the memory that other users' streaming uploads need.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use support::sigv4;
use support::wire::{closed_within, connect_from, metric, metrics, read_response, request_from};
use tokio::io::AsyncWriteExt;

const KEY: (&str, &str) = (support::AK, support::SK);

fn ip(last: u8) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(127, 0, 0, last)
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

/// The head of a PUT of `path` with a chunked body and no length, signed
/// with `key` over the payload hash `payload`, its signature replaced by
/// `signature` when given.
fn head(path: &str, payload: &str, key: (&str, &str), signature: Option<&str>) -> String {
    let s = sigv4::sign("PUT", path, "127.0.0.1", payload, &[], key);
    let text = s.head("PUT", path, &[("transfer-encoding", "chunked".into())]);
    match signature {
        Some(sig) => text.replace(&format!("Signature={}", s.signature), &format!("Signature={sig}")),
        None => text,
    }
}

/// The `<Code>` of an S3 error body.
fn code(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    text.split("<Code>")
        .nth(1)
        .and_then(|r| r.split("</Code>").next())
        .unwrap_or("")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stranger_is_refused_before_a_byte_of_the_body_is_read() {
    let (h, _dir) = support::start(|_| {}).await;
    let c = support::client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let zero = "0".repeat(64);
    let streaming = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
    let cases = [
        // A made-up key with a zero signature, as in the finding.
        (
            head("/bkt/a", "UNSIGNED-PAYLOAD", ("STRANGER", "x"), Some(&zero)),
            "InvalidAccessKeyId",
        ),
        // A made-up key with a well-formed signature of its own.
        (
            head("/bkt/b", "UNSIGNED-PAYLOAD", ("STRANGER", "x"), None),
            "InvalidAccessKeyId",
        ),
        // A known key, signed with another secret, and with zeros.
        (
            head("/bkt/c", "UNSIGNED-PAYLOAD", (KEY.0, "wrong"), None),
            "SignatureDoesNotMatch",
        ),
        (
            head("/bkt/d", "UNSIGNED-PAYLOAD", KEY, Some(&zero)),
            "SignatureDoesNotMatch",
        ),
        // The seed of an aws-chunked stream, signed with another secret.
        (
            head("/bkt/e", streaming, (KEY.0, "wrong"), None),
            "SignatureDoesNotMatch",
        ),
    ];
    for (i, (head, want)) in cases.iter().enumerate() {
        let mut s = connect_from(ip(30), h.addr()).await.unwrap();
        s.write_all(head.as_bytes()).await.unwrap();
        // The body is never sent: the answer must come without it.
        let r = tokio::time::timeout(Duration::from_secs(5), read_response(&mut s, &mut Vec::new()))
            .await
            .unwrap_or_else(|_| panic!("case {i}: no answer while the body was unsent"))
            .unwrap();
        assert_eq!(r.status, 403, "case {i}: {}", String::from_utf8_lossy(&r.body));
        assert_eq!(code(&r.body), *want, "case {i}");
        assert!(r.header("x-amz-request-id").is_some(), "case {i}");
        assert!(
            closed_within(&mut s, Duration::from_secs(5)).await,
            "case {i}: the connection stays open"
        );
    }
    for k in ["a", "b", "c", "d", "e"] {
        assert!(c.head_object().bucket("bkt").key(k).send().await.is_err(), "{k}");
    }
    let m = metrics(h.addr()).await;
    assert_eq!(metric(&m, "hipobj_http_unsized_bodies_refused_total"), 5, "{m}");
    h.shutdown().await;
}

/// The finding's attack, scaled down: strangers from one address send
/// bodies of most of the budget behind made-up signatures while a user
/// streams an upload of most of the budget. The strangers hold nothing,
/// and the user's upload is stored whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn strangers_hold_none_of_the_budget_a_users_streaming_put_needs() {
    let (h, _dir) = support::start(|c| {
        c.http.unsized_body_limit = 4 << 20;
        c.http.unsized_body_budget = 4 << 20;
    })
    .await;
    let c = support::client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let zero = "0".repeat(64);
    let junk = vec![b'j'; 3 << 20];
    let mut strangers = Vec::new();
    for i in 0..8u8 {
        let key = if i % 2 == 0 {
            ("STRANGER", "x")
        } else {
            (KEY.0, "wrong")
        };
        let head = head(&format!("/bkt/junk{i}"), "UNSIGNED-PAYLOAD", key, Some(&zero));
        let mut s = connect_from(ip(40), h.addr()).await.unwrap();
        s.write_all(head.as_bytes()).await.unwrap();
        // Most of the budget, not ended; the server may close at any time.
        let mut body = format!("{:x}\r\n", junk.len()).into_bytes();
        body.extend_from_slice(&junk);
        let _ = tokio::time::timeout(Duration::from_secs(2), s.write_all(&body)).await;
        strangers.push(s);
    }
    let data = support::pattern(3 << 20, 9);
    let s = sigv4::sign("PUT", "/bkt/honest", "127.0.0.1", "UNSIGNED-PAYLOAD", &[], KEY);
    let mut req = s
        .head("PUT", "/bkt/honest", &[("transfer-encoding", "chunked".into())])
        .into_bytes();
    req.extend_from_slice(&chunked(&data, 64 << 10));
    let r = request_from(ip(41), h.addr(), &req, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let got = c.get_object().bucket("bkt").key("honest").send().await.unwrap();
    assert_eq!(got.body.collect().await.unwrap().into_bytes().as_ref(), &data[..]);
    for i in 0..8 {
        let key = format!("junk{i}");
        assert!(
            c.head_object().bucket("bkt").key(&key).send().await.is_err(),
            "{key}"
        );
    }
    drop(strangers);
    h.shutdown().await;
}

/// A presigned PUT streamed without a length (`curl -T - <url>`): held
/// and stored when its query signature verifies; refused before its body
/// when the signature is another's or the key is unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_presigned_put_without_a_length_is_held_only_with_a_signature_that_verifies() {
    use aws_sdk_s3::presigning::PresigningConfig;
    let (h, _dir) = support::start(|_| {}).await;
    let c = support::client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let stranger = support::client_for(&h.endpoint(), "STRANGER", "x");
    let presign = |client: aws_sdk_s3::Client, key: &'static str| async move {
        let p = client
            .put_object()
            .bucket("bkt")
            .key(key)
            .presigned(PresigningConfig::expires_in(Duration::from_secs(300)).unwrap())
            .await
            .unwrap();
        let uri: http::Uri = p.uri().parse().unwrap();
        uri.path_and_query().unwrap().as_str().to_owned()
    };
    let host = h.addr().to_string();
    let head =
        |target: &str| format!("PUT {target} HTTP/1.1\r\nhost: {host}\r\ntransfer-encoding: chunked\r\n\r\n");
    let data = support::pattern(200_000, 12);
    let mut req = head(&presign(c.clone(), "pre").await).into_bytes();
    req.extend_from_slice(&chunked(&data, 10_000));
    let r = request_from(ip(50), h.addr(), &req, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let got = c.get_object().bucket("bkt").key("pre").send().await.unwrap();
    assert_eq!(got.body.collect().await.unwrap().into_bytes().as_ref(), &data[..]);

    let signed = presign(c.clone(), "forged").await;
    let at = signed.find("X-Amz-Signature=").unwrap() + "X-Amz-Signature=".len();
    let forged = format!("{}{}{}", &signed[..at], "0".repeat(64), &signed[at + 64..]);
    for (target, want) in [
        (forged, "SignatureDoesNotMatch"),
        (presign(stranger, "stranger").await, "InvalidAccessKeyId"),
    ] {
        let mut s = connect_from(ip(51), h.addr()).await.unwrap();
        s.write_all(head(&target).as_bytes()).await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(5), read_response(&mut s, &mut Vec::new()))
            .await
            .unwrap_or_else(|_| panic!("{want}: no answer while the body was unsent"))
            .unwrap();
        assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(code(&r.body), want);
    }
    for k in ["forged", "stranger"] {
        assert!(c.head_object().bucket("bkt").key(k).send().await.is_err(), "{k}");
    }
    h.shutdown().await;
}

/// The head's signature is checked as s3s checks it, so a user's streaming
/// bodies still go through: a part (a query string to canonicalize) and a
/// key with characters the path encodes, presigned and sent without a
/// length.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn streamed_parts_and_encoded_keys_with_a_good_signature_are_stored() {
    use aws_sdk_s3::presigning::PresigningConfig;
    let (h, _dir) = support::start(|_| {}).await;
    let c = support::client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let conf = || PresigningConfig::expires_in(Duration::from_secs(300)).unwrap();
    let target = |uri: &str| {
        let uri: http::Uri = uri.parse().unwrap();
        uri.path_and_query().unwrap().as_str().to_owned()
    };
    let host = h.addr().to_string();
    let send = |target: String, data: Vec<u8>| {
        let mut req = format!("PUT {target} HTTP/1.1\r\nhost: {host}\r\ntransfer-encoding: chunked\r\n\r\n")
            .into_bytes();
        req.extend_from_slice(&chunked(&data, 50_000));
        let addr = h.addr();
        async move {
            request_from(ip(60), addr, &req, Duration::from_secs(20))
                .await
                .unwrap()
        }
    };

    let key = "dir/a key+with=odd chars é.bin";
    let data = support::pattern(150_000, 21);
    let p = c
        .put_object()
        .bucket("bkt")
        .key(key)
        .presigned(conf())
        .await
        .unwrap();
    let r = send(target(p.uri()), data.clone()).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let got = c.get_object().bucket("bkt").key(key).send().await.unwrap();
    assert_eq!(got.body.collect().await.unwrap().into_bytes().as_ref(), &data[..]);

    let up = c
        .create_multipart_upload()
        .bucket("bkt")
        .key("mp")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap().to_owned();
    let part = support::pattern(5 << 20, 22);
    let p = c
        .upload_part()
        .bucket("bkt")
        .key("mp")
        .upload_id(&id)
        .part_number(1)
        .presigned(conf())
        .await
        .unwrap();
    let r = send(target(p.uri()), part.clone()).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let etag = r.header("etag").unwrap().to_owned();
    let done = aws_sdk_s3::types::CompletedMultipartUpload::builder()
        .parts(
            aws_sdk_s3::types::CompletedPart::builder()
                .part_number(1)
                .e_tag(etag)
                .build(),
        )
        .build();
    c.complete_multipart_upload()
        .bucket("bkt")
        .key("mp")
        .upload_id(&id)
        .multipart_upload(done)
        .send()
        .await
        .unwrap();
    let got = c.get_object().bucket("bkt").key("mp").send().await.unwrap();
    assert_eq!(got.body.collect().await.unwrap().into_bytes().as_ref(), &part[..]);
    h.shutdown().await;
}
