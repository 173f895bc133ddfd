//! hipobj-s3 over https: aws-sdk-s3 with the HTTP client of
//! `hipobj_s3::tls`, against hipobj-server serving TLS with a certificate
//! from a CA made for the test, RDMA on the soft NIC. A client that trusts
//! the CA moves the bytes by RDMA exactly as over http; one that trusts
//! another CA, or only the system's roots, is refused at the handshake
//! with an error that says so, and nothing reaches the server.
#![allow(clippy::unwrap_used)]

#[path = "../../hipobj-server/tests/support/test_ca.rs"]
mod test_ca;

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use hipobj_s3::tls::{CaBundle, http_client};
use hipobj_s3::{RdmaS3Client, Span};
use hipobj_server::config::{AccessKey, StorageConfig, VerbsBackend};
use hipobj_server::{Config, Handle, Server};
use test_ca::TestCa;

const AK: &str = "hipobj-s3-tls";
const SK: &str = "hipobj-s3-tls-secret";

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(37) ^ seed).collect()
}

fn sdk(endpoint: &str, ca: Option<&CaBundle>) -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .http_client(http_client(ca).unwrap())
            .endpoint_url(endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new(AK, SK, None, None, "test"))
            .force_path_style(true)
            .build(),
    )
}

/// hipobj-server with TLS from `ca` and RDMA on the soft NIC.
fn server(rt: &tokio::runtime::Runtime, ca: &TestCa, dir: &std::path::Path) -> Handle {
    server_over(rt, Some(ca), dir)
}

/// hipobj-server with RDMA on the soft NIC, serving TLS from `ca` when
/// given, else plain http.
fn server_over(rt: &tokio::runtime::Runtime, ca: Option<&TestCa>, dir: &std::path::Path) -> Handle {
    let data = dir.join("data");
    let mut config = Config {
        address: "127.0.0.1:0".parse().unwrap(),
        credentials: vec![AccessKey {
            access_key: AK.into(),
            secret_key: SK.into(),
        }],
        storage: StorageConfig::Fs { data_dir: data },
        metrics_log_secs: 0,
        shutdown_grace_secs: 2,
        ..Config::default()
    };
    config.limits.fsync = false;
    config.rdma.enabled = true;
    config.rdma.device = Some(hipobj_softroce::DEFAULT_NAME.into());
    config.rdma.backend = VerbsBackend::Softroce;
    if let Some(ca) = ca {
        let files = ca.write_server(dir, "server");
        config.tls.cert = Some(files.cert);
        config.tls.key = Some(files.key);
    }
    rt.block_on(Server::start(config)).unwrap()
}

#[test]
fn rdma_get_and_put_run_over_https_with_the_ca_bundle_and_a_wrong_ca_is_refused() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("hipobj-s3 test CA");
    let h = server(&rt, &ca, dir.path());
    assert!(h.endpoint().starts_with("https://"), "{}", h.endpoint());

    let bundle = CaBundle::from_file(ca.write_bundle(&dir.path().join("ca.pem"))).unwrap();
    assert_eq!(bundle.len(), 1);
    let s3 = sdk(&h.endpoint(), Some(&bundle));
    rt.block_on(s3.create_bucket().bucket("tls").send()).unwrap();
    // A bundle with a block that is not a certificate beside the CA: the
    // block is left out and the CA still trusted (the SDK's own loader
    // would panic on the block).
    let junk = "-----BEGIN CERTIFICATE-----\naGVsbG8gd29ybGQ=\n-----END CERTIFICATE-----\n";
    let mixed = CaBundle::from_pem(format!("{junk}{}", ca.pem())).unwrap();
    rt.block_on(sdk(&h.endpoint(), Some(&mixed)).list_buckets().send())
        .unwrap();
    // The server's soft NIC has a loopback address of its own, not the
    // endpoint's 127.0.0.1: the client accepts server QPs there (docs/protocol.md §8).
    let server_ip = h
        .rdma()
        .and_then(|r| r.target().selection().gid.to_ipv4())
        .unwrap();
    let hipobj = hipobj::Client::builder(hipobj_system::platform())
        .nic_hint(hipobj_softroce::DEFAULT_NAME)
        .options(hipobj::Options {
            allow_peer: hipobj::AllowPeer::Listed(vec![server_ip.into()]),
            ..hipobj::Options::default()
        })
        .build()
        .unwrap();
    let c = RdmaS3Client::new(s3.clone(), hipobj.clone(), rt.handle().clone()).fallback(false);

    let data = pattern(3 << 20, 5);
    let reg = hipobj.register(data.clone()).unwrap();
    let put = c.put_object(&reg, Span::whole(data.len()), "tls", "obj").unwrap();
    assert!(put.rdma && put.bytes == data.len() as u64, "{put:?}");
    drop(reg);
    let mut reg = hipobj.register(vec![0u8; data.len()]).unwrap();
    let got = c
        .get_object(&mut reg, Span::whole(data.len()), "tls", "obj", None)
        .unwrap();
    assert!(got.rdma && got.bytes == data.len() as u64, "{got:?}");
    assert!(reg.to_vec() == data, "the bytes that came back differ");
    drop(reg);
    assert_eq!(h.rdma().unwrap().target().stats().transfers, 2);
    // What RDMA stored, read back over https by plain GET.
    let plain = rt
        .block_on(async {
            s3.get_object()
                .bucket("tls")
                .key("obj")
                .send()
                .await
                .unwrap()
                .body
                .collect()
                .await
        })
        .unwrap()
        .into_bytes();
    assert!(plain.as_ref() == data.as_slice());

    // Another CA's bundle, and the system's roots: refused at the
    // handshake, said so, and no request reached the server.
    let other = CaBundle::from_pem(TestCa::new("someone else's CA").pem()).unwrap();
    let requests_before = h.metrics().summary();
    for (what, client) in [
        ("another CA", sdk(&h.endpoint(), Some(&other))),
        ("the system's roots", sdk(&h.endpoint(), None)),
    ] {
        let rc = RdmaS3Client::new(client, hipobj.clone(), rt.handle().clone()).fallback(false);
        let mut reg = hipobj.register(vec![0u8; data.len()]).unwrap();
        let e = rc
            .get_object(&mut reg, Span::whole(data.len()), "tls", "obj", None)
            .unwrap_err();
        assert!(e.is_untrusted(), "{what}: {e}");
        assert!(
            e.to_string().contains("TLS certificate is not trusted") && e.to_string().contains("CA bundle"),
            "{what}: {e}"
        );
        assert!(reg.to_vec().iter().all(|b| *b == 0), "{what}: bytes landed");
    }
    assert_eq!(h.rdma().unwrap().target().stats().transfers, 2, "no transfer ran");
    assert_eq!(
        h.metrics().summary(),
        requests_before,
        "a request reached the server"
    );
    rt.block_on(h.shutdown());
}

