//! `hipobj put` and `hipobj get` over plain HTTP (no NIC, so no RDMA
//! client) through two endpoints whose first is dead: every request, the
//! multipart bookkeeping and the parts alike, moves on to the live gateway
//! (hipobj_s3::PlainFailover), says so on stderr, and the bytes are the
//! file's. The server is hipobj-server in-process on 127.0.0.1.
#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

use hipobj_server::config::{AccessKey, StorageConfig};
use hipobj_server::{Config, Server};

const AK: &str = "hipobj-cli-plain";
const SK: &str = "hipobj-cli-plain-secret";

fn hipobj(home: &std::path::Path, endpoints: &str, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hipobj"));
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") || k.starts_with("HIPOBJ_") {
            c.env_remove(k);
        }
    }
    c.env("HOME", home)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", AK)
        .env("AWS_SECRET_ACCESS_KEY", SK)
        .env("AWS_ENDPOINT_URL", endpoints)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn plain_http_put_and_get_fail_over_from_a_dead_gateway() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let data_dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        address: "127.0.0.1:0".parse().unwrap(),
        credentials: vec![AccessKey {
            access_key: AK.into(),
            secret_key: SK.into(),
        }],
        storage: StorageConfig::Fs {
            data_dir: data_dir.path().to_path_buf(),
        },
        metrics_log_secs: 0,
        shutdown_grace_secs: 1,
        ..Config::default()
    };
    // One key, and the bucket made on disk by hand: no owner records
    // (with them, a bucket that has none refuses every request).
    config.access.bucket_owners = false;
    config.limits.fsync = false;
    let server = rt.block_on(Server::start(config)).unwrap();
    std::fs::create_dir(data_dir.path().join("bkt")).unwrap();
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let live = server.endpoint();
    let endpoints = format!("{dead},{live}");
    let failed_over = |err: &str| {
        err.contains(&format!("gateway {dead} failed")) && err.contains(&format!("failing over to {live}"))
    };

    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.bin");
    let data: Vec<u8> = (0..(11usize << 20) + 77)
        .map(|i| (i as u8).wrapping_mul(31) ^ (i >> 11) as u8)
        .collect();
    std::fs::write(&src, &data).unwrap();
    let put = [
        "put",
        src.to_str().unwrap(),
        "s3://bkt/obj",
        "--part-size",
        "5MiB",
    ];
    let o = hipobj(home.path(), &endpoints, &put);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("plain HTTP") && failed_over(&err), "{err}");

    let out = dir.path().join("out.bin");
    let get = [
        "get",
        "s3://bkt/obj",
        out.to_str().unwrap(),
        "--part-size",
        "4MiB",
    ];
    let o = hipobj(home.path(), &endpoints, &get);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(failed_over(&err), "{err}");
    assert!(std::fs::read(&out).unwrap() == data, "the download differs");
    rt.block_on(server.shutdown());
}
