//! RdmaS3Client against a test double speaking plain HTTP: what the token
//! requests look like on the wire (signed token, UNSIGNED-PAYLOAD, no
//! body), the 409 binding round read from an error response, and each way
//! a server can decline RDMA, each falling back to HTTP and saying so. The
//! client runs on the fake NIC, which binds but moves no bytes; transfers
//! that move bytes run against hipobj-server on the soft NIC.
#![allow(clippy::unwrap_used)]

mod support;

use hipobj::ErrorKind;
use hipobj_platform::fake::{FakePlatform, FakeVerbs};
use hipobj_proto::Reply;
use hipobj_s3::{RdmaS3Client, Span};
use support::{Req, Resp, runtime, sdk, server_token, server_token_at, start};

fn client(rt: &tokio::runtime::Runtime, endpoint: &str, p: &FakePlatform) -> RdmaS3Client {
    let h = hipobj::Client::builder(p.platform())
        .nic_hint("fake0")
        .build()
        .unwrap();
    RdmaS3Client::new(sdk(endpoint), h, rt.handle().clone())
}

fn bind_reply() -> String {
    Reply::Bind {
        token: server_token(),
        psn: 0x123,
    }
    .to_string()
}

/// The full success reply to `req`: `status`, the server's token, and the
/// token's length as the count. For a GET it first plays, on the fake NIC
/// (which moves no bytes), the receive completion of the server's WRITE
/// WITH IMMEDIATE that a success needs.
fn success(req: &Req, status: u16, verbs: &FakeVerbs) -> String {
    let t = hipobj_proto::Token::decode(req.token().unwrap().as_bytes()).unwrap();
    let get = verbs
        .mr_access(t.rkey)
        .is_some_and(|a| a.contains(hipobj_platform::AccessFlags::REMOTE_WRITE));
    if get {
        assert!(verbs.deliver_write_with_imm(t.qpn, t.rkey, t.len as u32));
    }
    Reply::Done {
        status,
        token: server_token(),
        bytes: t.len,
    }
    .to_string()
}

/// First token request: 409 bind; then `then`.
fn binding(
    then: impl Fn(&Req) -> Resp + Send + Sync + 'static,
) -> impl Fn(&Req, usize) -> Resp + Send + Sync {
    move |req, i| {
        if req.token().is_some() && i == 0 {
            Resp::error(409, "RDMABindRequired").header(hipobj_proto::REPLY_HEADER, bind_reply())
        } else {
            then(req)
        }
    }
}

fn check_token_request(req: &Req) {
    let signed = req.signed_headers();
    assert!(
        signed.iter().any(|h| h == "x-amz-rdma-token"),
        "token not signed: {signed:?}"
    );
    assert_eq!(req.token().map(str::len), Some(88));
    assert_eq!(req.header("content-length").unwrap_or("0"), "0");
    assert!(req.body.is_empty());
    assert!(
        !req.headers.keys().any(|k| k.starts_with("x-amz-checksum-")),
        "a checksum of the empty body was sent: {:?}",
        req.headers
    );
}

#[test]
fn get_binds_on_409_then_reads_the_success_reply() {
    let rt = runtime();
    let p = FakePlatform::host_only();
    let verbs = p.verbs.clone();
    let d = start(
        &rt,
        binding(move |req| {
            Resp::new(200)
                .header(hipobj_proto::REPLY_HEADER, success(req, 200, &verbs))
                .header(hipobj_proto::BYTES_HEADER, "64")
                .header("etag", "\"abc\"")
        }),
    );
    let c = client(&rt, &d.endpoint(), &p);
    let mut buf = vec![0u8; 64];
    let mut reg = c.hipobj().register(std::mem::take(&mut buf)).unwrap();
    let t = c
        .get_object(&mut reg, Span::whole(64), "bkt", "obj", None)
        .unwrap();
    assert!(t.rdma && t.declined.is_none(), "{t:?}");
    assert_eq!((t.bytes, t.etag.as_deref(), t.status), (64, Some("\"abc\""), 200));
    let reqs = d.requests();
    assert_eq!(reqs.len(), 2, "one bind round, one transfer");
    for r in &reqs {
        assert_eq!(
            (r.method.as_str(), r.target.as_str()),
            ("GET", "/bkt/obj?x-id=GetObject")
        );
        check_token_request(r);
    }
    assert_eq!(reqs[0].token(), reqs[1].token(), "the same token both times");
    let tok = hipobj_proto::Token::decode(reqs[0].token().unwrap().as_bytes()).unwrap();
    assert_eq!(tok.len, 64);
}

#[test]
fn a_ranged_get_sends_the_range_and_counts_from_content_range() {
    let rt = runtime();
    let p = FakePlatform::host_only();
    let verbs = p.verbs.clone();
    let d = start(
        &rt,
        binding(move |req| {
            Resp::new(206)
                .header(hipobj_proto::REPLY_HEADER, success(req, 206, &verbs))
                .header("content-range", "bytes 10-19/100")
        }),
    );
    let c = client(&rt, &d.endpoint(), &p);
    let mut buf = vec![0u8; 10];
    let mut reg = c.hipobj().register(std::mem::take(&mut buf)).unwrap();
    let t = c
        .get_object(&mut reg, Span::whole(10), "bkt", "obj", Some("bytes=10-19"))
        .unwrap();
    assert_eq!(
        (t.bytes, t.object_size, t.status, t.rdma),
        (10, Some(100), 206, true)
    );
    assert_eq!(d.requests()[1].header("range"), Some("bytes=10-19"));
}

