//! Request bodies sent with `Transfer-Encoding: chunked` and no length
//! (no `Content-Length`, not aws-chunked): a stream whose size the client
//! did not know when it began (`curl -T -`, a pipe, a generator).
//!
//! s3s needs a body's length to check a signed payload's SHA-256 (and
//! answers `411 MissingContentLength` without one), so the server reads
//! such a body into memory first and hands s3s the bytes with their
//! length. Memory is bounded twice, as a body from a stranger can be as
//! large as he likes:
//!
//! * one body may hold at most `http.unsized_body_limit` bytes; a longer one
//!   is `411 MissingContentLength` (send a Content-Length, or aws-chunked,
//!   for more);
//! * all the bodies being held at once at most `http.unsized_body_budget`;
//!   a body that would go past it is `503 SlowDown`.
//!
//! The bytes are counted against the budget from their arrival until the
//! body handed to s3s is dropped (the store has read it or given up).
//!
//! And only a request whose signature verifies is held at all (issue 37,
//! finding 6: a made-up `Authorization` counted as signed, and 8 such
//! bodies from a stranger took the budget from everyone's streaming
//! uploads). s3s checks the signature only once it has the body, so
//! [`check_signature`] checks what can be checked from the head alone
//! before the first body byte is read: the SigV4 `Authorization` header
//! (over the headers and the literal `x-amz-content-sha256`, a streaming
//! body's seed), or a presigned URL's query signature. An unknown key is
//! `403 InvalidAccessKeyId`, a wrong signature `403 SignatureDoesNotMatch`,
//! anything else that cannot verify (SigV2, out of date, expired)
//! `403 AccessDenied`; the body is never read and the connection closes.
//! A request with no signature at all is left to the rules for unsigned
//! requests (`crate::front::body`, and anonymous access).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};

/// Whether a request's body is chunked with no length the server can use:
/// no `Content-Length`, no aws-chunked decoded length, and a body hyper
/// cannot size.
pub(crate) fn is_unsized<B: Body>(parts: &http::request::Parts, body: &B) -> bool {
    let h = &parts.headers;
    let chunked = h.get_all(http::header::TRANSFER_ENCODING).iter().any(|v| {
        v.to_str()
            .is_ok_and(|v| v.to_ascii_lowercase().contains("chunked"))
    });
    chunked
        && !h.contains_key(http::header::CONTENT_LENGTH)
        && !h.contains_key("x-amz-decoded-content-length")
        && body.size_hint().exact().is_none()
}

/// The bytes all held bodies may take, shared by every connection.
#[derive(Debug)]
pub(crate) struct Budget {
    limit: u64,
    budget: u64,
    held: AtomicU64,
}

/// Why an unsized body was not taken.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    /// Longer than one body may be.
    #[error(
        "a chunked body without Content-Length may be at most {0} bytes; send Content-Length or aws-chunked for more"
    )]
    TooLong(u64),
    /// The server holds as many such bodies as it may.
    #[error("the server holds as many bodies without a length as it may; retry")]
    Busy,
    /// The body failed while arriving (its own error, already counted).
    #[error("reading the body: {0}")]
    Body(String),
    /// The request's signature does not verify: the S3 error code, and
    /// why. No body byte was read.
    #[error("{1}")]
    Signature(&'static str, String),
}

/// Checks, from `parts` alone, that a request whose body would be held is
/// signed by one of `keys` (access key to secret), or carries no signature
/// at all; see the module documentation.
pub(crate) fn check_signature(
    parts: &http::request::Parts,
    keys: &HashMap<String, String>,
) -> Result<(), Refused> {
    use hipobj_target::sigv4::HeadRefusal;
    let headers = crate::rdma::sigv4::header_pairs(&parts.headers);
    match hipobj_target::sigv4::verify_s3_head_at(
        parts.method.as_str(),
        parts.uri.path(),
        parts.uri.query(),
        &headers,
        keys,
        hipobj_target::sigv4::now_secs(),
    ) {
        Ok(_) => Ok(()),
        Err(HeadRefusal::UnknownKey) => Err(Refused::Signature(
            "InvalidAccessKeyId",
            crate::keys::UNKNOWN_KEY.into(),
        )),
        Err(HeadRefusal::BadSignature(why)) => {
            tracing::debug!("a body without a length refused before it was read: {why}");
            Err(Refused::Signature(
                "SignatureDoesNotMatch",
                crate::s3::errors::message_for("SignatureDoesNotMatch").into(),
            ))
        }
        Err(HeadRefusal::Refused(why)) => Err(Refused::Signature("AccessDenied", why)),
    }
}

