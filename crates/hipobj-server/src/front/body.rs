//! What the server checks in a request body while it arrives, before s3s
//! sees it (docs/server.md, "Limits"):
//!
//! * **a minimum rate**: counting only the time the server is waiting for
//!   body bytes, at least `body_min_rate × body_rate_window_secs` bytes must
//!   arrive within each window; a slower body is cut (issue 25, finding 2:
//!   a stalled body held its connection for ever);
//! * **a bound for unsigned requests**: with anonymous access off, a request
//!   carrying no signature may send at most `unauthenticated_body_limit`
//!   bytes. A POST form (`multipart/form-data`) carries its signature in
//!   its fields: it may go past the bound only if one of the fields s3s
//!   verifies (`x-amz-signature`, `signature`) is among its first bytes;
//!   s3s checks it before it reads the file;
//! * **the end of an aws-chunked stream**: a `STREAMING-*` body must end
//!   with its zero-length chunk; one that stops at a chunk boundary would
//!   otherwise pass as complete (issue 25, finding 5).
//!
//! A body that breaks a rule ends in an error, so the store discards what
//! it had of the object, and its connection is closed.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::config::HttpConfig;
use crate::front::conn::ConnState;
use crate::metrics::Metrics;

/// The limits every body gets (from [`HttpConfig`] and `anonymous`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct BodyLimits {
    /// Bytes per second, 0: off.
    pub min_rate: u64,
    /// The rate's window.
    pub window: Duration,
    /// Bytes an unsigned request may send (when anonymous access is off).
    pub unauthenticated: Option<u64>,
}

impl BodyLimits {
    /// The limits `http` sets; unsigned requests are bounded unless
    /// `anonymous`.
    pub(crate) fn new(http: &HttpConfig, anonymous: bool) -> Self {
        Self {
            min_rate: http.body_min_rate,
            window: Duration::from_secs(http.body_rate_window_secs.max(1)),
            unauthenticated: (!anonymous).then_some(http.unauthenticated_body_limit),
        }
    }
}

/// Why a body was cut.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    /// Slower than the floor.
    #[error("the request body arrived slower than {0} bytes/s")]
    TooSlow(u64),
    /// Unsigned, and past the bound.
    #[error("an unsigned request may send at most {0} body bytes")]
    Unauthenticated(u64),
    /// An aws-chunked stream without its final chunk.
    #[error("the aws-chunked body ended without its final zero-length chunk")]
    Unterminated,
    /// The connection failed.
    #[error(transparent)]
    Hyper(#[from] hyper::Error),
}

/// The minimum-rate clock: time spent waiting and bytes got in this window.
#[derive(Debug)]
struct Rate {
    need: u64,
    window: Duration,
    got: u64,
    waited: Duration,
    waiting_since: Option<Instant>,
    timer: Pin<Box<Sleep>>,
}

impl Rate {
    /// Bytes arrived: a slow window fails; a full one starts the next.
    fn arrived(&mut self, n: u64) -> bool {
        if let Some(t) = self.waiting_since.take() {
            self.waited += t.elapsed();
        }
        self.got += n;
        if self.got >= self.need {
            self.got = 0;
            self.waited = Duration::ZERO;
            return true;
        }
        self.waited < self.window
    }

    /// Nothing to read: `false` once the window's waiting is used up.
    fn pending(&mut self, cx: &mut Context<'_>) -> bool {
        let since = *self.waiting_since.get_or_insert_with(Instant::now);
        let deadline = since + self.window.saturating_sub(self.waited);
        if self.timer.deadline() != deadline {
            self.timer.as_mut().reset(deadline);
        }
        self.timer.as_mut().poll(cx).is_pending()
    }
}

/// What an unsigned body may still send.
#[derive(Debug)]
struct Unsigned {
    limit: u64,
    read: u64,
    /// A POST form: its first bytes, searched for a signature field.
    form: Option<Vec<u8>>,
}

