//! The hipobj-rc-v2 control path through the real server on the soft NIC,
//! with a test client that signs as the upstream client does (service
//! `hipobj`, no payload hash header) and drives its own QP through the verbs
//! seam: a GET within the staging limit moves the object's bytes (one over
//! it is 413), and each refusal has its status.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use hipobj_platform::fake::ClientQp;
use hipobj_platform::rc::{self, RcPath};
use hipobj_platform::vendor::{QpLimits, VendorProfile};
use hipobj_platform::{Gid, NoTopology, WcOpcode, WcStatus, WorkCompletion};
use hipobj_proto::rc_v2::{
    self, Cookie, Direction, ObjectPath, PrepareRequest, PrepareResponse, Psn, Qpn, ReadyRequest, RemoteMr,
    Size,
};
use hipobj_proto::{Token, Transport};
use hipobj_server::config::AccessKey;
use hipobj_server::rdma::VerbsProvider;
use hipobj_server::rdma::sigv4;
use hipobj_server::{Handle, Server};
use hipobj_softroce::{SoftConfig, SoftVerbs};

fn soft(name: &str) -> Arc<SoftVerbs> {
    Arc::new(SoftVerbs::new(SoftConfig {
        name: name.into(),
        ..SoftConfig::default()
    }))
}

async fn start(rdma: Option<&str>) -> (Handle, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut c = support::config(dir.path());
    c.credentials.push(AccessKey {
        access_key: "other-key".into(),
        secret_key: "other-secret".into(),
    });
    let provider = rdma.map(|name| {
        c.rdma.enabled = true;
        c.rdma.device = Some(name.into());
        c.rdma.v2_staging_max = 4096;
        VerbsProvider {
            verbs: soft(name),
            topology: Arc::new(NoTopology),
        }
    });
    (Server::start_with(c, provider).await.unwrap(), dir)
}

