//! The `hipobj` command against an https endpoint: hipobj-server serving
//! TLS with a certificate from a CA made for the test, RDMA on the soft
//! NIC. `--ca-bundle FILE` and `AWS_CA_BUNDLE` (as the AWS CLI reads them)
//! let it trust that CA; the bytes of a GET and a PUT move by RDMA as over
//! http. Without the bundle, with another CA's, or with a bundle that is
//! not one, it fails with one clear line and nothing reaches the server.
#![allow(clippy::unwrap_used)]

#[path = "../../hipobj-server/tests/support/test_ca.rs"]
mod test_ca;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::Ordering;

use hipobj_server::config::{AccessKey, StorageConfig, VerbsBackend};
use hipobj_server::{Config, Handle, Server};
use test_ca::TestCa;

const AK: &str = "hipobj-cli-tls";
const SK: &str = "hipobj-cli-tls-secret";

struct Env {
    rt: tokio::runtime::Runtime,
    server: Option<Handle>,
    dir: tempfile::TempDir,
    ca: TestCa,
    bundle: PathBuf,
}

impl Env {
    fn start() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("hipobj CLI test CA");
        let files = ca.write_server(dir.path(), "server");
        let bundle = ca.write_bundle(&dir.path().join("ca.pem"));
        let data = dir.path().join("data");
        let mut config = Config {
            address: "127.0.0.1:0".parse().unwrap(),
            credentials: vec![AccessKey {
                access_key: AK.into(),
                secret_key: SK.into(),
            }],
            storage: StorageConfig::Fs {
                data_dir: data.clone(),
            },
            metrics_log_secs: 0,
            shutdown_grace_secs: 2,
            ..Config::default()
        };
        // One key, and the bucket made on disk by hand: no owner records
        // (with them, a bucket that has none refuses every request).
        config.access.bucket_owners = false;
        config.limits.fsync = false;
        config.rdma.enabled = true;
        config.rdma.device = Some(hipobj_system::SOFTROCE_DEFAULT_NAME.into());
        config.rdma.backend = VerbsBackend::Softroce;
        config.tls.cert = Some(files.cert);
        config.tls.key = Some(files.key);
        let server = rt.block_on(Server::start(config)).unwrap();
        std::fs::create_dir_all(data.join("bkt")).unwrap();
        Self {
            rt,
            server: Some(server),
            dir,
            ca,
            bundle,
        }
    }

    fn server(&self) -> &Handle {
        self.server.as_ref().unwrap()
    }

    /// `hipobj args...` with the keys and the https endpoint, no other AWS
    /// or hipObject setting from the test's environment, a bare HOME.
    fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hipobj"));
        for (k, _) in std::env::vars() {
            if k.starts_with("AWS_") || k.starts_with("HIPOBJ_") {
                c.env_remove(k);
            }
        }
        c.env("HOME", self.dir.path())
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", AK)
            .env("AWS_SECRET_ACCESS_KEY", SK)
            .env("AWS_ENDPOINT_URL", self.server().endpoint());
        // The server's soft NIC has a loopback address of its own, not the
        // endpoint's 127.0.0.1, and nothing lists it in
        // HIPOBJ_ALLOW_PEER_GID: over https with the certificate verified,
        // the client takes the server's word for where its NIC is
        // (docs/protocol.md §8).
        c
    }

    /// The server's RDMA NIC's address, which is not the endpoint's.
    fn nic(&self) -> std::net::Ipv4Addr {
        let ip = self
            .server()
            .rdma()
            .and_then(|r| r.target().selection().gid.to_ipv4())
            .unwrap();
        assert_ne!(
            ip,
            std::net::Ipv4Addr::LOCALHOST,
            "the NIC must not be on the endpoint's address"
        );
        ip
    }

    fn requests(&self) -> u64 {
        self.server().metrics().http_requests.load(Ordering::Relaxed)
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            self.rt.block_on(s.shutdown());
        }
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Fails with exactly one error line on stderr, which contains `want`.
fn fails_with(o: &Output, want: &str) {
    assert!(!o.status.success(), "succeeded: {}", stderr(o));
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("hipobj: error:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains(want), "wanted {want:?} in {err}");
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(41) ^ (i >> 11) as u8)
        .collect()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn rdma_put_and_get_over_https_trusting_the_ca_by_flag_and_by_environment() {
    let env = Env::start();
    assert!(env.server().endpoint().starts_with("https://"));
    let src = env.dir.path().join("src.bin");
    let data = pattern((3 << 20) + 17);
    std::fs::write(&src, &data).unwrap();
    let rdma = [
        "--nic-hint",
        hipobj_system::SOFTROCE_DEFAULT_NAME,
        "--require-rdma",
    ];

    let o = env
        .cmd()
        .args([
            "put",
            path(&src),
            "s3://bkt/obj",
            "--ca-bundle",
            path(&env.bundle),
        ])
        .args(rdma)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let dst = env.dir.path().join("out.bin");
    let o = env
        .cmd()
        .env("AWS_CA_BUNDLE", &env.bundle)
        .args(["get", "s3://bkt/obj", path(&dst)])
        .args(rdma)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        std::fs::read(&dst).unwrap() == data,
        "the file that came back differs"
    );
    let stats = env.server().rdma().unwrap().target().stats();
    assert_eq!(stats.transfers, 2, "both moved by RDMA");
    // The flag wins over the environment, as in the AWS CLI.
    let wrong = TestCa::new("someone else's CA").write_bundle(&env.dir.path().join("other.pem"));
    let o = env
        .cmd()
        .env("AWS_CA_BUNDLE", &wrong)
        .args(["get", "s3://bkt/obj", "-", "--ca-bundle", path(&env.bundle)])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stdout == data);
}

