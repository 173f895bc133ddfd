//! What one token request got back, read off the raw response before the
//! SDK turns it into an output or an error.

use std::sync::{Arc, Mutex, PoisonError};

use aws_sdk_s3::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_s3::error::BoxError;
use bytes::Bytes;

use crate::error::Error;

/// One request and its response.
#[derive(Clone, Debug, Default)]
pub(crate) struct Exchange {
    /// HTTP status; `None` when no response came.
    pub status: Option<u16>,
    /// `x-amz-rdma-reply`.
    pub reply: Option<String>,
    /// `x-amz-rdma-bytes-transferred` (or `x-amz-rdma-bytes`), the count
    /// before any `/total`.
    pub bytes: Option<u64>,
    /// `ETag`.
    pub etag: Option<String>,
    /// `Content-Range`.
    pub content_range: Option<String>,
    /// `Content-Length`.
    pub content_length: Option<u64>,
    /// The body of a GET that came back without a reply (plain HTTP).
    pub body: Option<Bytes>,
    /// The SDK's error, when the call failed.
    pub failure: Option<Error>,
    /// `x-amz-rdma-protocol-status`.
    pub protocol_status: Option<String>,
    /// Every `x-amz-rdma-*` response header, name lowercase (hipobj-rc-v2
    /// answers are read from these).
    pub rdma: Vec<(String, Vec<u8>)>,
    /// The host the request was sent to (after the SDK resolved the
    /// endpoint): the server whose addresses a reply may name.
    pub host: Option<String>,
    /// The request's `host[:port]`.
    pub authority: Option<String>,
    /// Whether the request was sent to an `https://` URL: it went over TLS,
    /// and no response came unless the handshake succeeded.
    pub https: bool,
}

impl Exchange {
    /// Whether the answer was a binding round (a 409 reply naming a server
    /// QP).
    pub(crate) fn is_bind(&self) -> bool {
        self.reply
            .as_deref()
            .and_then(|r| hipobj_proto::parse_reply(r.as_bytes()).ok())
            .is_some_and(|r| matches!(r, hipobj_proto::Reply::Bind { .. }))
    }

    /// Whether the answer carried an `x-amz-rdma-reply` other than `501`
    /// (a binding round, a success, a refusal): the server speaks the
    /// binding exchange.
    pub(crate) fn speaks_binding(&self) -> bool {
        self.reply
            .as_deref()
            .and_then(|r| hipobj_proto::parse_reply(r.as_bytes()).ok())
            .is_some_and(|r| r.http_code() != hipobj_proto::REPLY_NOT_IMPLEMENTED)
    }

    /// Whether a server took the request as a plain one: a success without
    /// an `x-amz-rdma-reply` (for a PutObject, an object stored from the
    /// empty body).
    pub(crate) fn stored_without_rdma(&self) -> bool {
        self.reply.is_none() && self.status.is_some_and(|s| (200..300).contains(&s))
    }

    /// Why RDMA was declined, when it was: reply `501`, HTTP 501 without a
    /// reply, or a success without a reply header (a server that does not
    /// know the protocol).
    pub(crate) fn declined(&self) -> Option<String> {
        let status = self.status?;
        match self.reply.as_deref() {
            Some(r) => {
                let parsed = hipobj_proto::parse_reply(r.as_bytes()).ok()?;
                (parsed.http_code() == hipobj_proto::REPLY_NOT_IMPLEMENTED)
                    .then(|| format!("the server declined RDMA (x-amz-rdma-reply: {r}, HTTP {status})"))
            }
            None if status == 501 => Some("the server declined RDMA (HTTP 501 Not Implemented)".into()),
            None if (200..300).contains(&status) => Some(format!(
                "the server does not speak the RDMA protocol (HTTP {status} without an x-amz-rdma-reply header)"
            )),
            None => None,
        }
    }

    /// Whether the server sent the answer that points a client to
    /// hipobj-rc-v2: HTTP 501 with `x-amz-rdma-protocol-status:
    /// unsupported` (the same answer, to a v2 control request, says the
    /// server does not speak v2 either).
    ///
    /// A 501 reply header counts as well as the status: elbencho's HTTP
    /// library turns the 501 of a declined *ranged* GET into HTTP 416 and
    /// keeps the headers.
    pub(crate) fn unsupported(&self) -> bool {
        let declined = self.status == Some(501) || self.reply.as_deref().map(str::trim) == Some("501");
        declined
            && self.protocol_status.as_deref().is_some_and(|v| {
                v.trim()
                    .eq_ignore_ascii_case(hipobj_proto::rc_v2::PROTOCOL_STATUS_UNSUPPORTED)
            })
    }

    /// The `x-amz-rdma-*` headers as `(name, value)` pairs.
    pub(crate) fn rdma_headers(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.rdma.iter().map(|(n, v)| (n.as_str(), v.as_slice()))
    }

    /// The error the S3 exchange ended in, if it was one.
    pub(crate) fn error(&self, _op: &str) -> Option<Error> {
        self.failure.clone()
    }

    /// The whole object's size, from `Content-Range`.
    pub(crate) fn object_size(&self) -> Option<u64> {
        self.content_range.as_deref().and_then(total_of_content_range)
    }

