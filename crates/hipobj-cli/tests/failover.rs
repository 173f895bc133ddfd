//! `hipobj get` and `hipobj put` through several gateways: three
//! `hipobj-server` processes (RDMA on the soft NIC) in front of one back
//! end, and a gateway killed with SIGKILL while the command's RDMA
//! transfers run through it. The command must succeed through another
//! gateway (a fresh binding there), say on stderr that it failed over, and
//! the bytes must be exactly the file's.
//!
//! The gateways are this test binary run again with `GATEWAY_ENV` naming a
//! config file (a `hipobj-server` binary is not built for this crate's
//! tests); the back end is a hipobj-server with a filesystem store in this
//! process. Waits are bounded loops on observable state, never timed
//! assertions.
#![allow(clippy::unwrap_used)]

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use hipobj_server::config::{AccessKey, StorageConfig};
use hipobj_server::{Config, Server};

const AK: &str = "hipobj-cli-gw";
const SK: &str = "hipobj-cli-gw-secret";
const BACKEND_AK: &str = "backend-key";
const BACKEND_SK: &str = "backend-secret";
const BUCKET: &str = "bkt";
/// Set in the gateway processes: the path of their config.
const GATEWAY_ENV: &str = "HIPOBJ_CLI_TEST_GATEWAY";
const TEST: &str = "get_and_put_fail_over_when_a_gateway_is_killed_mid_transfer";

struct Gateway {
    child: Child,
    addr: std::net::SocketAddr,
}

impl Gateway {
    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs in a gateway process: serves until killed.
fn gateway_main(config: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let text = std::fs::read_to_string(config).unwrap();
    let config = Config::from_toml(&text).unwrap();
    let server = rt.block_on(Server::start(config)).unwrap();
    println!("listening on {}", server.addr());
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    rt.block_on(server.wait());
}

fn spawn_gateway(dir: &Path, n: usize, backend: &str) -> Gateway {
    let cfg = dir.join(format!("gateway-{n}.toml"));
    std::fs::write(
        &cfg,
        format!(
            "address = \"127.0.0.1:0\"\nmetrics_log_secs = 0\nshutdown_grace_secs = 1\n\
             [[credentials]]\naccess_key = \"{AK}\"\nsecret_key = \"{SK}\"\n\
             [storage]\nkind = \"s3\"\nendpoint = \"{backend}\"\naccess_key = \"{BACKEND_AK}\"\nsecret_key = \"{BACKEND_SK}\"\n\
             [rdma]\nenabled = true\ndevice = \"{}\"\nbackend = \"softroce\"\n",
            hipobj_system::SOFTROCE_DEFAULT_NAME,
        ),
    )
    .unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(GATEWAY_ENV, &cfg)
        .env("HIPOBJ_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "gateway {n} ended before it listened"
        );
        // The harness may have written "test NAME ... " on the same line.
        if let Some((_, a)) = line.trim().split_once("listening on ") {
            break a.parse().unwrap();
        }
    };
    // Keep draining its stdout, so that the harness never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    Gateway { child, addr }
}

/// A counter or gauge of a server's metrics, or None if it cannot be read.
fn metric(addr: std::net::SocketAddr, name: &str) -> Option<u64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.write_all(b"GET /.hipobj/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// SIGKILLs `g` as soon as an RDMA transfer is in flight on it, while
/// `cmd` runs. Panics if `cmd` ends first.
fn kill_mid_transfer(g: &mut Gateway, cmd: &mut Child) {
    loop {
        assert!(
            cmd.try_wait().unwrap().is_none(),
            "the command ended before an RDMA transfer was seen in flight on {}",
            g.url()
        );
        if metric(g.addr, "hipobj_rdma_in_flight").unwrap_or(0) > 0 {
            g.child.kill().unwrap();
            g.child.wait().unwrap();
            return;
        }
    }
}

/// `hipobj args...` with the test's credentials, a bare HOME, and the soft
/// NIC required.
fn hipobj(home: &Path, args: &[&str]) -> Command {
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
        // The gateways' soft NICs have loopback addresses of their own, not
        // the endpoints' 127.0.0.1; this test is about failover, not about
        // which server a reply may name (docs/protocol.md section 8).
        .env("HIPOBJ_ALLOW_PEER_GID", "any")
        .args(args)
        .args([
            "--nic-hint",
            hipobj_system::SOFTROCE_DEFAULT_NAME,
            "--require-rdma",
        ]);
    c
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29) ^ (i >> 12) as u8)
        .collect()
}

fn sdk(endpoint: &str, ak: &str, sk: &str) -> aws_sdk_s3::Client {
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_s3::config::Credentials::new(ak, sk, None, None, "test"))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

