//! One unchanged client call against three kinds of server: one that speaks
//! the binding exchange (hipobj-server on the soft NIC), one that speaks
//! only hipobj-rc-v2 (an HTTP front on the v2 double of the core's tests,
//! on a second soft NIC), and one with RDMA off. Bytes move by RDMA where
//! the server can, over plain HTTP (said out loud) where it cannot, never
//! silently; what was found is remembered for the endpoint.
#![allow(clippy::unwrap_used, unsafe_code, dead_code)]

#[path = "../../hipobj/tests/support/rc_v2.rs"]
mod double;
mod support;
#[path = "../../hipobj-server/tests/support/test_ca.rs"]
mod test_ca;

use std::sync::Arc;

use double::V2Server;
use hipobj_platform::{NoGpu, NoTopology, Platform, Verbs};
use hipobj_proto::rc_v2;
use hipobj_s3::{Protocol, RdmaS3Client, Span};
use hipobj_softroce::{SoftConfig, SoftVerbs};
use support::{Req, Resp, runtime, sdk, start, start_tls};

fn soft(name: &str) -> Arc<SoftVerbs> {
    Arc::new(SoftVerbs::new(SoftConfig {
        name: name.into(),
        ..SoftConfig::default()
    }))
}

/// A client on its own soft NIC that accepts server QPs at `server_ip`: the
/// servers' soft NICs have loopback addresses of their own, not the HTTP
/// endpoint's 127.0.0.1 (a multi-homed server, docs/protocol.md §8).
fn hipobj_client(name: &str, server_ip: std::net::Ipv4Addr) -> hipobj::Client {
    hipobj_client_allowing(name, hipobj::AllowPeer::Listed(vec![server_ip.into()]))
}

/// A client on its own soft NIC with `allow` as its `HIPOBJ_ALLOW_PEER_GID`.
fn hipobj_client_allowing(name: &str, allow: hipobj::AllowPeer) -> hipobj::Client {
    let platform = Platform {
        verbs: soft(name),
        gpu: Arc::new(NoGpu::new("test")),
        topology: Arc::new(NoTopology),
    };
    hipobj::Client::builder(platform)
        .nic_hint(name)
        .options(hipobj::Options {
            max_transfers: 2,
            allow_peer: allow,
            ..hipobj::Options::default()
        })
        .build()
        .unwrap()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(29) ^ seed).collect()
}

/// The answer of a server that declines a token and points to v2.
fn unsupported() -> Resp {
    Resp::error(501, "NotImplemented")
        .header(hipobj_proto::REPLY_HEADER, "501")
        .header(rc_v2::PROTOCOL_STATUS_HEADER, rc_v2::PROTOCOL_STATUS_UNSUPPORTED)
}

/// An S3 front: plain GET/PUT/HEAD of `/bkt/<key>` from `server.objects`,
/// a token request declined with 501 + unsupported, and the v2 control
/// path served by `server` (or, with `rdma_off`, declined the same way).
fn front(server: Arc<V2Server>, rdma_off: bool) -> impl Fn(&Req, usize) -> Resp + Send + Sync + 'static {
    move |req: &Req, _| {
        let path = req.target.split('?').next().unwrap_or("");
        if path.starts_with(rc_v2::PATH_PREFIX) {
            if rdma_off || req.header(rc_v2::PROTOCOL_HEADER) != Some(rc_v2::PROTOCOL) {
                return unsupported();
            }
            let headers: Vec<(String, String)> = req
                .headers
                .iter()
                .filter(|(n, _)| n.starts_with(rc_v2::HEADER_PREFIX))
                .map(|(n, v)| (n.clone(), v.clone()))
                .collect();
            let (status, h) = server.handle(path, &headers);
            return h.into_iter().fold(Resp::new(status), |r, (n, v)| r.header(n, v));
        }
        if req.token().is_some() {
            return unsupported();
        }
        let key = path.trim_start_matches("/bkt/").to_owned();
        let mut objects = server.objects.lock().unwrap();
        match req.method.as_str() {
            "PUT" => {
                objects.insert(key, req.body.clone());
                Resp::new(200).header("etag", "\"plain\"")
            }
            "HEAD" => match objects.get(&key) {
                Some(o) => Resp::new(200)
                    .header("x-object-length", o.len().to_string())
                    .body(vec![0; o.len()]),
                None => Resp::new(404),
            },
            "GET" => match objects.get(&key) {
                Some(o) => Resp::new(200).body(o.clone()),
                None => Resp::error(404, "NoSuchKey"),
            },
            _ => Resp::new(405),
        }
    }
}

