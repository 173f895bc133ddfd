//! A key revoked in the credentials file keeps nothing it opened on the
//! RDMA side (issue 39, finding 7, as the attacker): its prepared
//! hipobj-rc-v2 session is dropped at the reload, and its READY and next
//! PREPARE are refused. The real server on the soft NIC.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use hipobj_platform::{Gid, NoTopology};
use hipobj_proto::rc_v2::{
    self, Cookie, Direction, ObjectPath, PrepareRequest, PrepareResponse, Psn, ReadyRequest, Size,
};
use hipobj_proto::{Token, Transport};
use hipobj_server::Server;
use hipobj_server::rdma::VerbsProvider;
use hipobj_softroce::{SoftConfig, SoftVerbs};
use support::wire::{control, request_from};

const MALLORY: (&str, &str) = ("AKMALLORY", "mallory-secret");
const OTHER: (&str, &str) = ("AKOTHER", "other-secret");

fn keys_file(path: &std::path::Path, keys: &[(&str, &str)]) {
    let text: String = keys
        .iter()
        .map(|(a, s)| format!("[[credentials]]\naccess_key = \"{a}\"\nsecret_key = \"{s}\"\n"))
        .collect();
    std::fs::write(path, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_keys_prepared_session_is_dropped_and_its_ready_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credentials.toml");
    keys_file(&file, &[MALLORY, OTHER]);
    let mut c = support::config(&dir.path().join("data"));
    c.credentials.clear();
    c.credentials_file = Some(file.clone());
    c.credentials_check_secs = 0;
    c.rdma.enabled = true;
    c.rdma.device = Some("softroce-revoked".into());
    let provider = VerbsProvider {
        verbs: Arc::new(SoftVerbs::new(SoftConfig {
            name: "softroce-revoked".into(),
            ..SoftConfig::default()
        })),
        topology: Arc::new(NoTopology),
    };
    let h = Server::start_with(c, Some(provider)).await.unwrap();
    let s3 = support::client_for(&h.endpoint(), MALLORY.0, MALLORY.1);
    s3.create_bucket().bucket("bkt").send().await.unwrap();
    s3.put_object()
        .bucket("bkt")
        .key("obj")
        .body(support::pattern(4096, 1).into())
        .send()
        .await
        .unwrap();

    let prepare = PrepareRequest {
        op: Direction::Get,
        target: ObjectPath::new("bkt", "obj").unwrap(),
        size: Size::new(4096).unwrap(),
        offset: None,
        token: Token {
            transport: Transport::Rc,
            qpn: 0x11,
            gid: Gid::from_ipv4(std::net::Ipv4Addr::LOCALHOST).0,
            rkey: 0,
            addr: 0,
            len: 0,
            port: 1,
            lid: 0,
        },
        psn: Psn::new(1).unwrap(),
        cookie: Cookie::new(0x1a2b_3c4d).unwrap(),
        client_mr: None,
        part: None,
    }
    .to_headers();
    let send =
        |path: &'static str, headers: Vec<(&'static str, String)>, key: (&'static str, &'static str)| {
            let addr = h.addr();
            async move {
                request_from(
                    std::net::Ipv4Addr::LOCALHOST,
                    addr,
                    &control(path, &headers, key),
                    Duration::from_secs(10),
                )
                .await
                .unwrap()
            }
        };
    let r = send(rc_v2::PREPARE_PATH, prepare.clone(), MALLORY).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let prepared =
        PrepareResponse::from_headers(r.headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes()))).unwrap();
    let sessions = h.v2_sessions().unwrap().clone();
    assert_eq!(sessions.open_sessions(), 1);

    // Revoked (what SIGHUP or the file watcher does).
    keys_file(&file, &[OTHER]);
    let change = h.keys().reload().unwrap();
    assert_eq!(change.removed, [MALLORY.0]);
    assert_eq!(
        sessions.open_sessions(),
        0,
        "the revoked key's session is dropped"
    );

    // READY for the session it prepared: refused at the signature.
    let ready = ReadyRequest {
        session: prepared.session,
        cookie: Cookie::new(0x1a2b_3c4d).unwrap(),
        client_mr: None,
    }
    .to_headers();
    let r = send(rc_v2::READY_PATH, ready, MALLORY).await;
    assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&r.body));
    let r = send(rc_v2::PREPARE_PATH, prepare, MALLORY).await;
    assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(sessions.open_sessions(), 0);
    // And over S3, as an unknown key.
    let e = s3.head_bucket().bucket("bkt").send().await.unwrap_err();
    assert_eq!(e.raw_response().map(|r| r.status().as_u16()), Some(403));
    h.shutdown().await;
}