impl Unsigned {
    /// `data` arrived: `false` when it goes past the bound.
    fn arrived(&mut self, data: &[u8]) -> Option<bool> {
        self.read = self.read.saturating_add(data.len() as u64);
        if let Some(head) = &mut self.form {
            let room = usize::try_from(self.limit)
                .unwrap_or(usize::MAX)
                .saturating_sub(head.len());
            head.extend_from_slice(&data[..data.len().min(room)]);
            if signed_form(head) {
                // s3s verifies the form's signature before the file.
                return None;
            }
        }
        Some(self.read <= self.limit)
    }
}

/// Whether a form's first bytes hold a field s3s verifies as a signature.
fn signed_form(head: &[u8]) -> bool {
    let lower = head.to_ascii_lowercase();
    [&b"name=\"x-amz-signature\""[..], b"name=\"signature\""]
        .iter()
        .any(|needle| lower.windows(needle.len()).any(|w| w == *needle))
}

/// The aws-chunked framing, followed only to see where it ends.
#[derive(Debug)]
enum Chunks {
    /// A chunk's header line, so far.
    Meta(Vec<u8>),
    /// Data bytes left of a chunk, then its CRLF.
    Data(u64),
    /// The final chunk came (trailers may follow), or the framing is one
    /// s3s will refuse itself.
    Done,
}

/// Longest chunk header line followed.
const MAX_META: usize = 4096;

impl Chunks {
    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            match self {
                Self::Done => return,
                Self::Data(left) => {
                    let n = (*left).min(data.len() as u64);
                    *left -= n;
                    data = &data[usize::try_from(n).unwrap_or(data.len())..];
                    if *left == 0 {
                        *self = Self::Meta(Vec::new());
                    }
                }
                Self::Meta(line) => match data.iter().position(|&b| b == b'\n') {
                    Some(at) => {
                        line.extend_from_slice(&data[..at]);
                        data = &data[at + 1..];
                        *self = Self::after_meta(line);
                    }
                    None => {
                        line.extend_from_slice(data);
                        if line.len() > MAX_META {
                            *self = Self::Done;
                        }
                        return;
                    }
                },
            }
        }
    }

    /// The state after a header line: a CRLF left over from the previous
    /// chunk's data is an empty line; a size of 0 ends the stream.
    fn after_meta(line: &[u8]) -> Self {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            return Self::Meta(Vec::new());
        }
        let size = line.split(|&b| b == b';').next().unwrap_or_default();
        match std::str::from_utf8(size)
            .ok()
            .and_then(|s| u64::from_str_radix(s.trim(), 16).ok())
        {
            Some(0) | None => Self::Done,
            Some(n) => Self::Data(n),
        }
    }
}

/// A request body under the limits of the module documentation.
#[derive(Debug)]
pub(crate) struct Checked {
    inner: Incoming,
    rate: Option<Rate>,
    unsigned: Option<Unsigned>,
    chunks: Option<Chunks>,
    conn: Option<Arc<ConnState>>,
    metrics: Arc<Metrics>,
    failed: bool,
}

