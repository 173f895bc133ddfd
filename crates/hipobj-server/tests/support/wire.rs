//! Raw HTTP/1.1 from a chosen loopback source address (127.0.0.x), for
//! tests that play several clients at once: an attacker on one address,
//! honest clients on others. Requests are written byte by byte; responses
//! are read by their `Content-Length`.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// A TCP connection to `to` whose source address is `from`.
pub(crate) async fn connect_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpSocket::new_v4()?;
    s.bind(SocketAddr::from((from, 0)))?;
    s.connect(to).await
}

/// One response: its status, its head (lowercase names), its body.
#[derive(Debug)]
pub(crate) struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name`.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one response (head, then `Content-Length` bytes of body) from
/// `s`; `buf` keeps what was read past it.
pub(crate) async fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Response> {
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_owned());
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let mut chunk = [0u8; 16 << 10];
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the connection closed before a response",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| bad("no status line"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    buf.drain(..head_end + 4);
    while buf.len() < len {
        let mut chunk = [0u8; 16 << 10];
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the connection closed inside a body",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = buf.drain(..len).collect();
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// Sends `req` on a fresh connection from `from` and reads the response,
/// within `limit`.
pub(crate) async fn request_from(
    from: Ipv4Addr,
    to: SocketAddr,
    req: &[u8],
    limit: Duration,
) -> std::io::Result<Response> {
    tokio::time::timeout(limit, async {
        let mut s = connect_from(from, to).await?;
        s.write_all(req).await?;
        read_response(&mut s, &mut Vec::new()).await
    })
    .await
    .unwrap_or_else(|_| {
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no response in time",
        ))
    })
}

/// The server's `/.hipobj/metrics` text, asked from 127.0.0.1.
pub(crate) async fn metrics(server: SocketAddr) -> String {
    let r = request_from(
        Ipv4Addr::LOCALHOST,
        server,
        b"GET /.hipobj/metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    String::from_utf8_lossy(&r.body).into_owned()
}

/// The value of the unlabelled metric `name` in `text` (read by the
/// Prometheus parser, `super::metrics`), -1 if it is not there.
pub(crate) fn metric(text: &str, name: &str) -> i64 {
    super::metrics::value(text, name).map_or(-1, |v| v as i64)
}

/// Whether the server closes `s` (EOF or reset) within `limit`, reading
/// and dropping whatever it sends first.
pub(crate) async fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    tokio::time::timeout(limit, async {
        let mut b = [0u8; 4096];
        loop {
            match s.read(&mut b).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// A signed hipobj-rc-v2 control request (service `hipobj`, as the
/// upstream client signs) for `path` with `headers`.
pub(crate) fn control(path: &str, headers: &[(&'static str, String)], key: (&str, &str)) -> Vec<u8> {
    let sigv4 = hipobj_server::rdma::sigv4::amz_date_now();
    let date = sigv4;
    let mut all: Vec<(String, String)> = vec![
        ("host".into(), "127.0.0.1".into()),
        ("x-amz-date".into(), date.clone()),
    ];
    all.extend(headers.iter().map(|(n, v)| ((*n).to_owned(), v.clone())));
    let auth = hipobj_server::rdma::sigv4::sign("POST", path, &all, key.0, key.1, &date);
    let mut req = format!("POST {path} HTTP/1.1\r\n");
    for (n, v) in &all {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str(&format!("authorization: {auth}\r\ncontent-length: 0\r\n\r\n"));
    req.into_bytes()
}