#[test]
fn a_ca_bundle_with_nothing_to_trust_is_an_error_not_an_empty_trust_store() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("bundle test CA");
    let (_, key_pem, _) = ca.server_cert(&["127.0.0.1"]);
    let missing = dir.path().join("missing.pem");
    let e = CaBundle::from_file(&missing).unwrap_err();
    assert!(e.to_string().contains("cannot be read"), "{e}");
    for (what, pem) in [
        ("an empty file", String::new()),
        ("a key and no certificate", key_pem.clone()),
        ("text that is not PEM", "hello\n".to_owned()),
    ] {
        let e = CaBundle::from_pem(pem).unwrap_err();
        assert!(e.to_string().contains("no CERTIFICATE"), "{what}: {e}");
    }
    let broken = "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n";
    assert!(CaBundle::from_pem(broken).is_err(), "a broken block was accepted");
    let garbage = "-----BEGIN CERTIFICATE-----\naGVsbG8gd29ybGQ=\n-----END CERTIFICATE-----\n";
    let e = CaBundle::from_pem(garbage).unwrap_err();
    assert!(e.to_string().contains("can be trusted"), "{e}");
    // Beside a usable CA, a block that is not a certificate is left out,
    // not trusted, and not handed to the TLS client (which would panic).
    let mixed = CaBundle::from_pem(format!("{garbage}{}", ca.pem())).unwrap();
    assert_eq!((mixed.len(), mixed.skipped()), (1, 1));
    // The system's bundle, where AWS_CA_BUNDLE often points (.ci/run
    // installs ca-certificates): every root in it is usable.
    let system = CaBundle::from_file("/etc/ssl/certs/ca-certificates.crt").unwrap();
    assert!(system.len() > 50 && system.skipped() == 0, "{system:?}");
    // Two CAs in one file, with a key in between: both certificates count.
    let two = format!("{}{key_pem}{}", ca.pem(), TestCa::new("second").pem());
    assert_eq!(CaBundle::from_pem(two).unwrap().len(), 2);
}

/// A hipObject client on the soft NIC with `allow` as its
/// `HIPOBJ_ALLOW_PEER_GID` (whatever the test's environment says).
fn hipobj_client(allow: hipobj::AllowPeer) -> hipobj::Client {
    hipobj::Client::builder(hipobj_system::platform())
        .nic_hint(hipobj_softroce::DEFAULT_NAME)
        .options(hipobj::Options {
            allow_peer: allow,
            ..hipobj::Options::default()
        })
        .build()
        .unwrap()
}

