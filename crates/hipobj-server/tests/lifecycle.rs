//! The binary (flags, config file, SIGTERM/SIGINT) and graceful shutdown
//! of the in-process server.
#![allow(clippy::unwrap_used)]

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::raw;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Starts the binary with `args`, returns it and the address it printed.
fn spawn(args: &[&str]) -> (std::process::Child, std::net::SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hipobj-server"))
        .args(args)
        .env("HIPOBJ_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("{line:?}"));
    (child, addr.parse().unwrap())
}

fn signal(child: &std::process::Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

fn wait(child: &mut std::process::Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "the server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_and_stops_on_sigterm_and_sigint() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    for sig in ["-TERM", "-INT"] {
        let (mut child, addr) = spawn(&[
            "--address",
            "127.0.0.1:0",
            "--data-dir",
            data,
            "--access-key",
            support::AK,
            "--secret-key",
            support::SK,
        ]);
        let c = support::client_for(&format!("http://{addr}"), support::AK, support::SK);
        c.create_bucket()
            .bucket(format!("bkt{}", &sig[1..]).to_lowercase())
            .send()
            .await
            .unwrap();
        let (status, _) = raw(
            addr,
            "GET /.hipobj/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(status, 200);
        signal(&child, sig);
        assert!(wait(&mut child).success(), "{sig}");
    }
    // Both buckets persisted in the data directory.
    assert!(dir.path().join("data/bktterm").is_dir());
    assert!(dir.path().join("data/bktint").is_dir());
}

#[test]
fn the_binary_reads_a_config_file_and_refuses_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("server.toml");
    std::fs::write(
        &cfg,
        format!(
            "address = \"127.0.0.1:0\"\n[[credentials]]\naccess_key = \"a\"\nsecret_key = \"s\"\n\
             [storage]\nkind = \"fs\"\ndata_dir = \"{}\"\n[rdma]\nmax_transfer = 4096\n",
            dir.path().join("d").display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hipobj-server"))
        .args(["--config", cfg.to_str().unwrap(), "--print-config"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("max_transfer = 4096"), "{text}");
    assert!(!text.contains("\"s\""), "the secret is not printed: {text}");

    std::fs::write(&cfg, "adress = 1\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hipobj-server"))
        .args(["--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // No credentials and no anonymous access: refused, not started.
    let out = Command::new(env!("CARGO_BIN_EXE_hipobj-server"))
        .args(["--address", "127.0.0.1:0"])
        .env_remove("HIPOBJ_ACCESS_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_lets_a_request_in_flight_finish() {
    let (h, _dir) = support::start(|c| c.anonymous = true).await;
    let addr = h.addr();
    let (status, _) = raw(
        addr,
        "PUT /bkt HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200);
    // Half a PUT is on the wire when shutdown starts.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"PUT /bkt/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01234")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stopping = tokio::spawn(h.shutdown());
    tokio::time::sleep(Duration::from_millis(200)).await;
    // New connections are refused...
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    // ...and the one in flight completes.
    s.write_all(b"56789").await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .unwrap()
        .unwrap();
}