impl Checked {
    /// `req`'s body under `limits`; `conn` is closed if the body breaks one.
    pub(crate) fn new(
        req: &http::request::Parts,
        inner: Incoming,
        limits: BodyLimits,
        conn: Option<Arc<ConnState>>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let h = &req.headers;
        let header = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).unwrap_or_default();
        let signed = h.contains_key(http::header::AUTHORIZATION)
            || req.uri.query().is_some_and(|q| {
                q.split('&').any(|kv| {
                    let name = kv.split('=').next().unwrap_or_default();
                    name.eq_ignore_ascii_case("X-Amz-Signature") || name.eq_ignore_ascii_case("Signature")
                })
            });
        let form = req.method == http::Method::POST
            && header("content-type")
                .to_ascii_lowercase()
                .starts_with("multipart/form-data");
        let unsigned = match limits.unauthenticated {
            Some(limit) if !signed => Some(Unsigned {
                limit,
                read: 0,
                form: form.then(Vec::new),
            }),
            _ => None,
        };
        let chunked = header("x-amz-content-sha256").starts_with("STREAMING-");
        let rate = (limits.min_rate > 0).then(|| Rate {
            need: limits.min_rate.saturating_mul(limits.window.as_secs().max(1)),
            window: limits.window,
            got: 0,
            waited: Duration::ZERO,
            waiting_since: None,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
        });
        Self {
            inner,
            rate,
            unsigned,
            chunks: chunked.then(|| Chunks::Meta(Vec::new())),
            conn,
            metrics,
            failed: false,
        }
    }

    /// Ends the body with `e` and closes the connection.
    fn cut(&mut self, e: BodyError) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let m = &self.metrics;
        let counter = match e {
            BodyError::TooSlow(_) => Some((&m.http_bodies_too_slow, "body_min_rate")),
            BodyError::Unauthenticated(_) => {
                Some((&m.http_unauthenticated_bodies_cut, "unauthenticated_body_limit"))
            }
            BodyError::Unterminated => {
                Some((&m.http_chunked_bodies_unterminated, "chunked_body_unterminated"))
            }
            BodyError::Hyper(_) => None,
        };
        if let Some((c, limit)) = counter {
            m.limit_acted(c, limit, || format!("a request body was cut: {e}"));
        }
        self.failed = true;
        if let Some(c) = &self.conn {
            c.close();
        }
        Poll::Ready(Some(Err(e)))
    }
}

impl Body for Checked {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if this.failed {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let n = data.len() as u64;
                    if let Some(r) = &mut this.rate
                        && !r.arrived(n)
                    {
                        let floor = r.need / r.window.as_secs().max(1);
                        return this.cut(BodyError::TooSlow(floor));
                    }
                    if let Some(u) = &mut this.unsigned {
                        match u.arrived(data) {
                            None => this.unsigned = None,
                            Some(true) => {}
                            Some(false) => {
                                let limit = u.limit;
                                return this.cut(BodyError::Unauthenticated(limit));
                            }
                        }
                    }
                    if let Some(c) = &mut this.chunks {
                        c.feed(data);
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => {
                if this.chunks.as_ref().is_some_and(|c| !matches!(c, Chunks::Done)) {
                    return this.cut(BodyError::Unterminated);
                }
                Poll::Ready(None)
            }
            Poll::Pending => {
                if let Some(r) = &mut this.rate
                    && !r.pending(cx)
                {
                    let floor = r.need / r.window.as_secs().max(1);
                    return this.cut(BodyError::TooSlow(floor));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends(stream: &[u8], split: usize) -> bool {
        let mut c = Chunks::Meta(Vec::new());
        let (a, b) = stream.split_at(split.min(stream.len()));
        c.feed(a);
        c.feed(b);
        matches!(c, Chunks::Done)
    }

    #[test]
    fn the_aws_chunked_framing_is_followed_to_its_final_chunk() {
        let sig = ";chunk-signature=".to_owned() + &"0".repeat(64);
        let whole = format!("5{sig}\r\nhello\r\n3{sig}\r\nabc\r\n0{sig}\r\n\r\n");
        let cut = format!("5{sig}\r\nhello\r\n3{sig}\r\nabc\r\n");
        for split in [0, 1, 10, 90, 95, 100, whole.len()] {
            assert!(ends(whole.as_bytes(), split), "split at {split}");
            assert!(!ends(cut.as_bytes(), split), "split at {split}");
        }
        // Unsigned streaming with a trailer.
        assert!(ends(b"3\r\nabc\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n", 7));
        // Data that looks like a final chunk header is skipped as data.
        assert!(!ends(b"5\r\n0\r\n\r\n\r\n", 3));
    }

    #[test]
    fn a_form_is_signed_only_by_a_signature_field() {
        assert!(signed_form(
            b"--b\r\nContent-Disposition: form-data; name=\"X-Amz-Signature\"\r\n\r\nab"
        ));
        assert!(signed_form(
            b"--b\r\ncontent-disposition: form-data; name=\"signature\"\r\n"
        ));
        assert!(!signed_form(
            b"--b\r\ncontent-disposition: form-data; name=\"key\"\r\n\r\nsignature"
        ));
    }
}