/// One signed control request, as the upstream client sends it.
async fn control(
    h: &Handle,
    path: &str,
    headers: &[(&'static str, String)],
    key: (&str, &str),
) -> (u16, String) {
    let date = sigv4::amz_date_now();
    let mut all: Vec<(String, String)> = vec![
        ("host".into(), "127.0.0.1".into()),
        ("x-amz-date".into(), date.clone()),
    ];
    all.extend(headers.iter().map(|(n, v)| ((*n).to_owned(), v.clone())));
    let auth = sigv4::sign("POST", path, &all, key.0, key.1, &date);
    let mut req = format!("POST {path} HTTP/1.1\r\n");
    for (n, v) in &all {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str(&format!(
        "authorization: {auth}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    ));
    support::raw(h.addr(), &req).await
}

fn header<'a>(resp: &'a str, name: &str) -> Option<&'a str> {
    resp.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn response_headers(resp: &str) -> Vec<(String, String)> {
    resp.lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| {
            l.split_once(':')
                .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        })
        .collect()
}

const KEY: (&str, &str) = (support::AK, support::SK);

/// A refusal case: the status, the headers, the key that signs.
type Case<'a> = (u16, Vec<(&'static str, String)>, (&'a str, &'a str));

fn prepare(op: Direction, key: &str, size: u64, token: Token) -> Vec<(&'static str, String)> {
    PrepareRequest {
        op,
        target: ObjectPath::new("bkt", key).unwrap(),
        size: Size::new(size).unwrap(),
        offset: None,
        token,
        psn: Psn::new(1).unwrap(),
        cookie: Cookie::new(0x1a2b_3c4d).unwrap(),
        client_mr: None,
        part: None,
    }
    .to_headers()
}

fn some_token() -> Token {
    Token {
        transport: Transport::Rc,
        qpn: 0x11,
        gid: Gid::from_ipv4(std::net::Ipv4Addr::LOCALHOST).0,
        rkey: 0,
        addr: 0,
        len: 0,
        port: 1,
        lid: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_rdma_off_every_control_request_is_declined_with_the_protocol_status() {
    let (h, _dir) = start(None).await;
    for path in [rc_v2::PREPARE_PATH, rc_v2::READY_PATH, rc_v2::CANCEL_PATH] {
        let (code, resp) = control(&h, path, &prepare(Direction::Get, "k", 8, some_token()), KEY).await;
        assert_eq!(code, 501, "{path}: {resp}");
        assert_eq!(header(&resp, rc_v2::PROTOCOL_STATUS_HEADER), Some("unsupported"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_refusal_has_its_status() {
    let (h, _dir) = start(Some("softroce-v2-refusals")).await;
    let s3 = support::client(&h);
    s3.create_bucket().bucket("bkt").send().await.unwrap();
    s3.put_object()
        .bucket("bkt")
        .key("obj")
        .body(vec![7u8; 100].into())
        .send()
        .await
        .unwrap();
    let ok = prepare(Direction::Get, "obj", 100, some_token());
    let cases: Vec<Case<'_>> = vec![
        (403, ok.clone(), ("hipobj-test-key", "wrong-secret")),
        (403, ok.clone(), ("unknown-key", "x")),
        (404, prepare(Direction::Get, "missing", 100, some_token()), KEY),
        (416, prepare(Direction::Get, "obj", 101, some_token()), KEY),
        (413, prepare(Direction::Put, "obj", 4097, some_token()), KEY),
        (
            400,
            prepare(
                Direction::Get,
                "obj",
                100,
                Token {
                    transport: Transport::Dc,
                    ..some_token()
                },
            ),
            KEY,
        ),
        (
            400,
            ok.iter()
                .map(|(n, v)| {
                    (
                        *n,
                        if *n == rc_v2::PSN_HEADER {
                            "000000".into()
                        } else {
                            v.clone()
                        },
                    )
                })
                .collect(),
            KEY,
        ),
        (
            501,
            ok.iter()
                .map(|(n, v)| {
                    (
                        *n,
                        if *n == rc_v2::PROTOCOL_HEADER {
                            "hipobj-rc-v1".into()
                        } else {
                            v.clone()
                        },
                    )
                })
                .collect(),
            KEY,
        ),
    ];
    for (want, headers, key) in cases {
        let (code, resp) = control(&h, rc_v2::PREPARE_PATH, &headers, key).await;
        assert_eq!(code, want, "{headers:?} as {}: {resp}", key.0);
    }
    // An unsigned x-amz-rdma header: the signature covers all of them.
    let date = sigv4::amz_date_now();
    let signed: Vec<(String, String)> = vec![
        ("host".into(), "127.0.0.1".into()),
        ("x-amz-date".into(), date.clone()),
    ];
    let auth = sigv4::sign("POST", rc_v2::CANCEL_PATH, &signed, KEY.0, KEY.1, &date);
    let req = format!(
        "POST {} HTTP/1.1\r\nhost: 127.0.0.1\r\nx-amz-date: {date}\r\nx-amz-rdma-protocol: hipobj-rc-v2\r\nx-amz-rdma-session: {}\r\nauthorization: {auth}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        rc_v2::CANCEL_PATH,
        "00".repeat(16)
    );
    assert_eq!(support::raw(h.addr(), &req).await.0, 403);
    // READY for an unknown session: 409; CANCEL of it: 204.
    let ready = ReadyRequest {
        session: rc_v2::SessionId([9; 16]),
        cookie: Cookie::new(1).unwrap(),
        client_mr: None,
    }
    .to_headers();
    assert_eq!(control(&h, rc_v2::READY_PATH, &ready, KEY).await.0, 409);
    let cancel: Vec<_> = ready
        .iter()
        .filter(|(n, _)| *n != rc_v2::COOKIE_HEADER)
        .cloned()
        .collect();
    assert_eq!(control(&h, rc_v2::CANCEL_PATH, &cancel, KEY).await.0, 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_through_the_server_moves_the_objects_bytes_and_counts_as_rdma_and_one_over_the_staging_limit_is_413()
 {
    let (h, _dir) = start(Some("softroce-v2-get-srv")).await;
    let s3 = support::client(&h);
    s3.create_bucket().bucket("bkt").send().await.unwrap();
    let want = support::pattern(10_000, 3);
    s3.put_object()
        .bucket("bkt")
        .key("obj")
        .body(want.clone().into())
        .send()
        .await
        .unwrap();

    // The client: a QP and a buffer on its own soft device.
    let name = "softroce-v2-get-cli";
    let c = ClientQp::new(soft(name), name, 16_384);
    let ClientQp {
        qp,
        cq,
        buf,
        sel,
        device,
        ..
    } = &c;
    let token = Token {
        transport: Transport::Rc,
        qpn: qp.qp_num(),
        gid: sel.gid.0,
        rkey: 0,
        addr: 0,
        len: 0,
        port: sel.port,
        lid: 0,
    };
    // The whole object is over the staging limit (4096): 413, as a PUT
    // over it is, naming the limit and the `mp` extension.
    let (code, resp) = control(
        &h,
        rc_v2::PREPARE_PATH,
        &prepare(Direction::Get, "obj", 10_000, token),
        KEY,
    )
    .await;
    assert_eq!(code, 413, "{resp}");
    assert!(resp.contains("limit of 4096"), "{resp}");
    assert_eq!(header(&resp, rc_v2::CAPABILITIES_HEADER), Some("mp"));
    let (code, resp) = control(
        &h,
        rc_v2::PREPARE_PATH,
        &prepare(Direction::Get, "obj", 4096, token),
        KEY,
    )
    .await;
    assert_eq!(code, 200, "{resp}");
    let hs = response_headers(&resp);
    let prepared = PrepareResponse::from_headers(hs.iter().map(|(n, v)| (n.as_str(), v.as_bytes()))).unwrap();
    let attr = device.attr().unwrap();
    let port = device.query_port(sel.port).unwrap();
    rc::to_rts(
        qp.as_ref(),
        &RcPath {
            port: sel.port,
            sgid_index: sel.gid_index as u8,
            mtu: sel.mtu,
            dest_qpn: prepared.token.qpn,
            dgid: Gid(prepared.token.gid),
            rq_psn: prepared.psn.get(),
            sq_psn: 1,
            max_dest_rd_atomic: 1,
            max_rd_atomic: 1,
        },
        VendorProfile::Generic,
        &QpLimits::new(&attr, &port),
    )
    .unwrap();
    let ready = |cookie: u32| {
        ReadyRequest {
            session: prepared.session,
            cookie: Cookie::new(cookie).unwrap(),
            client_mr: Some((
                RemoteMr {
                    addr: buf.addr(),
                    rkey: buf.mr().rkey(),
                },
                Qpn::new(qp.qp_num()).unwrap(),
            )),
        }
        .to_headers()
    };
    // Another key's READY is refused and leaves the session to its owner.
    assert_eq!(
        control(
            &h,
            rc_v2::READY_PATH,
            &ready(0x1a2b_3c4d),
            ("other-key", "other-secret")
        )
        .await
        .0,
        409
    );
    let (code, resp) = control(&h, rc_v2::READY_PATH, &ready(0x1a2b_3c4d), KEY).await;
    assert_eq!(code, 200, "{resp}");
    assert_eq!(header(&resp, rc_v2::BYTES_HEADER), Some("4096"));
    let want = &want[..4096];
    assert_eq!(header(&resp, rc_v2::COOKIE_HEADER), Some("1a2b3c4d"));
    // Issue 24, finding 6: the CRC-64/NVME of the bytes sent, in both of
    // the field's header forms.
    let crc = rc_v2::Crc64Nvme(crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Nvme, want));
    assert_eq!(
        header(&resp, rc_v2::CHECKSUM_HEADER),
        Some(crc.to_field().as_str())
    );
    assert_eq!(
        header(&resp, rc_v2::CHECKSUM_CRC64NVME_HEADER),
        Some(crc.to_base64().as_str())
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut wc = [WorkCompletion::EMPTY; 1];
    while cq.poll(&mut wc).unwrap() == 0 {
        assert!(Instant::now() < deadline, "no completion at the client");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        (wc[0].status, wc[0].opcode),
        (WcStatus::Success, WcOpcode::RecvRdmaWithImm)
    );
    assert_eq!(wc[0].imm_data, Some(0x1a2b_3c4d));
    assert_eq!(wc[0].byte_len, 4096, "one write counts every byte");
    let mut got = vec![0u8; 4096];
    assert!(buf.read_at(0, &mut got));
    assert_eq!(got, want);
    // Used: a second READY finds nothing.
    assert_eq!(
        control(&h, rc_v2::READY_PATH, &ready(0x1a2b_3c4d), KEY).await.0,
        409
    );
    let m = h.metrics().render(None);
    assert_eq!(
        support::metrics::value(&m, "hipobj_rdma_gets_total"),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        support::metrics::value(&m, "hipobj_rdma_bytes_written_total"),
        Some(4096.0),
        "{m}"
    );
}
