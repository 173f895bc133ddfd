//! One access log line and one count per request (docs/server.md,
//! "Logs"): the [`Record`] starts when the request's head is read, rides
//! with the response body, and is written when that body is done (sent,
//! or dropped with its connection), so its duration and bytes out are the
//! whole response's.
//!
//! The line is an INFO event of target [`TARGET`]: it goes to the server's
//! log, or to `access_log` alone when that file is configured
//! (`crate::logging`). What it holds comes from the request line and the
//! credential's access key id: never the query string (a presigned URL's
//! signature), a header value other than the access key id, or a body.
//! Text a client chose (the key id, bucket, key) is cut at [`MAX_FIELD`]
//! bytes; it holds no control character (hyper and the `http` crate
//! refuse them in a request line, and a header value with one is not
//! read), so it cannot forge a line.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use crate::metrics::{Direction, Metrics};

/// The tracing target of access log lines.
pub(crate) const TARGET: &str = "hipobj_access";

/// The most bytes of a client-chosen field written to a line.
pub(crate) const MAX_FIELD: usize = 1024;

/// Where the S3 access policy writes the operation s3s resolved (a request
/// extension; `crate::s3::access`).
#[derive(Clone, Debug, Default)]
pub(crate) struct OperationSlot(Arc<OnceLock<&'static str>>);

impl OperationSlot {
    /// Notes the operation, one of [`crate::operation`]'s names (the
    /// first note stays).
    pub(crate) fn set(&self, name: &'static str) {
        let _ = self.0.set(name);
    }
}

/// One request, from its head to its response's end.
#[derive(Debug)]
pub(crate) struct Record {
    start: Instant,
    remote: Option<SocketAddr>,
    access_key: Option<String>,
    method: http::Method,
    bucket: String,
    key: String,
    rdma: bool,
    request_id: String,
    slot: OperationSlot,
    fixed: Option<&'static str>,
    status: Option<u16>,
    bytes_in: Arc<AtomicU64>,
    bytes_out: u64,
    metrics: Arc<Metrics>,
}

/// A new request id: 16 upper-case hex digits, as `x-amz-request-id`.
pub(crate) fn new_request_id() -> String {
    let id = uuid::Uuid::new_v4().simple().to_string().to_ascii_uppercase();
    id[..16].to_owned()
}

impl Record {
    /// Starts the record of `req`, whose response will carry `request_id`.
    pub(crate) fn begin<B>(req: &http::Request<B>, request_id: String, metrics: Arc<Metrics>) -> Self {
        let path = req.uri().path();
        let (bucket, key) = match path.trim_start_matches('/').split_once('/') {
            Some((b, k)) => (b, k),
            None => (path.trim_start_matches('/'), ""),
        };
        let rdma = req.headers().contains_key(hipobj_proto::TOKEN_HEADER)
            || path.starts_with(hipobj_proto::rc_v2::PATH_PREFIX);
        Self {
            start: Instant::now(),
            remote: req.extensions().get::<crate::rdma::ClientAddr>().map(|a| a.0),
            access_key: access_key_id(req.headers(), req.uri().query()).map(cut),
            method: req.method().clone(),
            bucket: cut(bucket.to_owned()),
            key: cut(key.to_owned()),
            rdma,
            request_id,
            slot: OperationSlot::default(),
            fixed: None,
            status: None,
            bytes_in: Arc::new(AtomicU64::new(0)),
            bytes_out: 0,
            metrics,
        }
    }

    /// The slot the access policy fills.
    pub(crate) fn slot(&self) -> OperationSlot {
        self.slot.clone()
    }

    /// Names the operation of a request the server answers itself.
    pub(crate) fn set_operation(&mut self, name: &'static str) {
        self.fixed = Some(name);
    }

    /// Notes the response's status.
    pub(crate) fn set_status(&mut self, status: http::StatusCode) {
        self.status = Some(status.as_u16());
    }

    /// `body`, its bytes counted into this record and the metrics.
    pub(crate) fn count_request<B>(&self, body: B) -> Counted<B> {
        Counted {
            inner: body,
            direction: Direction::In,
            bytes: self.bytes_in.clone(),
            metrics: self.metrics.clone(),
        }
    }

    fn operation(&self) -> &'static str {
        self.fixed
            .or_else(|| self.slot.0.get().copied())
            .unwrap_or(crate::operation::UNKNOWN)
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        let took = self.start.elapsed();
        let operation = self.operation();
        if let Some(status) = self.status {
            self.metrics.record_request(operation, status, took);
        }
        let remote = self.remote.map_or_else(|| "-".to_owned(), |a| a.to_string());
        tracing::info!(
            target: TARGET,
            remote = %remote,
            access_key = %self.access_key.as_deref().unwrap_or("-"),
            method = %self.method,
            bucket = %self.bucket,
            key = %self.key,
            operation,
            status = self.status.unwrap_or(0),
            bytes_in = self.bytes_in.load(Ordering::Relaxed),
            bytes_out = self.bytes_out,
            duration_ms = took.as_secs_f64() * 1e3,
            transport = if self.rdma { "rdma" } else { "http" },
            request_id = %self.request_id,
            "access"
        );
    }
}

