//! A minimal S3 test double over real HTTP/1.1 on 127.0.0.1: it records
//! every request and answers with whatever the test's handler says. The
//! real server's tests (hipobj-server) cover the server; this covers what
//! the client sends and how it reads every kind of answer.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region, RequestChecksumCalculation};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

#[derive(Clone, Debug, Default)]
pub(crate) struct Req {
    pub method: String,
    pub target: String,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Req {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    pub(crate) fn token(&self) -> Option<&str> {
        self.header(hipobj_proto::TOKEN_HEADER)
    }

    /// The SignedHeaders list of the SigV4 Authorization header.
    pub(crate) fn signed_headers(&self) -> Vec<String> {
        let auth = self.header("authorization").unwrap_or("");
        auth.split("SignedHeaders=")
            .nth(1)
            .and_then(|s| s.split(',').next())
            .map(|s| s.split(';').map(str::to_owned).collect())
            .unwrap_or_default()
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub(crate) fn new(status: u16) -> Self {
        Self {
            status,
            ..Self::default()
        }
    }

    pub(crate) fn header(mut self, k: &str, v: impl Into<String>) -> Self {
        self.headers.push((k.to_owned(), v.into()));
        self
    }

    pub(crate) fn body(mut self, b: impl Into<Vec<u8>>) -> Self {
        self.body = b.into();
        self
    }

    /// An S3 XML error.
    pub(crate) fn error(status: u16, code: &str) -> Self {
        Self::new(status)
            .header("content-type", "application/xml")
            .body(format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>{code} from the test double</Message></Error>"
            ))
    }
}

type Handler = dyn Fn(&Req, usize) -> Resp + Send + Sync;

pub(crate) struct Double {
    pub addr: std::net::SocketAddr,
    pub log: Arc<Mutex<Vec<Req>>>,
    /// Whether it serves https ([`start_tls`]).
    pub https: bool,
}

impl Double {
    pub(crate) fn requests(&self) -> Vec<Req> {
        self.log.lock().unwrap().clone()
    }

    pub(crate) fn endpoint(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }
}

/// Starts the double on `rt`; `handler` gets each request and its index.
/// A response of status 0 closes the connection without an answer.
pub(crate) fn start(
    rt: &tokio::runtime::Runtime,
    handler: impl Fn(&Req, usize) -> Resp + Send + Sync + 'static,
) -> Double {
    start_at(rt, "127.0.0.1:0".parse().unwrap(), handler)
}

/// [`start`] on the address `at`.
pub(crate) fn start_at(
    rt: &tokio::runtime::Runtime,
    at: std::net::SocketAddr,
    handler: impl Fn(&Req, usize) -> Resp + Send + Sync + 'static,
) -> Double {
    listen(rt, at, None, handler)
}

/// [`start`] serving https with `tls` (hipobj-server's TLS side, from a
/// certificate the test made).
pub(crate) fn start_tls(
    rt: &tokio::runtime::Runtime,
    tls: hipobj_server::tls::Tls,
    handler: impl Fn(&Req, usize) -> Resp + Send + Sync + 'static,
) -> Double {
    listen(rt, "127.0.0.1:0".parse().unwrap(), Some(tls), handler)
}

fn listen(
    rt: &tokio::runtime::Runtime,
    at: std::net::SocketAddr,
    tls: Option<hipobj_server::tls::Tls>,
    handler: impl Fn(&Req, usize) -> Resp + Send + Sync + 'static,
) -> Double {
    let https = tls.is_some();
    let handler: Arc<Handler> = Arc::new(handler);
    let log = Arc::new(Mutex::new(Vec::new()));
    let listener = rt.block_on(tokio::net::TcpListener::bind(at)).unwrap();
    let addr = listener.local_addr().unwrap();
    let l2 = log.clone();
    rt.spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                return;
            };
            let (h, log) = (handler.clone(), l2.clone());
            let s = hipobj_server::tls::stream(s, tls.as_ref());
            tokio::spawn(async move { serve(s, h, log).await });
        }
    });
    Double { addr, log, https }
}

async fn serve<S>(s: S, h: Arc<Handler>, log: Arc<Mutex<Vec<Req>>>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (r, mut w) = tokio::io::split(s);
    let mut r = BufReader::new(r);
    for _ in 0..10_000 {
        let mut line = String::new();
        if r.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let mut req = Req {
            method: parts.next().unwrap_or("").to_owned(),
            target: parts.next().unwrap_or("").to_owned(),
            ..Req::default()
        };
        loop {
            let mut l = String::new();
            if r.read_line(&mut l).await.unwrap_or(0) == 0 {
                return;
            }
            let l = l.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                req.headers
                    .insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
            }
        }
        let n: usize = req
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        req.body = vec![0; n];
        if r.read_exact(&mut req.body).await.is_err() {
            return;
        }
        let index = {
            let mut l = log.lock().unwrap();
            l.push(req.clone());
            l.len() - 1
        };
        let resp = h(&req, index);
        if resp.status == 0 {
            return;
        }
        let mut out = format!(
            "HTTP/1.1 {} X\r\ncontent-length: {}\r\n",
            resp.status,
            resp.body.len()
        );
        for (k, v) in &resp.headers {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        out.push_str("\r\n");
        let mut bytes = out.into_bytes();
        if req.method != "HEAD" {
            bytes.extend_from_slice(&resp.body);
        }
        if w.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

/// An aws-sdk-s3 client for `endpoint` with a test key.
pub(crate) fn sdk(endpoint: &str) -> aws_sdk_s3::Client {
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("AKTEST", "secret", None, None, "test"))
        .force_path_style(true)
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

/// A multi-thread runtime for the SDK and the double.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A server token: QP 0x99 at ::ffff:127.0.0.1, the address the double
/// listens on (a client refuses a QP on any other host).
pub(crate) fn server_token() -> hipobj_proto::Token {
    server_token_at(std::net::Ipv4Addr::LOCALHOST)
}

/// A server token for QP 0x99 at `ip`.
pub(crate) fn server_token_at(ip: std::net::Ipv4Addr) -> hipobj_proto::Token {
    hipobj_proto::Token {
        transport: hipobj_proto::Transport::Rc,
        qpn: 0x99,
        gid: hipobj_platform::Gid::from_ipv4(ip).0,
        rkey: 0,
        addr: 0,
        len: 0,
        port: 1,
        lid: 0,
    }
}