#[test]
fn put_and_upload_part_send_no_body_and_sign_unsigned_payload() {
    let rt = runtime();
    let p = FakePlatform::host_only();
    let verbs = p.verbs.clone();
    // The probe's GET and the PUT's first request each find an unbound QP.
    let d = start(&rt, move |req: &Req, i| {
        if req.token().is_some() && i < 2 {
            Resp::error(409, "RDMABindRequired").header(hipobj_proto::REPLY_HEADER, bind_reply())
        } else {
            Resp::new(200)
                .header(hipobj_proto::REPLY_HEADER, success(req, 200, &verbs))
                .header(hipobj_proto::BYTES_HEADER, "4096")
                .header("etag", "\"e1\"")
        }
    });
    let c = client(&rt, &d.endpoint(), &p);
    let mut buf = vec![7u8; 8192];
    let reg = c.hipobj().register(std::mem::take(&mut buf)).unwrap();
    let t = c
        .put_object(
            &reg,
            Span {
                offset: 4096,
                len: 4096,
            },
            "bkt",
            "obj",
        )
        .unwrap();
    assert_eq!((t.bytes, t.etag.as_deref(), t.rdma), (4096, Some("\"e1\""), true));
    let t = c
        .upload_part(&reg, Span::whole(4096), "bkt", "obj", "up1", 3)
        .unwrap();
    assert!(t.rdma);
    let reqs = d.requests();
    assert_eq!(
        reqs.len(),
        4,
        "probe (answered by its 409), bind, put, part (the QP stays bound)"
    );
    // The first token request to the endpoint is the probe: a one-byte
    // ranged GET, which no server can store, not sent again after its 409.
    assert_eq!(
        (reqs[0].method.as_str(), reqs[0].header("range")),
        ("GET", Some("bytes=0-0"))
    );
    check_token_request(&reqs[0]);
    for r in &reqs[1..] {
        assert_eq!(r.method, "PUT");
        check_token_request(r);
        assert_eq!(r.header("x-amz-content-sha256"), Some("UNSIGNED-PAYLOAD"));
    }
    assert!(reqs[3].target.contains("partNumber=3") && reqs[3].target.contains("uploadId=up1"));
    let tok = hipobj_proto::Token::decode(reqs[2].token().unwrap().as_bytes()).unwrap();
    assert_eq!(tok.len, 4096);
}

fn plain_object() -> Vec<u8> {
    (0..1000u32).map(|i| (i * 7 % 251) as u8).collect()
}

#[test]
fn reply_501_falls_back_to_http_and_says_so() {
    let rt = runtime();
    let d = start(&rt, |req, _| {
        if req.token().is_some() {
            Resp::error(501, "NotImplemented").header(hipobj_proto::REPLY_HEADER, "501")
        } else {
            Resp::new(200).header("etag", "\"plain\"").body(plain_object())
        }
    });
    let p = FakePlatform::host_only();
    let c = client(&rt, &d.endpoint(), &p);
    let mut buf = vec![0u8; 4096];
    let mut reg = c.hipobj().register(std::mem::take(&mut buf)).unwrap();
    let t = c
        .get_object(&mut reg, Span::whole(4096), "bkt", "obj", None)
        .unwrap();
    assert!(!t.rdma);
    assert!(t.declined.as_deref().unwrap().contains("declined RDMA"), "{t:?}");
    assert_eq!((t.bytes, t.etag.as_deref()), (1000, Some("\"plain\"")));
    assert_eq!(&reg.to_vec()[..1000], &plain_object()[..]);
    let reqs = d.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs[1].token().is_none(), "the fallback carries no token");

    // With fallback off it is an error that says why.
    let strict = c.clone().fallback(false);
    let e = strict
        .get_object(&mut reg, Span::whole(4096), "bkt", "obj", None)
        .unwrap_err();
    assert!(e.is_declined() && e.kind() == ErrorKind::S3Error, "{e}");
}

#[test]
fn http_501_without_a_reply_falls_back_for_put() {
    let rt = runtime();
    let d = start(&rt, |req, _| {
        if req.token().is_some() {
            Resp::error(501, "NotImplemented")
        } else {
            Resp::new(200).header("etag", "\"put\"")
        }
    });
    let p = FakePlatform::host_only();
    let c = client(&rt, &d.endpoint(), &p);
    let mut buf = plain_object();
    let reg = c.hipobj().register(std::mem::take(&mut buf)).unwrap();
    let t = c
        .put_object(&reg, Span { offset: 10, len: 990 }, "bkt", "obj")
        .unwrap();
    assert!(
        !t.rdma && t.declined.as_deref().unwrap().contains("HTTP 501"),
        "{t:?}"
    );
    assert_eq!((t.bytes, t.etag.as_deref()), (990, Some("\"put\"")));
    let reqs = d.requests();
    assert_eq!(reqs[1].body, &plain_object()[10..]);
}

