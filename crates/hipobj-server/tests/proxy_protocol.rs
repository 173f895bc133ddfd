//! Issue 39, finding 5: behind a load balancer every client shares the
//! balancer's address. With `http.proxy_protocol_from`, the balancer's
//! connections carry a PROXY protocol header (v2, as HAProxy's
//! `send-proxy-v2` and AWS NLB send it, built here with the `ppp` crate)
//! and the server counts each connection in the share of the client the
//! header names; a connection from anywhere else cannot claim an address.
#![allow(clippy::unwrap_used)]

mod support;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use support::wire::{closed_within, connect_from, metric, metrics, read_response};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The load balancer.
const BALANCER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
/// A client that is not a balancer.
const STRANGER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 4);

fn v2_header(client: SocketAddr) -> Vec<u8> {
    let to: SocketAddr = "10.0.0.1:443".parse().unwrap();
    ppp::v2::Builder::with_addresses(0x21, ppp::v2::Protocol::Stream, (client, to))
        .build()
        .unwrap()
}

fn health() -> &'static [u8] {
    b"GET /.hipobj/health HTTP/1.1\r\nHost: x\r\n\r\n"
}

/// A connection from the balancer for `client`, with one request served
/// on it (so that it is open and idle afterwards).
async fn proxied(server: SocketAddr, client: SocketAddr) -> TcpStream {
    let mut s = connect_from(BALANCER, server).await.unwrap();
    s.write_all(&v2_header(client)).await.unwrap();
    s.write_all(health()).await.unwrap();
    let r = read_response(&mut s, &mut Vec::new()).await.unwrap();
    assert_eq!(r.status, 200, "a request behind the header is served");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_count_the_client_a_trusted_balancer_names() {
    let (h, _dir) = support::start(|c| {
        c.http.max_connections_per_address = 2;
        c.http.proxy_protocol_from = vec![BALANCER.to_string()];
    })
    .await;
    let server = h.addr();
    let alice: SocketAddr = "198.51.100.1:40001".parse().unwrap();
    let bob: SocketAddr = "198.51.100.2:40002".parse().unwrap();

    // Four connections from one balancer address, two clients: each
    // client has its own share of 2, so nothing is closed.
    let mut a1 = proxied(server, alice).await;
    let mut a2 = proxied(server, alice).await;
    let mut b1 = proxied(server, bob).await;
    let mut b2 = proxied(server, bob).await;
    let text = metrics(server).await;
    assert_eq!(metric(&text, "hipobj_http_connections_closed_for_room_total"), 0);

    // Alice's third: her longest-idle connection makes room; Bob's stay.
    let _a3 = proxied(server, alice).await;
    assert!(
        closed_within(&mut a1, Duration::from_secs(5)).await,
        "alice's oldest was not closed"
    );
    let text = metrics(server).await;
    assert_eq!(metric(&text, "hipobj_http_connections_closed_for_room_total"), 1);
    for (s, who) in [
        (&mut a2, "alice's second"),
        (&mut b1, "bob's first"),
        (&mut b2, "bob's second"),
    ] {
        s.write_all(health()).await.unwrap();
        let r = read_response(s, &mut Vec::new()).await;
        assert!(r.is_ok_and(|r| r.status == 200), "{who} connection was closed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_trusted_balancer_may_name_a_client() {
    let (h, _dir) = support::start(|c| {
        c.http.max_connections_per_address = 2;
        c.http.proxy_protocol_from = vec![format!("{BALANCER}/32")];
    })
    .await;
    let server = h.addr();

    // The balancer without a header: closed, nothing served.
    let mut s = connect_from(BALANCER, server).await.unwrap();
    s.write_all(health()).await.unwrap();
    assert!(closed_within(&mut s, Duration::from_secs(5)).await);

    // The balancer with a malformed header: closed.
    let mut s = connect_from(BALANCER, server).await.unwrap();
    s.write_all(b"PROXY TCP4 999.0.0.1 10.0.0.1 1 2\r\n")
        .await
        .unwrap();
    s.write_all(health()).await.unwrap();
    assert!(closed_within(&mut s, Duration::from_secs(5)).await);

    // A stranger sending a header: it is not read as one (the request is
    // malformed HTTP), and the stranger still counts as itself: its third
    // connection takes from its own share, whatever its headers claimed.
    let victim: SocketAddr = "198.51.100.7:1".parse().unwrap();
    let mut s = connect_from(STRANGER, server).await.unwrap();
    s.write_all(&v2_header(victim)).await.unwrap();
    s.write_all(health()).await.unwrap();
    let r = read_response(&mut s, &mut Vec::new()).await;
    assert!(
        r.is_err() || r.is_ok_and(|r| r.status == 400),
        "a stranger's PROXY header was honoured"
    );
    let mut kept = Vec::new();
    for _ in 0..2 {
        let mut s = connect_from(STRANGER, server).await.unwrap();
        s.write_all(health()).await.unwrap();
        assert_eq!(read_response(&mut s, &mut Vec::new()).await.unwrap().status, 200);
        kept.push(s);
    }
    let before = metric(
        &metrics(server).await,
        "hipobj_http_connections_closed_for_room_total",
    );
    let mut s = connect_from(STRANGER, server).await.unwrap();
    s.write_all(health()).await.unwrap();
    assert_eq!(read_response(&mut s, &mut Vec::new()).await.unwrap().status, 200);
    let after = metric(
        &metrics(server).await,
        "hipobj_http_connections_closed_for_room_total",
    );
    assert_eq!(after, before + 1, "the stranger's own share made room");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_balancer_that_sends_nothing_is_dropped_in_time() {
    let (h, _dir) = support::start(|c| {
        c.http.proxy_protocol_from = vec![BALANCER.to_string()];
        c.http.header_read_timeout_secs = 1;
    })
    .await;
    let mut s = connect_from(BALANCER, h.addr()).await.unwrap();
    s.write_all(b"\r\n\r\n\0").await.unwrap();
    assert!(closed_within(&mut s, Duration::from_secs(5)).await);
}