/// Issue 38, finding 3 (docs/protocol.md §8): a multi-homed server, its
/// https endpoint on 127.0.0.1 and its RDMA NIC on another address. With the
/// certificate verified, a PUT and a GET move by RDMA out of the box: no
/// `HIPOBJ_ALLOW_PEER_GID`.
#[test]
fn a_server_whose_rdma_nic_is_on_another_address_needs_no_allow_list_over_https() {
    let env = Env::start();
    assert!(env.server().endpoint().starts_with("https://127.0.0.1:"));
    let nic = env.nic();
    let src = env.dir.path().join("mh.bin");
    let data = pattern((1 << 20) + 5);
    std::fs::write(&src, &data).unwrap();
    let rdma = [
        "--nic-hint",
        hipobj_system::SOFTROCE_DEFAULT_NAME,
        "--require-rdma",
        "--ca-bundle",
        path(&env.bundle),
    ];
    let o = env
        .cmd()
        .env_remove("HIPOBJ_ALLOW_PEER_GID")
        .args(["put", path(&src), "s3://bkt/mh"])
        .args(rdma)
        .output()
        .unwrap();
    assert!(o.status.success(), "PUT, NIC at {nic}: {}", stderr(&o));
    let o = env
        .cmd()
        .env_remove("HIPOBJ_ALLOW_PEER_GID")
        .args(["get", "s3://bkt/mh", "-"])
        .args(rdma)
        .output()
        .unwrap();
    assert!(o.status.success(), "GET, NIC at {nic}: {}", stderr(&o));
    assert!(o.stdout == data, "the bytes that came back differ");
    assert_eq!(
        env.server().rdma().unwrap().target().stats().transfers,
        2,
        "both by RDMA"
    );
}

#[test]
fn an_endpoint_the_bundle_does_not_vouch_for_is_refused_with_one_clear_line() {
    let env = Env::start();
    let other = TestCa::new("someone else's CA").write_bundle(&env.dir.path().join("other.pem"));
    let empty = env.dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let (_, key_pem, _) = env.ca.server_cert(&["127.0.0.1"]);
    let key_only = env.dir.path().join("key.pem");
    std::fs::write(&key_only, key_pem).unwrap();
    let before = env.requests();

    // The system's roots only, then another CA (by flag and by env).
    let untrusted = "TLS certificate is not trusted";
    fails_with(
        &env.cmd().args(["get", "s3://bkt/x", "-"]).output().unwrap(),
        untrusted,
    );
    fails_with(
        &env.cmd()
            .args(["get", "s3://bkt/x", "-", "--ca-bundle", path(&other)])
            .output()
            .unwrap(),
        untrusted,
    );
    fails_with(
        &env.cmd()
            .env("AWS_CA_BUNDLE", &other)
            .args(["get", "s3://bkt/x", "-"])
            .output()
            .unwrap(),
        untrusted,
    );
    // Bundles that trust nothing are errors, not an empty trust store.
    let missing = env.dir.path().join("missing.pem");
    for (bundle, want) in [
        (&missing, "cannot be read"),
        (&empty, "no CERTIFICATE"),
        (&key_only, "no CERTIFICATE"),
    ] {
        fails_with(
            &env.cmd()
                .args(["get", "s3://bkt/x", "-", "--ca-bundle", path(bundle)])
                .output()
                .unwrap(),
            want,
        );
    }
    assert_eq!(env.requests(), before, "a request reached the server");
}
