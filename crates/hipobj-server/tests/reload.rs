//! SIGHUP and the credentials file, on the `hipobj-server` binary (issue
//! 39, findings 2 and 7): SIGHUP never ends the process, TLS or not; keys
//! added to or removed from the credentials file sign, or are refused,
//! without a restart, and a request in flight is not cut by its key's
//! revocation; a file that cannot be used is refused and the keys in
//! service stay.
#![allow(clippy::unwrap_used)]

mod support;

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use support::wire::read_response;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The binary on `config`, its address, and its log lines as they come.
fn spawn(config: &Path) -> (Child, SocketAddr, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hipobj-server"))
        .args(["--config", config.to_str().unwrap()])
        .env("HIPOBJ_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            eprintln!("server: {line}");
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("server said {line:?}"))
        .parse()
        .unwrap();
    (child, addr, rx)
}

/// Waits for a log line containing `text`.
fn wait_log(rx: &mpsc::Receiver<String>, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(text) => return,
            Ok(_) => {}
            Err(e) => panic!("no log line with {text:?}: {e}"),
        }
    }
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

fn stop(mut child: Child) {
    signal(&child, "-TERM");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            assert!(s.success(), "{s:?}");
            return;
        }
        assert!(Instant::now() < deadline, "the server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn keys_file(path: &Path, keys: &[(&str, &str)]) {
    let text: String = keys
        .iter()
        .map(|(a, s)| format!("[[credentials]]\naccess_key = \"{a}\"\nsecret_key = \"{s}\"\n"))
        .collect();
    std::fs::write(path, text).unwrap();
}

/// The S3 error code ListBuckets signed by `key` gets, or "ok".
async fn answer(addr: SocketAddr, key: (&str, &str)) -> String {
    let c = support::client_for(&format!("http://{addr}"), key.0, key.1);
    match c.list_buckets().send().await {
        Ok(_) => "ok".into(),
        Err(e) => support::code(&e),
    }
}

/// Asks until `key` gets `want`.
async fn until(addr: SocketAddr, key: (&str, &str), want: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = answer(addr, key).await;
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} still gets {got}, not {want}",
            key.0
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const A: (&str, &str) = ("AKALICE", "alice-secret");
const B: (&str, &str) = ("AKBOB", "bob-secret");
const C: (&str, &str) = ("AKCAROL", "carol-secret");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_without_tls_reloads_and_the_process_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("server.toml");
    std::fs::write(
        &cfg,
        format!(
            "address = \"127.0.0.1:0\"\nmetrics_log_secs = 0\n[[credentials]]\naccess_key = \"{}\"\nsecret_key = \"{}\"\n[storage]\nkind = \"fs\"\ndata_dir = \"{}\"\n",
            A.0,
            A.1,
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let (mut child, addr, logs) = spawn(&cfg);
    for _ in 0..3 {
        signal(&child, "-HUP");
        assert_eq!(answer(addr, A).await, "ok", "SIGHUP ended the server");
        wait_log(&logs, "SIGHUP: nothing to reload");
    }
    assert!(child.try_wait().unwrap().is_none(), "SIGHUP ended the server");
    stop(child);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_added_and_revoked_in_the_credentials_file_sign_or_fail_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("credentials.toml");
    keys_file(&keys, &[A]);
    let cfg = dir.path().join("server.toml");
    std::fs::write(
        &cfg,
        format!(
            "address = \"127.0.0.1:0\"\nmetrics_log_secs = 0\ncredentials_file = \"{}\"\n[storage]\nkind = \"fs\"\ndata_dir = \"{}\"\n[limits]\nfsync = false\n",
            keys.display(),
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let (child, addr, logs) = spawn(&cfg);
    assert_eq!(answer(addr, A).await, "ok");
    assert_eq!(answer(addr, B).await, "InvalidAccessKeyId");
    let a = support::client_for(&format!("http://{addr}"), A.0, A.1);
    a.create_bucket().bucket("alice").send().await.unwrap();

    // Added: B signs once the file says so.
    keys_file(&keys, &[A, B]);
    until(addr, B, "ok").await;

    // A PUT signed by A is in flight (head and half its body sent) when A
    // is revoked.
    let body = support::pattern(256 << 10, 3);
    let host = addr.to_string();
    let signed = support::sigv4::sign("PUT", "/alice/in-flight", &host, "UNSIGNED-PAYLOAD", &[], A);
    let mut put = TcpStream::connect(addr).await.unwrap();
    put.write_all(
        signed
            .head(
                "PUT",
                "/alice/in-flight",
                &[("content-length", body.len().to_string())],
            )
            .as_bytes(),
    )
    .await
    .unwrap();
    put.write_all(&body[..body.len() / 2]).await.unwrap();

    // Revoked: A's next request is refused as an unknown key.
    keys_file(&keys, &[B]);
    until(addr, A, "InvalidAccessKeyId").await;
    assert_eq!(answer(addr, B).await, "ok");
    // The request that began before the revocation finishes.
    put.write_all(&body[body.len() / 2..]).await.unwrap();
    let r = read_response(&mut put, &mut Vec::new()).await.unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));

    // A file that cannot be used is refused; the keys in service stay.
    std::fs::write(&keys, "[[credentials]]\naccess_key = \"AKCAROL\"\n").unwrap();
    wait_log(&logs, "credentials file refused");
    assert_eq!(answer(addr, B).await, "ok");
    assert_eq!(answer(addr, C).await, "InvalidAccessKeyId");

    // Back: A again, and C; A's bucket and the object its revoked key
    // finished writing are there.
    keys_file(&keys, &[A, B, C]);
    until(addr, C, "ok").await;
    until(addr, A, "ok").await;
    let got = a
        .get_object()
        .bucket("alice")
        .key("in-flight")
        .send()
        .await
        .unwrap();
    assert!(got.body.collect().await.unwrap().into_bytes()[..] == body[..]);
    stop(child);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_credentials_file_when_polling_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("credentials.toml");
    keys_file(&keys, &[A]);
    let cfg = dir.path().join("server.toml");
    std::fs::write(
        &cfg,
        format!(
            "address = \"127.0.0.1:0\"\nmetrics_log_secs = 0\ncredentials_file = \"{}\"\ncredentials_check_secs = 0\n[storage]\nkind = \"fs\"\ndata_dir = \"{}\"\n",
            keys.display(),
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let (child, addr, logs) = spawn(&cfg);
    keys_file(&keys, &[B]);
    // Not read until SIGHUP.
    assert_eq!(answer(addr, A).await, "ok");
    signal(&child, "-HUP");
    wait_log(&logs, "SIGHUP: credentials reloaded");
    assert_eq!(answer(addr, A).await, "InvalidAccessKeyId");
    assert_eq!(answer(addr, B).await, "ok");
    stop(child);
}
