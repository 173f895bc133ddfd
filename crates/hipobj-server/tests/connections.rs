//! What the server does with the TCP connections it accepts: socket
//! options (TCP_NODELAY, keep-alive) and the limits that keep slow or idle
//! clients from starving everyone else.
#![allow(clippy::unwrap_used)]

mod support;

use std::net::{SocketAddr, TcpStream as StdTcpStream};
use std::os::fd::OwnedFd;
use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
use support::{client, pattern, start};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The server's end of the connection whose client end is `client`: this
/// process's own descriptors are searched (the server runs in-process) and
/// the matching one is duplicated with pidfd_getfd, so its socket options
/// can be read back exactly as the server left them.
fn server_side(server: SocketAddr, client: SocketAddr) -> StdTcpStream {
    let me = rustix::process::pidfd_open(rustix::process::getpid(), rustix::process::PidfdFlags::empty())
        .expect("pidfd_open");
    for ent in std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd") {
        let ent = ent.expect("fd entry");
        let Ok(target) = std::fs::read_link(ent.path()) else {
            continue;
        };
        if !target.to_string_lossy().starts_with("socket:") {
            continue;
        }
        let Ok(n) = ent.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(fd): Result<OwnedFd, _> =
            rustix::process::pidfd_getfd(&me, n, rustix::process::PidfdGetfdFlags::empty())
        else {
            continue;
        };
        let s = StdTcpStream::from(fd);
        if s.local_addr().ok() == Some(server) && s.peer_addr().ok() == Some(client) {
            return s;
        }
    }
    panic!("no server-side socket for the client {client}");
}

/// A 4 KiB GET from a plain HTTP client: the server's socket has
/// TCP_NODELAY, so a response written in pieces (headers, then body) goes
/// out at once instead of waiting ~40 ms for the client's delayed ACK, and
/// keep-alive probes notice a vanished peer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn accepted_connections_have_tcp_nodelay_and_keepalive() {
    let (h, _dir) = start(|c| c.anonymous = true).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let data = pattern(4096, 1);
    c.put_object()
        .bucket("bkt")
        .key("small")
        .body(ByteStream::from(data.clone()))
        .send()
        .await
        .unwrap();

    let mut s = TcpStream::connect(h.addr()).await.unwrap();
    s.write_all(b"GET /bkt/small HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    while !got.ends_with(&data) {
        let n = tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf))
            .await
            .expect("the response")
            .unwrap();
        assert!(
            n > 0,
            "connection closed early: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );

    let server = server_side(h.addr(), s.local_addr().unwrap());
    assert!(
        server.nodelay().unwrap(),
        "TCP_NODELAY is off on the accepted socket"
    );
    assert!(
        socket2::SockRef::from(&server).keepalive().unwrap(),
        "SO_KEEPALIVE is off on the accepted socket"
    );
    h.shutdown().await;
}

/// Many clients that connect and never finish a request (nothing sent, or
/// half a request head) take every connection slot; the server drops them
/// after its header and idle timeouts, and a signed GET queued behind them
/// is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_clients_are_dropped_and_a_signed_get_is_still_served() {
    let (h, _dir) = start(|c| {
        c.http.max_connections = 8;
        c.http.header_read_timeout_secs = 1;
        c.http.idle_timeout_secs = 2;
    })
    .await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    c.put_object()
        .bucket("bkt")
        .key("k")
        .body(ByteStream::from_static(b"still served"))
        .send()
        .await
        .unwrap();

    let mut slow = Vec::new();
    for i in 0..32 {
        let mut s = TcpStream::connect(h.addr()).await.unwrap();
        if i % 2 == 0 {
            // Half a request head, then silence.
            s.write_all(b"GET /bkt/k HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                .await
                .unwrap();
        }
        slow.push(s);
    }
    let got = tokio::time::timeout(
        Duration::from_secs(60),
        c.get_object().bucket("bkt").key("k").send(),
    )
    .await
    .expect("the signed GET was never served")
    .unwrap();
    let body = got.body.collect().await.unwrap().into_bytes();
    assert_eq!(body.as_ref(), b"still served");

    // Every slow connection was closed by the server (EOF or a reset),
    // none answered with a response.
    for (i, mut s) in slow.into_iter().enumerate() {
        let mut buf = [0u8; 1024];
        let r = tokio::time::timeout(Duration::from_secs(60), s.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("slow client {i} is still connected"));
        match r {
            Ok(0) | Err(_) => {}
            Ok(n) => panic!("slow client {i} got {:?}", String::from_utf8_lossy(&buf[..n])),
        }
    }
    h.shutdown().await;
}

/// A keep-alive connection that stays idle after a request is closed once
/// the idle timeout passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_keep_alive_connections_are_closed() {
    let (h, _dir) = start(|c| {
        c.anonymous = true;
        c.http.idle_timeout_secs = 1;
    })
    .await;
    let mut s = TcpStream::connect(h.addr()).await.unwrap();
    s.write_all(b"GET /.hipobj/health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(60), s.read(&mut buf))
            .await
            .expect("the connection stays open past the idle timeout")
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 200") && text.ends_with("ok\n"),
        "{text}"
    );
    h.shutdown().await;
}

/// Issue 39, finding 5: a client with s5cmd's default of 256 workers, all
/// on one address, keeps every connection it opens: with the default
/// share none is closed for room (with the old share of 64, 192 of them
/// were). Each worker's connection serves a request, then another on the
/// same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_256_workers_on_one_address_keeps_its_connections() {
    let (h, _dir) = start(|_| {}).await;
    let health = b"GET /.hipobj/health HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut workers = Vec::new();
    for _ in 0..256 {
        let mut s = TcpStream::connect(h.addr()).await.unwrap();
        s.write_all(health).await.unwrap();
        let r = support::wire::read_response(&mut s, &mut Vec::new())
            .await
            .unwrap();
        assert_eq!(r.status, 200);
        workers.push(s);
    }
    for s in &mut workers {
        s.write_all(health).await.unwrap();
        let r = support::wire::read_response(s, &mut Vec::new()).await;
        assert!(
            r.is_ok_and(|r| r.status == 200),
            "a worker's connection was closed"
        );
    }
    let text = support::wire::metrics(h.addr()).await;
    assert_eq!(
        support::wire::metric(&text, "hipobj_http_connections_closed_for_room_total"),
        0,
        "{text}"
    );
    assert_eq!(
        support::wire::metric(&text, "hipobj_http_connections_refused_total"),
        0
    );
}