/// Issue 38, finding 3 (docs/protocol.md §8): a multi-homed server, its S3
/// endpoint on 127.0.0.1 and its RDMA NIC (the soft NIC) on a loopback
/// address of its own. Over https with the certificate verified, only the
/// server can have written the binding reply, so a PUT and a GET move by
/// RDMA with no `HIPOBJ_ALLOW_PEER_GID`. The same layout over plain http is
/// refused as before (a party on the path could have named that NIC), and
/// goes through once the address is listed.
#[test]
fn a_server_whose_rdma_nic_is_on_another_address_needs_no_allow_list_over_verified_https() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("hipobj-s3 multi-homed CA");
    let bundle = CaBundle::from_pem(ca.pem()).unwrap();
    let data = pattern((2 << 20) + 3, 11);

    let tls_dir = dir.path().join("tls");
    std::fs::create_dir(&tls_dir).unwrap();
    let h = server_over(&rt, Some(&ca), &tls_dir);
    assert!(h.endpoint().starts_with("https://127.0.0.1:"), "{}", h.endpoint());
    let nic = h
        .rdma()
        .and_then(|r| r.target().selection().gid.to_ipv4())
        .unwrap();
    assert_ne!(
        nic,
        std::net::Ipv4Addr::LOCALHOST,
        "the NIC must not be on the endpoint's address"
    );
    let s3 = sdk(&h.endpoint(), Some(&bundle));
    rt.block_on(s3.create_bucket().bucket("multi").send()).unwrap();
    let hipobj = hipobj_client(hipobj::AllowPeer::default());
    let c = RdmaS3Client::new(s3, hipobj.clone(), rt.handle().clone()).fallback(false);
    let reg = hipobj.register(data.clone()).unwrap();
    let put = c
        .put_object(&reg, Span::whole(data.len()), "multi", "obj")
        .unwrap();
    assert!(put.rdma && put.bytes == data.len() as u64, "{put:?}");
    drop(reg);
    let mut reg = hipobj.register(vec![0u8; data.len()]).unwrap();
    let got = c
        .get_object(&mut reg, Span::whole(data.len()), "multi", "obj", None)
        .unwrap();
    assert!(got.rdma && got.bytes == data.len() as u64, "{got:?}");
    assert!(reg.to_vec() == data, "the bytes that came back differ");
    drop(reg);
    assert_eq!(h.rdma().unwrap().target().stats().transfers, 2);
    // A client that says its HTTP client does not verify certificates is
    // held to the endpoint check, as over plain http (a hipObject client of
    // its own: no connection already bound to that NIC).
    let hipobj = hipobj_client(hipobj::AllowPeer::default());
    let unverified = RdmaS3Client::new(
        sdk(&h.endpoint(), Some(&bundle)),
        hipobj.clone(),
        rt.handle().clone(),
    )
    .fallback(false)
    .tls_unverified();
    let mut reg = hipobj.register(vec![0u8; data.len()]).unwrap();
    let e = unverified
        .get_object(&mut reg, Span::whole(data.len()), "multi", "obj", None)
        .unwrap_err();
    assert!(e.to_string().contains("not an address of the server"), "{e}");
    assert!(reg.to_vec().iter().all(|b| *b == 0), "bytes landed");
    drop(reg);
    rt.block_on(h.shutdown());

    let plain_dir = dir.path().join("plain");
    std::fs::create_dir(&plain_dir).unwrap();
    let h = server_over(&rt, None, &plain_dir);
    assert!(h.endpoint().starts_with("http://127.0.0.1:"), "{}", h.endpoint());
    let nic = h
        .rdma()
        .and_then(|r| r.target().selection().gid.to_ipv4())
        .unwrap();
    assert_ne!(nic, std::net::Ipv4Addr::LOCALHOST);
    let s3 = sdk(&h.endpoint(), None);
    rt.block_on(s3.create_bucket().bucket("multi").send()).unwrap();
    let hipobj = hipobj_client(hipobj::AllowPeer::default());
    let c = RdmaS3Client::new(s3.clone(), hipobj.clone(), rt.handle().clone()).fallback(false);
    let reg = hipobj.register(data.clone()).unwrap();
    let e = c
        .put_object(&reg, Span::whole(data.len()), "multi", "obj")
        .unwrap_err();
    assert_eq!(e.kind(), hipobj::ErrorKind::RdmaError, "{e}");
    assert!(
        e.to_string().contains("not an address of the server")
            && e.to_string().contains("HIPOBJ_ALLOW_PEER_GID"),
        "{e}"
    );
    drop(reg);
    let mut reg = hipobj.register(vec![0u8; data.len()]).unwrap();
    let e = c
        .get_object(&mut reg, Span::whole(data.len()), "multi", "obj", None)
        .unwrap_err();
    assert!(e.to_string().contains("not an address of the server"), "{e}");
    drop(reg);
    assert_eq!(h.rdma().unwrap().target().stats().transfers, 0, "no transfer ran");
    let hipobj = hipobj_client(hipobj::AllowPeer::Listed(vec![nic.into()]));
    let c = RdmaS3Client::new(s3, hipobj.clone(), rt.handle().clone()).fallback(false);
    let reg = hipobj.register(data.clone()).unwrap();
    let put = c
        .put_object(&reg, Span::whole(data.len()), "multi", "obj")
        .unwrap();
    assert!(put.rdma, "{put:?}");
    drop(reg);
    let mut reg = hipobj.register(vec![0u8; data.len()]).unwrap();
    let got = c
        .get_object(&mut reg, Span::whole(data.len()), "multi", "obj", None)
        .unwrap();
    assert!(got.rdma && reg.to_vec() == data, "{got:?}");
    drop(reg);
    rt.block_on(h.shutdown());
}