    /// The length of the range in `Content-Range`.
    pub(crate) fn range_len(&self) -> Option<u64> {
        let r = self.content_range.as_deref()?.trim().strip_prefix("bytes ")?;
        let (span, _) = r.split_once('/')?;
        let (a, b) = span.split_once('-')?;
        let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        b.checked_sub(a)?.checked_add(1)
    }
}

/// The total of `bytes a-b/total`, when it is a number.
pub(crate) fn total_of_content_range(v: &str) -> Option<u64> {
    v.rsplit_once('/')?.1.trim().parse().ok()
}

/// The count of a bytes-transferred value: `N`, or `N/total`.
fn parse_bytes(v: &str) -> Option<u64> {
    v.split('/').next()?.trim().parse().ok()
}

/// An interceptor that keeps what [`Exchange`] needs.
#[derive(Clone, Debug, Default)]
pub(crate) struct Capture(Arc<Mutex<Exchange>>);

impl Capture {
    fn lock(&self) -> std::sync::MutexGuard<'_, Exchange> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn set_body(&self, body: Bytes) {
        self.lock().body = Some(body);
    }

    /// The exchange, with the call's failure.
    pub(crate) fn finish(&self, failure: Option<Error>) -> Exchange {
        let mut ex = self.lock().clone();
        ex.failure = failure;
        if ex.reply.is_some() {
            ex.body = None;
        }
        ex
    }
}

impl Intercept for Capture {
    fn name(&self) -> &'static str {
        "hipobj-rdma-reply"
    }

    fn read_before_transmit(
        &self,
        ctx: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let uri = ctx.request().uri().parse::<http::Uri>().ok();
        let mut ex = self.lock();
        ex.host = uri.as_ref().and_then(|u| u.host().map(str::to_owned));
        ex.authority = uri
            .as_ref()
            .and_then(|u| u.authority().map(|a| a.as_str().to_owned()));
        ex.https = uri
            .as_ref()
            .and_then(http::Uri::scheme_str)
            .is_some_and(|s| s.eq_ignore_ascii_case("https"));
        Ok(())
    }

    fn read_before_deserialization(
        &self,
        ctx: &BeforeDeserializationInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let r = ctx.response();
        let h = r.headers();
        let mut ex = self.lock();
        ex.status = Some(r.status().as_u16());
        ex.reply = h.get(hipobj_proto::REPLY_HEADER).map(str::to_owned);
        ex.bytes = h
            .get(hipobj_proto::BYTES_HEADER)
            .or_else(|| h.get("x-amz-rdma-bytes"))
            .and_then(parse_bytes);
        ex.etag = h.get("etag").map(str::to_owned);
        ex.content_range = h.get("content-range").map(str::to_owned);
        ex.content_length = h.get("content-length").and_then(|v| v.trim().parse().ok());
        ex.protocol_status = h
            .get(hipobj_proto::rc_v2::PROTOCOL_STATUS_HEADER)
            .map(str::to_owned);
        ex.rdma = h
            .iter()
            .filter(|(n, _)| {
                n.len() >= hipobj_proto::rc_v2::HEADER_PREFIX.len()
                    && n[..hipobj_proto::rc_v2::HEADER_PREFIX.len()]
                        .eq_ignore_ascii_case(hipobj_proto::rc_v2::HEADER_PREFIX)
            })
            .map(|(n, v)| (n.to_ascii_lowercase(), v.as_bytes().to_vec()))
            .collect();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(status: u16, reply: Option<&str>) -> Exchange {
        Exchange {
            status: Some(status),
            reply: reply.map(str::to_owned),
            ..Exchange::default()
        }
    }

    #[test]
    fn the_three_ways_to_decline() {
        assert!(ex(501, Some("501")).declined().is_some());
        assert!(ex(200, Some("501")).declined().is_some());
        assert!(ex(501, None).declined().is_some());
        assert!(ex(200, None).declined().is_some());
        assert!(ex(206, None).declined().is_some());
        // Not declines: a real error, a bind, a success, a malformed reply.
        assert!(ex(404, None).declined().is_none());
        assert!(ex(500, Some("500")).declined().is_none());
        assert!(ex(200, Some("200")).declined().is_none());
        assert!(ex(200, Some("5O1")).declined().is_none());
        assert!(Exchange::default().declined().is_none());
    }

    #[test]
    fn what_points_to_v2() {
        let mut e = ex(501, None);
        assert!(!e.unsupported(), "501 alone is a plain decline");
        e.protocol_status = Some("unsupported".into());
        assert!(e.unsupported());
        // elbencho's ranged GET: HTTP 416, reply 501, status header kept.
        let mut e = ex(416, Some("501"));
        e.protocol_status = Some("unsupported".into());
        assert!(e.unsupported());
        let mut e = ex(416, Some("416"));
        e.protocol_status = Some("unsupported".into());
        assert!(!e.unsupported());
    }

    #[test]
    fn ranges_and_counts() {
        let mut e = ex(206, Some("206"));
        e.content_range = Some("bytes 10-19/100".into());
        assert_eq!((e.range_len(), e.object_size()), (Some(10), Some(100)));
        e.content_range = Some("bytes 10-19/*".into());
        assert_eq!((e.range_len(), e.object_size()), (Some(10), None));
        assert_eq!(parse_bytes("42"), Some(42));
        assert_eq!(parse_bytes("42/100"), Some(42));
        assert_eq!(parse_bytes("x"), None);
    }
}