struct V2World {
    _server_rt: tokio::runtime::Runtime,
    rt: tokio::runtime::Runtime,
    server: Arc<V2Server>,
    double: support::Double,
    client: RdmaS3Client,
}

fn v2_world(rdma_off: bool, client_nic: &str, server_nic: &str) -> V2World {
    let server_verbs = soft(server_nic);
    let server = Arc::new(V2Server::open(server_verbs.as_ref() as &dyn Verbs, server_nic));
    // The front blocks in READY until the bytes moved: it gets its own runtime.
    let server_rt = runtime();
    let double = start(&server_rt, front(server.clone(), rdma_off));
    let rt = runtime();
    let client = RdmaS3Client::new(
        sdk(&double.endpoint()),
        hipobj_client(client_nic, server_verbs.device().unwrap().ip()),
        rt.handle().clone(),
    );
    V2World {
        _server_rt: server_rt,
        rt,
        server,
        double,
        client,
    }
}

/// hipobj-rc-v2 has no parts: an object larger than the client's part
/// size goes to a v2-only server as one PutObject over RDMA (the server's
/// limit allowing), not as a multipart upload whose parts it cannot take.
#[test]
fn a_put_larger_than_a_part_goes_whole_to_a_v2_only_server() {
    let w = v2_world(false, "softroce-n5c", "softroce-n5s");
    let c = w.client.clone().parallel(hipobj_s3::Parallel {
        part_size: 1 << 20,
        in_flight: 2,
    });
    let data = pattern(3 << 20, 9);
    let reg = c.hipobj().register(data.clone()).unwrap();
    let t = c.put_object(&reg, Span::whole(data.len()), "bkt", "big").unwrap();
    assert!(t.rdma && t.declined.is_none(), "{t:?}");
    assert_eq!(t.bytes, data.len() as u64);
    assert_eq!(c.protocol(), Protocol::RcV2);
    assert!(w.server.objects.lock().unwrap()["big"] == data);
    drop(reg);
    // No multipart upload was asked for.
    assert!(
        !w.double
            .requests()
            .iter()
            .any(|r| r.method == "POST" && r.target.contains("uploads")),
        "{:?}",
        w.double.requests()
    );

    // The GET back, larger than a part too, comes by RDMA: from a fresh
    // client, its first part finds the protocol, and the rest come as
    // parts in flight, each a v2 session of its own.
    let c = RdmaS3Client::new(
        sdk(&w.double.endpoint()),
        c.hipobj().clone(),
        w.rt.handle().clone(),
    )
    .parallel(c.parallel_settings());
    let mut reg = c.hipobj().register(vec![0u8; data.len()]).unwrap();
    let t = c
        .get_object(&mut reg, Span::whole(data.len()), "bkt", "big", None)
        .unwrap();
    assert!(t.rdma && t.declined.is_none(), "{t:?}");
    assert!(reg.to_vec() == data);
    let control = w
        .double
        .requests()
        .iter()
        .filter(|r| r.target.starts_with(rc_v2::PATH_PREFIX))
        .count();
    assert_eq!(
        control, 8,
        "PREPARE and READY for the PUT and for each of the GET's three parts"
    );
}