#[test]
fn a_server_that_ignores_the_token_is_a_decline_and_its_body_is_used() {
    let rt = runtime();
    let d = start(&rt, |_, _| Resp::new(200).body(plain_object()));
    let p = FakePlatform::host_only();
    let c = client(&rt, &d.endpoint(), &p);
    let mut buf = vec![0u8; 1000];
    let mut reg = c.hipobj().register(std::mem::take(&mut buf)).unwrap();
    let t = c
        .get_object(&mut reg, Span::whole(1000), "bkt", "obj", None)
        .unwrap();
    assert!(
        !t.rdma && t.declined.as_deref().unwrap().contains("does not speak"),
        "{t:?}"
    );
    assert_eq!(reg.to_vec(), &plain_object()[..]);
    assert_eq!(d.requests().len(), 1, "the body that came back is the object");
}

#[test]
fn s3_errors_and_unreachable_servers_are_errors_with_their_code() {
    let rt = runtime();
    let d = start(&rt, |_, _| Resp::error(404, "NoSuchKey"));
    let p = FakePlatform::host_only();
    let c = client(&rt, &d.endpoint(), &p);
    let mut buf = vec![0u8; 16];
    let mut reg = c.hipobj().register(std::mem::take(&mut buf)).unwrap();
    let e = c
        .get_object(&mut reg, Span::whole(16), "bkt", "nope", None)
        .unwrap_err();
    assert_eq!(
        (e.kind(), e.status(), e.s3_code()),
        (ErrorKind::S3Error, Some(404), Some("NoSuchKey")),
        "{e}"
    );
    assert!(e.to_string().contains("NoSuchKey"), "{e}");

    // A port nobody listens on.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    buf = reg.into_inner();
    let c = RdmaS3Client::new(sdk(&dead), c.hipobj().clone(), rt.handle().clone());
    let mut reg = c.hipobj().register(std::mem::take(&mut buf)).unwrap();
    let e = c
        .get_object(&mut reg, Span::whole(16), "bkt", "obj", None)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::S3Error, "{e}");
    assert!(e.to_string().contains("refused the connection"), "{e}");
}

/// Issue 24, finding 2: a party on the HTTP path answers the first request
/// with a 409 naming a QP on its own NIC (127.0.0.2; the endpoint is
/// 127.0.0.1). The client refuses to bind: the call fails with an RDMA
/// error before any QP is connected and nothing is sent again. Naming that
/// address in the switch (`AllowPeer`, `HIPOBJ_ALLOW_PEER_GID`) makes the
/// same exchange bind and complete.
#[test]
fn a_bind_naming_a_qp_off_the_endpoints_host_is_refused_unless_listed() {
    let rt = runtime();
    let party = std::net::Ipv4Addr::new(127, 0, 0, 2);
    let answer = move |verbs: std::sync::Arc<FakeVerbs>| {
        move |req: &Req, i: usize| {
            let t = hipobj_proto::Token::decode(req.token().unwrap().as_bytes()).unwrap();
            if i == 0 {
                let bind = Reply::Bind {
                    token: server_token_at(party),
                    psn: 0x123,
                };
                return Resp::error(409, "RDMABindRequired")
                    .header(hipobj_proto::REPLY_HEADER, bind.to_string());
            }
            assert!(verbs.deliver_write_with_imm(t.qpn, t.rkey, t.len as u32));
            let done = Reply::Done {
                status: 200,
                token: server_token_at(party),
                bytes: t.len,
            };
            Resp::new(200)
                .header(hipobj_proto::REPLY_HEADER, done.to_string())
                .header(hipobj_proto::BYTES_HEADER, t.len.to_string())
        }
    };
    for allow in [None, Some(hipobj::AllowPeer::Listed(vec![party.into()]))] {
        let p = FakePlatform::host_only();
        let d = start(&rt, answer(p.verbs.clone()));
        let mut options = hipobj::Options::default();
        if let Some(a) = &allow {
            options.allow_peer = a.clone();
        }
        let h = hipobj::Client::builder(p.platform())
            .nic_hint("fake0")
            .options(options)
            .build()
            .unwrap();
        let c = RdmaS3Client::new(sdk(&d.endpoint()), h, rt.handle().clone()).fallback(false);
        let mut reg = c.hipobj().register(vec![0u8; 64]).unwrap();
        let got = c.get_object(&mut reg, Span::whole(64), "bkt", "obj", None);
        if allow.is_none() {
            let e = got.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::RdmaError, "{e}");
            assert!(e.to_string().contains("HIPOBJ_ALLOW_PEER_GID"), "{e}");
            assert_eq!(d.requests().len(), 1, "refused at the 409: nothing sent again");
        } else {
            let t = got.unwrap();
            assert!(t.rdma && t.bytes == 64, "{t:?}");
            assert_eq!(d.requests().len(), 2);
        }
    }
}
