//! A token never harms a server that ignores it (issue 38, finding 1): a
//! PutObject that carries a token has no body, so a plain S3 server that
//! took it would replace the object with an empty one (in a versioned
//! bucket, add an empty version). Against a minimal plain S3 server with
//! an existing object, in a versioned and an unversioned bucket, a put with
//! fallback off leaves the object as it was, and a put with fallback
//! replaces it in full; no empty object or version exists at any point, and
//! no write that carries a token reaches the server.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hipobj_platform::fake::FakePlatform;
use hipobj_s3::{Protocol, RdmaS3Client, Span};
use support::{Req, Resp, runtime, sdk, start};

/// Every version of every key, oldest first; an unversioned bucket keeps
/// one.
type Store = Arc<Mutex<HashMap<String, Vec<Vec<u8>>>>>;

/// A plain S3 server: PUT stores the body (whatever headers came with it,
/// as a server that does not know the protocol does), GET and HEAD read the
/// newest version, with a Range.
fn plain_s3(store: Store, versioned: bool) -> impl Fn(&Req, usize) -> Resp + Send + Sync + 'static {
    move |req: &Req, _| {
        let path = req.target.split('?').next().unwrap_or("").to_owned();
        let mut s = store.lock().unwrap();
        match req.method.as_str() {
            "PUT" => {
                let versions = s.entry(path).or_default();
                if !versioned {
                    versions.clear();
                }
                versions.push(req.body.clone());
                Resp::new(200).header("etag", format!("\"v{}\"", versions.len()))
            }
            "GET" | "HEAD" => {
                let Some(obj) = s.get(&path).and_then(|v| v.last()) else {
                    return Resp::error(404, "NoSuchKey");
                };
                let range = req
                    .header("range")
                    .and_then(|r| r.strip_prefix("bytes="))
                    .and_then(|r| r.split_once('-'))
                    .map(|(a, b)| (a.parse::<usize>().unwrap(), b.parse::<usize>().unwrap()));
                match range {
                    None => Resp::new(200).body(obj.clone()),
                    Some((a, _)) if a >= obj.len() => Resp::error(416, "InvalidRange"),
                    Some((a, b)) => {
                        let b = b.min(obj.len() - 1);
                        Resp::new(206)
                            .header("content-range", format!("bytes {a}-{b}/{}", obj.len()))
                            .body(obj[a..=b].to_vec())
                    }
                }
            }
            _ => Resp::error(405, "MethodNotAllowed"),
        }
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed ^ (i >> 9) as u8)
        .collect()
}

fn check(versioned: bool) {
    let rt = runtime();
    let store: Store = Arc::default();
    let old = pattern(100 << 10, 1);
    store.lock().unwrap().insert("/bkt/obj".into(), vec![old.clone()]);
    let d = start(&rt, plain_s3(store.clone(), versioned));
    let p = FakePlatform::host_only();
    let h = hipobj::Client::builder(p.platform())
        .nic_hint("fake0")
        .build()
        .unwrap();
    let versions = |key: &str| store.lock().unwrap().get(key).cloned().unwrap_or_default();
    // Compared whole, reported by length (the bytes would flood the log).
    let same = |key: &str, want: &[Vec<u8>], what: &str| {
        let got = versions(key);
        let lens = |v: &[Vec<u8>]| v.iter().map(Vec::len).collect::<Vec<_>>();
        assert!(
            got == want,
            "{what}: versions of {key} by length {:?}, want {:?}",
            lens(&got),
            lens(want)
        );
    };
    let new = pattern(64 << 10, 2);
    let reg = h.register(new.clone()).unwrap();

    // Fallback off (`hipobj put --require-rdma`): an error, nothing stored.
    let strict = RdmaS3Client::new(sdk(&d.endpoint()), h.clone(), rt.handle().clone()).fallback(false);
    let e = strict
        .put_object(&reg, Span::whole(new.len()), "bkt", "obj")
        .unwrap_err();
    assert!(e.is_declined(), "{e}");
    same("/bkt/obj", std::slice::from_ref(&old), "the object changed");
    assert!(matches!(strict.protocol(), Protocol::Plain(_)));
    // Sent again on the client that remembers the endpoint: the same.
    assert!(
        strict
            .put_object(&reg, Span::whole(new.len()), "bkt", "obj")
            .is_err()
    );
    let e = strict
        .upload_part(&reg, Span::whole(new.len()), "bkt", "obj", "up1", 1)
        .unwrap_err();
    assert!(e.is_declined(), "{e}");
    // A new key is not created either.
    let fresh = RdmaS3Client::new(sdk(&d.endpoint()), h.clone(), rt.handle().clone()).fallback(false);
    assert!(
        fresh
            .put_object(&reg, Span::whole(new.len()), "bkt", "fresh")
            .is_err()
    );
    assert!(versions("/bkt/fresh").is_empty(), "an object was created");
    same("/bkt/obj", std::slice::from_ref(&old), "the object changed");

    // With fallback: replaced in full, by one plain PUT.
    let lenient = RdmaS3Client::new(sdk(&d.endpoint()), h.clone(), rt.handle().clone());
    let t = lenient
        .put_object(&reg, Span::whole(new.len()), "bkt", "obj")
        .unwrap();
    assert!(!t.rdma && t.declined.is_some(), "{t:?}");
    let want = if versioned {
        vec![old.clone(), new.clone()]
    } else {
        vec![new.clone()]
    };
    same("/bkt/obj", &want, "not one full replacement");
    let t = lenient
        .put_object(&reg, Span::whole(new.len()), "bkt", "fresh")
        .unwrap();
    assert!(!t.rdma);
    same("/bkt/fresh", std::slice::from_ref(&new), "not stored in full");

    // No write that carried a token ever reached the server: each token
    // request was the probe's one-byte GET.
    let reqs = d.requests();
    assert!(reqs.iter().any(|r| r.token().is_some()), "no probe was sent");
    for r in reqs.iter().filter(|r| r.token().is_some()) {
        assert_eq!(
            (r.method.as_str(), r.header("range")),
            ("GET", Some("bytes=0-0")),
            "{r:?}"
        );
    }
    assert!(
        store.lock().unwrap().values().flatten().all(|v| !v.is_empty()),
        "an empty object or version exists"
    );
}

