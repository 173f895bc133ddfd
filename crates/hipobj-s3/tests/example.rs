//! The Rust example (examples/roundtrip.rs) run as a user would run it,
//! against hipobj-server on the soft RoCE NIC: it must PUT and GET a 1 MiB
//! object over RDMA and find the same bytes. Cargo builds examples with the
//! tests, so the binary sits beside this test's.
#![allow(clippy::unwrap_used)]

use std::process::Command;

use hipobj_server::config::{AccessKey, StorageConfig, VerbsBackend};
use hipobj_server::{Config, Server};

#[test]
fn the_roundtrip_example_moves_its_object_over_rdma() {
    let exe = std::env::current_exe().unwrap();
    let example = exe.parent().unwrap().parent().unwrap().join("examples/roundtrip");
    assert!(
        example.exists(),
        "{} was not built (cargo test builds examples unless told not to)",
        example.display()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        address: "127.0.0.1:0".parse().unwrap(),
        credentials: vec![AccessKey {
            access_key: "example-key".into(),
            secret_key: "example-secret".into(),
        }],
        storage: StorageConfig::Fs {
            data_dir: dir.path().to_path_buf(),
        },
        metrics_log_secs: 0,
        ..Config::default()
    };
    config.limits.fsync = false;
    config.rdma.enabled = true;
    config.rdma.device = Some(hipobj_softroce::DEFAULT_NAME.into());
    config.rdma.backend = VerbsBackend::Softroce;
    let h = rt.block_on(Server::start(config)).unwrap();
    let server_ip = h
        .rdma()
        .and_then(|r| r.target().selection().gid.to_ipv4())
        .unwrap();
    // As given, and with --require-rdma (no fallback to plain HTTP).
    for (flag, transfers) in [(None, 2), (Some("--require-rdma"), 4)] {
        let out = Command::new(&example)
            .args(flag)
            .args([
                h.endpoint().as_str(),
                "example-bucket",
                hipobj_softroce::DEFAULT_NAME,
            ])
            .env("AWS_ACCESS_KEY_ID", "example-key")
            .env("AWS_SECRET_ACCESS_KEY", "example-secret")
            // The server's soft NIC has a loopback address of its own, not the
            // endpoint's 127.0.0.1: name it (docs/protocol.md §8).
            .env("HIPOBJ_ALLOW_PEER_GID", server_ip.to_string())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{flag:?}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("PUT 1048576 bytes") && stdout.contains("rdma true"),
            "{stdout}"
        );
        assert!(stdout.contains("round trip OK"), "{stdout}");
        assert!(!stdout.contains("fell back"), "{stdout}");
        assert_eq!(h.rdma().unwrap().target().stats().transfers, transfers);
    }
    rt.block_on(h.shutdown());
}