#[test]
fn a_v2_only_server_gets_and_puts_over_rdma_after_one_declined_token() {
    let w = v2_world(false, "softroce-n1c", "softroce-n1s");
    let c = &w.client;
    assert_eq!(c.protocol(), Protocol::Unknown);
    let data = pattern(3 << 20, 5);
    let mut src = data.clone();
    let reg = c.hipobj().register(std::mem::take(&mut src)).unwrap();
    let t = c.put_object(&reg, Span::whole(data.len()), "bkt", "obj").unwrap();
    assert!(t.rdma && t.declined.is_none(), "{t:?}");
    assert_eq!(t.bytes, data.len() as u64);
    assert_eq!(c.protocol(), Protocol::RcV2);
    assert!(w.server.objects.lock().unwrap()["obj"] == data);
    drop(reg);

    let mut out = vec![0u8; data.len()];
    let mut reg = c.hipobj().register(std::mem::take(&mut out)).unwrap();
    let t = c
        .get_object(&mut reg, Span::whole(data.len()), "bkt", "obj", None)
        .unwrap();
    assert!(t.rdma, "{t:?}");
    assert_eq!(t.bytes, data.len() as u64);
    assert!(reg.to_vec() == data);
    // A ranged GET lands at the span's offset.
    let t = c
        .get_object(
            &mut reg,
            Span {
                offset: 10,
                len: 1000,
            },
            "bkt",
            "obj",
            Some("bytes=4096-5095"),
        )
        .unwrap();
    assert!(t.rdma && t.bytes == 1000, "{t:?}");
    let mut got = vec![0u8; 1000];
    reg.read_into(10, &mut got).unwrap();
    assert!(got == data[4096..5096]);
    drop(reg);

    let reqs = w.double.requests();
    // One token request found out (the first PUT); after that, only v2.
    assert_eq!(
        reqs.iter()
            .filter(|r| r.token().is_some() && !r.target.starts_with(rc_v2::PATH_PREFIX))
            .count(),
        1
    );
    let control: Vec<&Req> = reqs
        .iter()
        .filter(|r| r.target.starts_with(rc_v2::PATH_PREFIX))
        .collect();
    assert_eq!(control.len(), 6, "PREPARE and READY for each of three transfers");
    for r in &control {
        assert_eq!(r.method, "POST");
        let signed = r.signed_headers();
        for name in r.headers.keys().filter(|n| n.starts_with(rc_v2::HEADER_PREFIX)) {
            assert!(signed.contains(name), "{name} is not signed in {}", r.target);
        }
    }
    assert!(w.server.cancelled.lock().unwrap().is_empty());
    w.rt.shutdown_background();
}

#[test]
fn an_rdma_off_server_is_reached_over_plain_http_said_out_loud_or_refused() {
    let w = v2_world(true, "softroce-n2c", "softroce-n2s");
    let c = &w.client;
    let data = pattern(100_000, 9);
    let mut src = data.clone();
    let reg = c.hipobj().register(std::mem::take(&mut src)).unwrap();
    let t = c.put_object(&reg, Span::whole(data.len()), "bkt", "obj").unwrap();
    assert!(!t.rdma, "{t:?}");
    assert!(t.declined.as_deref().unwrap().contains("hipobj-rc-v2"), "{t:?}");
    assert!(matches!(c.protocol(), Protocol::Plain(_)));
    assert!(w.server.objects.lock().unwrap()["obj"] == data);
    drop(reg);
    let mut out = vec![0u8; data.len()];
    let mut reg = c.hipobj().register(std::mem::take(&mut out)).unwrap();
    let t = c
        .get_object(&mut reg, Span::whole(data.len()), "bkt", "obj", None)
        .unwrap();
    assert!(!t.rdma && t.declined.is_some(), "{t:?}");
    assert!(reg.to_vec() == data);
    drop(reg);
    // Remembered: the GET asked nothing over RDMA.
    let reqs = w.double.requests();
    let object_tokens = |reqs: &[Req]| {
        reqs.iter()
            .filter(|r| r.token().is_some() && !r.target.starts_with(rc_v2::PATH_PREFIX))
            .count()
    };
    assert_eq!(object_tokens(&reqs), 1);
    assert_eq!(
        reqs.iter()
            .filter(|r| r.target.starts_with(rc_v2::PREPARE_PATH))
            .count(),
        1
    );

    // With fallback off (--require-rdma), a fresh client fails and says why.
    let strict = RdmaS3Client::new(
        sdk(&w.double.endpoint()),
        hipobj_client("softroce-n2d", std::net::Ipv4Addr::LOCALHOST),
        w.rt.handle().clone(),
    )
    .fallback(false);
    let mut out = vec![0u8; data.len()];
    let mut reg = strict.hipobj().register(std::mem::take(&mut out)).unwrap();
    let e = strict
        .get_object(&mut reg, Span::whole(data.len()), "bkt", "obj", None)
        .unwrap_err();
    assert!(e.is_declined(), "{e}");
    drop(reg);
    w.rt.shutdown_background();
}