/// `s` cut to [`MAX_FIELD`] bytes at a character boundary.
fn cut(mut s: String) -> String {
    if s.len() > MAX_FIELD {
        let mut at = MAX_FIELD;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
    }
    s
}

/// The access key id a request is signed with: SigV4's `Credential=` (in
/// `Authorization` or `X-Amz-Credential`), or SigV2's `AWS id:` and
/// `AWSAccessKeyId`. Only the id: the text after it (the scope, the
/// signature) is not kept.
pub(crate) fn access_key_id(headers: &http::HeaderMap, query: Option<&str>) -> Option<String> {
    if let Some(auth) = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        if let Some(at) = auth.find("Credential=") {
            let rest = &auth[at + "Credential=".len()..];
            return rest.split(['/', ',', ' ']).next().map(str::to_owned);
        }
        if let Some(rest) = auth.strip_prefix("AWS ") {
            return rest.split(':').next().map(str::to_owned);
        }
        return None;
    }
    for kv in query?.split('&') {
        let (name, value) = kv.split_once('=').unwrap_or((kv, ""));
        if name.eq_ignore_ascii_case("X-Amz-Credential") {
            let decoded = value.replace("%2F", "/").replace("%2f", "/");
            return decoded.split('/').next().map(str::to_owned);
        }
        if name == "AWSAccessKeyId" {
            return Some(value.to_owned());
        }
    }
    None
}

/// A body whose data bytes are counted (request bodies into their record
/// and the metrics, response bodies into the metrics and, at its end, the
/// record it carries).
#[derive(Debug)]
pub(crate) struct Counted<B> {
    inner: B,
    direction: Direction,
    bytes: Arc<AtomicU64>,
    metrics: Arc<Metrics>,
}

impl<B> Body for Counted<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(f))) = &r
            && let Some(d) = f.data_ref()
        {
            let n = d.len() as u64;
            this.bytes.fetch_add(n, Ordering::Relaxed);
            this.metrics.add_http_bytes(this.direction, n);
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that writes its request's [`Record`] when it is done.
#[derive(Debug)]
pub(crate) struct Logged {
    inner: Counted<s3s::Body>,
    record: Record,
}

impl Logged {
    /// `body`, counted, with `record` written when it ends.
    pub(crate) fn new(body: s3s::Body, record: Record) -> Self {
        Self {
            inner: Counted {
                inner: body,
                direction: Direction::Out,
                bytes: Arc::new(AtomicU64::new(0)),
                metrics: record.metrics.clone(),
            },
            record,
        }
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        self.record.bytes_out = self.inner.bytes.load(Ordering::Relaxed);
    }
}

impl Body for Logged {
    type Data = Bytes;
    type Error = s3s::StdError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, s3s::StdError>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(auth: &str) -> http::HeaderMap {
        let mut m = http::HeaderMap::new();
        m.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_str(auth).unwrap_or_else(|e| panic!("{e}")),
        );
        m
    }

    #[test]
    fn only_the_access_key_id_is_taken_from_a_credential() {
        let v4 = h(
            "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/s3/aws4_request, \
                    SignedHeaders=host, Signature=abcdef0123",
        );
        assert_eq!(access_key_id(&v4, None).as_deref(), Some("AKID"));
        assert_eq!(
            access_key_id(&h("AWS AKID:c2lnbmF0dXJl"), None).as_deref(),
            Some("AKID")
        );
        let q = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F20260101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Signature=abcdef";
        assert_eq!(
            access_key_id(&http::HeaderMap::new(), Some(q)).as_deref(),
            Some("AKID")
        );
        assert_eq!(access_key_id(&http::HeaderMap::new(), Some("a=b")), None);
        assert_eq!(access_key_id(&h("Bearer x"), None), None);
    }

    #[test]
    fn long_fields_are_cut_at_a_character_boundary() {
        let s = "é".repeat(MAX_FIELD);
        let c = cut(s);
        assert!(c.len() <= MAX_FIELD && c.chars().all(|ch| ch == 'é'));
    }
}