#[test]
fn a_put_to_a_plain_server_in_an_unversioned_bucket_keeps_or_replaces_the_object_in_full() {
    check(false);
}

#[test]
fn a_put_to_a_plain_server_in_a_versioned_bucket_adds_no_empty_version() {
    check(true);
}

/// A server that speaks the binding exchange, reached by a second client
/// over the same hipObject instance as a first one that bound a connection
/// to it: the probe of a new key goes over that bound connection, and the
/// server answers `404` as any S3 server would (no reply). The endpoint was
/// proven by the first client, so the PUT still moves by RDMA.
#[test]
fn a_second_client_over_one_instance_keeps_rdma_for_a_new_key() {
    use hipobj_proto::{Reply, Token};
    let rt = runtime();
    let p = FakePlatform::host_only();
    let verbs = p.verbs.clone();
    let bound: Arc<Mutex<std::collections::HashSet<u32>>> = Arc::default();
    let d = start(&rt, move |req: &Req, _| {
        let Some(t) = req.token().and_then(|t| Token::decode(t.as_bytes()).ok()) else {
            return Resp::error(400, "InvalidRequest");
        };
        if bound.lock().unwrap().insert(t.qpn) {
            let r = Reply::Bind {
                token: support::server_token(),
                psn: 0x42,
            };
            return Resp::error(409, "RDMABindRequired").header(hipobj_proto::REPLY_HEADER, r.to_string());
        }
        if req.method == "GET" {
            if req.target.contains("/new") {
                return Resp::error(404, "NoSuchKey");
            }
            assert!(verbs.deliver_write_with_imm(t.qpn, t.rkey, t.len as u32));
        }
        let r = Reply::Done {
            status: 200,
            token: support::server_token(),
            bytes: t.len,
        };
        Resp::new(200)
            .header(hipobj_proto::REPLY_HEADER, r.to_string())
            .header(hipobj_proto::BYTES_HEADER, t.len.to_string())
    });
    let h = hipobj::Client::builder(p.platform())
        .nic_hint("fake0")
        .build()
        .unwrap();
    let first = RdmaS3Client::new(sdk(&d.endpoint()), h.clone(), rt.handle().clone());
    let mut reg = h.register(vec![0u8; 4096]).unwrap();
    assert!(
        first
            .get_object(&mut reg, Span::whole(4096), "bkt", "old", None)
            .unwrap()
            .rdma
    );
    let second = RdmaS3Client::new(sdk(&d.endpoint()), h.clone(), rt.handle().clone()).fallback(false);
    let t = second.put_object(&reg, Span::whole(4096), "bkt", "new").unwrap();
    assert!(t.rdma, "{t:?}");
    assert_eq!(second.protocol(), Protocol::Binding);
}