#[test]
fn a_v2_get_whose_write_carries_another_immediate_fails_and_leaves_no_session() {
    let w = v2_world(false, "softroce-n3c", "softroce-n3s");
    let c = &w.client;
    w.server
        .objects
        .lock()
        .unwrap()
        .insert("obj".into(), pattern(4096, 1));
    w.server.misbehave.lock().unwrap().wrong_imm = true;
    let mut out = vec![0u8; 4096];
    let mut reg = c.hipobj().register(std::mem::take(&mut out)).unwrap();
    let e = c
        .get_object(&mut reg, Span::whole(4096), "bkt", "obj", Some("bytes=0-4095"))
        .unwrap_err();
    assert!(e.to_string().contains("cookie"), "{e}");
    assert!(!e.is_declined());
    assert_eq!(w.server.open_sessions(), 0);
    drop(reg);
    w.rt.shutdown_background();
}

#[test]
fn a_binding_server_keeps_the_binding_exchange_and_never_sees_v2() {
    use hipobj_server::config::{AccessKey, StorageConfig, VerbsBackend};
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let mut config = hipobj_server::Config {
        address: "127.0.0.1:0".parse().unwrap(),
        credentials: vec![AccessKey {
            access_key: "AKTEST".into(),
            secret_key: "secret".into(),
        }],
        storage: StorageConfig::Fs {
            data_dir: dir.path().to_path_buf(),
        },
        metrics_log_secs: 0,
        ..hipobj_server::Config::default()
    };
    config.limits.fsync = false;
    config.rdma.enabled = true;
    config.rdma.device = Some(hipobj_softroce::DEFAULT_NAME.into());
    config.rdma.backend = VerbsBackend::Softroce;
    let h = rt.block_on(hipobj_server::Server::start(config)).unwrap();
    let s3 = sdk(&h.endpoint());
    rt.block_on(s3.create_bucket().bucket("bkt").send()).unwrap();
    let server_ip = h
        .rdma()
        .and_then(|r| r.target().selection().gid.to_ipv4())
        .unwrap();
    let c = RdmaS3Client::new(s3, hipobj_client("softroce-n4c", server_ip), rt.handle().clone());
    let data = pattern(1 << 20, 3);
    let mut src = data.clone();
    let reg = c.hipobj().register(std::mem::take(&mut src)).unwrap();
    let t = c.put_object(&reg, Span::whole(data.len()), "bkt", "obj").unwrap();
    assert!(t.rdma, "{t:?}");
    assert_eq!(c.protocol(), Protocol::Binding);
    drop(reg);
    let mut out = vec![0u8; data.len()];
    let mut reg = c.hipobj().register(std::mem::take(&mut out)).unwrap();
    let t = c
        .get_object(&mut reg, Span::whole(data.len()), "bkt", "obj", None)
        .unwrap();
    assert!(t.rdma && t.bytes == data.len() as u64, "{t:?}");
    assert!(reg.to_vec() == data);
    drop(reg);
    assert_eq!(h.rdma().unwrap().target().stats().transfers, 2);
    rt.block_on(h.shutdown());
}