#[test]
fn get_and_put_fail_over_when_a_gateway_is_killed_mid_transfer() {
    if let Ok(cfg) = std::env::var(GATEWAY_ENV) {
        gateway_main(&cfg);
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        address: "127.0.0.1:0".parse().unwrap(),
        credentials: vec![AccessKey {
            access_key: BACKEND_AK.into(),
            secret_key: BACKEND_SK.into(),
        }],
        storage: StorageConfig::Fs {
            data_dir: dir.path().join("backend-data"),
        },
        metrics_log_secs: 0,
        shutdown_grace_secs: 1,
        ..Config::default()
    };
    config.limits.fsync = false;
    let backend = rt.block_on(Server::start(config)).unwrap();
    let back = sdk(&backend.endpoint(), BACKEND_AK, BACKEND_SK);
    rt.block_on(back.create_bucket().bucket(BUCKET).send()).unwrap();

    let mut gw: Vec<Gateway> = (0..3)
        .map(|n| spawn_gateway(dir.path(), n, &backend.endpoint()))
        .collect();
    let urls: Vec<String> = gw.iter().map(Gateway::url).collect();
    let home = tempfile::tempdir().unwrap();
    let data = pattern((40 << 20) + 4321);
    let src = dir.path().join("src.bin");
    std::fs::write(&src, &data).unwrap();

    // PUT as a multipart upload of 5 MiB parts, the endpoints as a comma
    // list in AWS_ENDPOINT_URL; gateway 0, where it starts, is killed
    // while it RDMA READs a part.
    let mut put = hipobj(
        home.path(),
        &[
            "put",
            src.to_str().unwrap(),
            "s3://bkt/big",
            "--part-size",
            "5MiB",
        ],
    )
    .env("AWS_ENDPOINT_URL", urls.join(","))
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    kill_mid_transfer(&mut gw[0], &mut put);
    let o = put.wait_with_output().unwrap();
    let err = stderr(&o);
    println!("put's stderr:\n{err}");
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!("gateway {} failed", urls[0]))
            && err.contains(&format!("failing over to {}", urls[1])),
        "{err}"
    );
    assert!(!err.contains("plain HTTP"), "{err}");
    let stored = rt
        .block_on(async {
            back.get_object()
                .bucket(BUCKET)
                .key("big")
                .send()
                .await
                .unwrap()
                .body
                .collect()
                .await
        })
        .unwrap()
        .into_bytes();
    assert!(stored[..] == data[..], "the back end holds other bytes");
    // Only the completed object: no upload left open.
    let ups = rt
        .block_on(back.list_multipart_uploads().bucket(BUCKET).send())
        .unwrap();
    assert!(ups.uploads().is_empty(), "{ups:?}");

    // GET in 1 MiB ranges, the endpoints as repeated flags: gateway 0 is
    // gone (the first call moves on), and gateway 1 is killed while it
    // RDMA WRITEs a range, so the rest comes through gateway 2.
    let binds_before = metric(gw[2].addr, "hipobj_rdma_binds_total").unwrap();
    let out = dir.path().join("out.bin");
    let mut get = hipobj(
        home.path(),
        &[
            "get",
            "s3://bkt/big",
            out.to_str().unwrap(),
            "--part-size",
            "1MiB",
        ],
    );
    for u in &urls {
        get.args(["--endpoint-url", u]);
    }
    let mut get = get.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    kill_mid_transfer(&mut gw[1], &mut get);
    let o = get.wait_with_output().unwrap();
    let err = stderr(&o);
    println!("get's stderr:\n{err}");
    assert!(o.status.success(), "{err}");
    assert!(std::fs::read(&out).unwrap() == data, "the download differs");
    for (from, to) in [(0, 1), (1, 2)] {
        assert!(
            err.contains(&format!("gateway {} failed", urls[from]))
                && err.contains(&format!("failing over to {}", urls[to])),
            "no failover from {from} to {to}: {err}"
        );
    }
    assert!(
        metric(gw[2].addr, "hipobj_rdma_binds_total").unwrap() > binds_before,
        "gateway 2 served RDMA without binding the new client"
    );

    // The request's own error is not sent elsewhere: a missing key through
    // the live gateway is a 404, with no failover.
    let o = hipobj(home.path(), &["get", "s3://bkt/missing", "-"])
        .args(["--endpoint-url", &format!("{},{}", urls[2], urls[0])])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("does not exist") && !err.contains("failing over"),
        "{err}"
    );

    // Every gateway in the list gone: one error line that says so.
    let o = hipobj(home.path(), &["get", "s3://bkt/big", "-"])
        .args(["--endpoint-url", &format!("{},{}", urls[0], urls[1])])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(!o.status.success());
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("hipobj: error:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("every one of the 2 endpoints was tried"),
        "{err}"
    );
    assert!(o.stdout.is_empty());

    drop(gw);
    rt.block_on(backend.shutdown());
}
