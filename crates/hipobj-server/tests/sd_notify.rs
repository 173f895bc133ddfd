//! The systemd notify protocol as systemd speaks it (issue 39, finding 1):
//! the real binary, started with `NOTIFY_SOCKET` naming a Unix datagram
//! socket this test binds, must send `READY=1` only once its port answers
//! HTTP, and `STOPPING=1` when SIGTERM begins its stop.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The next datagram on `sock` (the wait bound only keeps a broken server
/// from hanging the test).
fn next_message(sock: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = sock
        .recv(&mut buf)
        .expect("the server sent a notify message (none came: is sd_notify wired in?)");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Whether an HTTP request to `addr` gets an HTTP answer.
fn answers_http(addr: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut head = [0u8; 9];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 ")
}

#[test]
fn ready_after_the_port_answers_and_stopping_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hipobj-server"))
        .args([
            "--address",
            "127.0.0.1:0",
            "--access-key",
            "ak",
            "--secret-key",
            "sk",
            "--data-dir",
        ])
        .arg(dir.path().join("data"))
        .env("NOTIFY_SOCKET", &path)
        .env("HIPOBJ_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();

    // The first message: READY=1, and by then the port answers.
    let ready = next_message(&sock);
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().strip_prefix("listening on ").unwrap().to_owned();
    assert!(answers_http(&addr), "READY=1 came before {addr} answered");

    // SIGTERM: STOPPING=1, then a clean exit.
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let stopping = next_message(&sock);
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping:?}");
    assert!(child.wait().unwrap().success());
}