/// Issue 38, finding 3 (docs/protocol.md §8), for hipobj-rc-v2: the v2-only
/// server, its soft NIC on a loopback address of its own (not the
/// endpoint's 127.0.0.1, as a multi-homed server's RDMA NIC), and clients
/// that list no address in `HIPOBJ_ALLOW_PEER_GID`. Over https with the
/// certificate verified, only the server can have written the PREPARE
/// answer: a PUT and a GET move by RDMA. The same front over plain http is
/// refused at PREPARE, as before.
#[test]
fn a_v2_server_over_verified_https_may_put_its_nic_on_another_address() {
    let server_verbs = soft("softroce-n3s");
    let server = Arc::new(V2Server::open(
        server_verbs.as_ref() as &dyn Verbs,
        "softroce-n3s",
    ));
    let nic = server_verbs.device().unwrap().ip();
    assert_ne!(
        nic,
        std::net::Ipv4Addr::LOCALHOST,
        "the NIC must not be on the endpoint's address"
    );
    let server_rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let ca = test_ca::TestCa::new("hipobj-s3 negotiation CA");
    let files = ca.write_server(dir.path(), "front");
    let tls = hipobj_server::tls::Tls::from_config(&hipobj_server::config::TlsConfig {
        cert: Some(files.cert),
        key: Some(files.key),
        ..hipobj_server::config::TlsConfig::default()
    })
    .unwrap()
    .unwrap();
    let https = start_tls(&server_rt, tls, front(server.clone(), false));
    assert!(https.endpoint().starts_with("https://127.0.0.1:"));
    let plain = start(&server_rt, front(server.clone(), false));
    let rt = runtime();
    let bundle = hipobj_s3::tls::CaBundle::from_pem(ca.pem()).unwrap();
    let s3 = aws_sdk_s3::Client::from_conf(
        sdk(&https.endpoint())
            .config()
            .to_builder()
            .http_client(hipobj_s3::tls::http_client(Some(&bundle)).unwrap())
            .build(),
    );
    let none = || hipobj::AllowPeer::default();
    let c = RdmaS3Client::new(
        s3,
        hipobj_client_allowing("softroce-n3c", none()),
        rt.handle().clone(),
    )
    .fallback(false);
    let data = pattern((1 << 20) + 11, 3);
    let reg = c.hipobj().register(data.clone()).unwrap();
    let t = c.put_object(&reg, Span::whole(data.len()), "bkt", "obj").unwrap();
    assert!(t.rdma && t.bytes == data.len() as u64, "{t:?}");
    assert_eq!(c.protocol(), Protocol::RcV2);
    assert!(server.objects.lock().unwrap()["obj"] == data);
    drop(reg);
    let mut reg = c.hipobj().register(vec![0u8; data.len()]).unwrap();
    let t = c
        .get_object(&mut reg, Span::whole(data.len()), "bkt", "obj", None)
        .unwrap();
    assert!(t.rdma && t.bytes == data.len() as u64, "{t:?}");
    assert!(reg.to_vec() == data, "the bytes that came back differ");
    drop(reg);
    assert!(server.cancelled.lock().unwrap().is_empty());

    let c = RdmaS3Client::new(
        sdk(&plain.endpoint()),
        hipobj_client_allowing("softroce-n3p", none()),
        rt.handle().clone(),
    )
    .fallback(false)
    .known_protocol(Protocol::RcV2);
    let mut reg = c.hipobj().register(vec![0u8; data.len()]).unwrap();
    let e = c
        .get_object(&mut reg, Span::whole(data.len()), "bkt", "obj", None)
        .unwrap_err();
    assert_eq!(e.kind(), hipobj::ErrorKind::RdmaError, "{e}");
    assert!(e.to_string().contains("not an address of the server"), "{e}");
    assert!(reg.to_vec().iter().all(|b| *b == 0), "bytes landed");
    drop(reg);
    rt.shutdown_background();
}