impl Budget {
    /// At most `limit` bytes a body, `budget` all together.
    pub(crate) fn new(limit: u64, budget: u64) -> Arc<Self> {
        Arc::new(Self {
            limit,
            budget,
            held: AtomicU64::new(0),
        })
    }

    /// Bytes held now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    fn reserve(self: &Arc<Self>, n: u64, hold: &mut Hold) -> Result<(), Refused> {
        if hold.bytes.saturating_add(n) > self.limit {
            return Err(Refused::TooLong(self.limit));
        }
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                h.checked_add(n).filter(|t| *t <= self.budget)
            })
            .map_err(|_| Refused::Busy)?;
        hold.bytes += n;
        Ok(())
    }

    /// Reads all of `body` into memory within the bounds; the bytes, with
    /// their exact length, as a body that gives its bytes back to the
    /// budget when dropped.
    pub(crate) async fn collect<B>(self: &Arc<Self>, mut body: B) -> Result<Held, Refused>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Display,
    {
        let mut hold = Hold {
            budget: self.clone(),
            bytes: 0,
        };
        let mut buf = BytesMut::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| Refused::Body(e.to_string()))?;
            if let Ok(data) = frame.into_data() {
                self.reserve(data.len() as u64, &mut hold)?;
                buf.extend_from_slice(&data);
            }
        }
        Ok(Held {
            data: Some(buf.freeze()),
            _hold: hold,
        })
    }
}

/// Bytes counted against a [`Budget`] until dropped.
#[derive(Debug)]
struct Hold {
    budget: Arc<Budget>,
    bytes: u64,
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// A body read whole: its bytes once, with their exact length.
#[derive(Debug)]
pub(crate) struct Held {
    data: Option<Bytes>,
    _hold: Hold,
}

impl Body for Held {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(
            self.data
                .take()
                .filter(|d| !d.is_empty())
                .map(|d| Ok(Frame::data(d))),
        )
    }

    fn is_end_stream(&self) -> bool {
        self.data.as_ref().is_none_or(Bytes::is_empty)
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{Full, StreamBody};

    type Frames = futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, std::io::Error>>>;

    fn stream(chunks: Vec<&'static [u8]>) -> StreamBody<Frames> {
        let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = chunks
            .into_iter()
            .map(|c| Ok(Frame::data(Bytes::from_static(c))))
            .collect();
        StreamBody::new(futures::stream::iter(frames))
    }

    #[tokio::test]
    async fn a_body_is_held_with_its_length_and_given_back() {
        let b = Budget::new(10, 15);
        let held = b.collect(stream(vec![b"abc", b"defg"])).await.expect("fits");
        assert_eq!(held.size_hint().exact(), Some(7));
        assert_eq!(b.held(), 7);
        let bytes = held.collect().await.expect("infallible").to_bytes();
        assert_eq!(&bytes[..], b"abcdefg");
        assert_eq!(b.held(), 0, "dropping the body gives its bytes back");
    }

    #[tokio::test]
    async fn a_long_body_and_a_full_budget_are_refused_and_leave_nothing_held() {
        let b = Budget::new(10, 15);
        let e = b.collect(stream(vec![b"abcdef", b"ghijk"])).await.err();
        assert!(matches!(e, Some(Refused::TooLong(10))), "{e:?}");
        assert_eq!(b.held(), 0);
        let first = b.collect(stream(vec![b"0123456789"])).await.expect("fits");
        let e = b.collect(stream(vec![b"abc", b"defgh", b"ij"])).await.err();
        assert!(matches!(e, Some(Refused::Busy)), "{e:?}");
        assert_eq!(b.held(), 10, "the refused body gave its bytes back");
        drop(first);
        b.collect(stream(vec![b"abc", b"defgh", b"ij"]))
            .await
            .expect("room again");
    }

    #[test]
    fn only_chunked_bodies_without_a_length_are_unsized() {
        let req = |headers: &[(&str, &str)]| {
            let mut r = http::Request::builder().method("PUT").uri("/b/k");
            for (k, v) in headers {
                r = r.header(*k, *v);
            }
            r.body(()).map(|r| r.into_parts().0)
        };
        let unsized_body = stream(vec![b"x"]);
        let p = req(&[("transfer-encoding", "chunked")]).expect("request");
        assert!(is_unsized(&p, &unsized_body));
        let p = req(&[
            ("transfer-encoding", "chunked"),
            ("x-amz-decoded-content-length", "1"),
        ])
        .expect("request");
        assert!(!is_unsized(&p, &unsized_body));
        let p = req(&[("content-length", "1")]).expect("request");
        assert!(!is_unsized(&p, &unsized_body));
        let p = req(&[]).expect("request");
        assert!(!is_unsized(&p, &Full::new(Bytes::from_static(b"x"))));
    }
}
