//! hipobj-rc-v2 for [`RdmaS3Client`]: the three control requests as
//! SigV4-signed `POST`s on `/.hipobj-rc/`, and the per-endpoint memory of
//! which protocol the server speaks.
//!
//! A control request is built from an ordinary SDK request (HeadObject of
//! the same bucket and key, so endpoint, credentials, region and signing are
//! the client's own) whose method, path and headers are replaced by
//! `mutate_request`, which runs before signing: every `x-amz-rdma-*` header
//! is among the signed headers. The answer is read off the raw response by
//! the same interceptor as a token request's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hipobj::{ErrorKind, RcV2Session, Registration};
use hipobj_proto::rc_v2::{self, UploadPart};

use crate::capture::{Capture, Exchange};
use crate::error::{Error, Result};
use crate::{RdmaS3Client, S3Call, Span, Transfer, rdma_overrides};

/// What an endpoint was found to speak.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    /// Not known yet: the next transfer tries the binding exchange first.
    #[default]
    Unknown,
    /// The binding exchange (`x-amz-rdma-token` on the object request).
    Binding,
    /// hipobj-rc-v2 (PREPARE / READY / CANCEL on `/.hipobj-rc/`).
    RcV2,
    /// Neither: plain HTTP, for the reason given.
    Plain(String),
}

/// The memory shared by clones of one client (one endpoint): what it
/// speaks, and whether its last hipobj-rc-v2 answer advertised the `mp`
/// extension (a PUT session stored as a multipart upload's part).
#[derive(Clone, Debug, Default)]
pub(crate) struct Memory(Arc<Mutex<Protocol>>, Arc<AtomicBool>);

impl Memory {
    pub(crate) fn get(&self) -> Protocol {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub(crate) fn set(&self, p: Protocol) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = p;
    }

    pub(crate) fn v2_parts(&self) -> bool {
        self.1.load(Ordering::Relaxed)
    }

    fn set_v2_parts(&self, yes: bool) {
        self.1.store(yes, Ordering::Relaxed);
    }
}

/// Whether a v2 answer's [`rc_v2::CAPABILITIES_HEADER`] lists
/// [`rc_v2::CAPABILITY_MULTIPART`].
fn advertises_parts<'a>(mut headers: impl Iterator<Item = (&'a str, &'a [u8])>) -> bool {
    headers.any(|(n, v)| n == rc_v2::CAPABILITIES_HEADER && rc_v2::lists_multipart(v))
}

/// How long a PUT waits after sending READY before its write goes out: the
/// server accepts the write only once READY has reached it (RC retransmits
/// an early one, for about half a second).
const PUT_WRITE_DELAY: Duration = Duration::from_millis(20);

/// `scheme://authority` of a URI.
fn origin(uri: &str) -> &str {
    let start = uri.find("://").map_or(0, |i| i + 3);
    match uri[start..].find('/') {
        Some(i) => &uri[..start + i],
        None => uri,
    }
}

/// What a v2 transfer came to.
pub(crate) enum Outcome {
    /// The bytes moved: the count and the ETag (PUT).
    Done(u64, Option<String>),
    /// The server does not speak v2 (PREPARE answered 501 + unsupported).
    Unsupported(String),
}

impl RdmaS3Client {
    /// Sends one control request to `path` with `headers`, signed as the
    /// client signs everything.
    pub(crate) async fn control(
        &self,
        bucket: &str,
        key: &str,
        path: &'static str,
        headers: Vec<(&'static str, String)>,
    ) -> Exchange {
        let cap = Capture::default();
        let mutate = move |req: &mut aws_smithy_runtime_api::http::Request| {
            let _ = req.set_method(rc_v2::METHOD);
            let uri = format!("{}{path}", origin(req.uri()));
            let _ = req.set_uri(uri);
            let h = req.headers_mut();
            for (n, v) in &headers {
                h.insert(*n, v.clone());
            }
            h.insert("content-length", "0");
        };
        let failure = self
            .s3
            .head_object()
            .bucket(bucket)
            .key(key)
            .customize()
            .config_override(rdma_overrides())
            .mutate_request(mutate)
            .interceptor(cap.clone())
            .send()
            .await
            .err()
            .map(|e| Error::from_sdk("hipobj-rc-v2", &e));
        cap.finish(failure)
    }

    fn control_blocking(
        &self,
        bucket: &str,
        key: &str,
        path: &'static str,
        headers: Vec<(&'static str, String)>,
    ) -> Result<Exchange> {
        let ex = self.rt.block_on(self.control(bucket, key, path, headers));
        match (ex.status, &ex.failure) {
            (None, Some(e)) => Err(e.clone()),
            (None, None) => Err(Error::new(ErrorKind::S3Error, format!("{path}: no response"))),
            _ => Ok(ex),
        }
    }

    /// Sends the CANCEL a failed session owes, if it owes one. Its answer
    /// does not matter (204 always); a failure to send it is not reported
    /// over the error that caused it.
    fn cancel(&self, s: &RcV2Session, bucket: &str, key: &str) {
        if let Some(c) = s.cancel_request() {
            let _ = self.control_blocking(bucket, key, rc_v2::CANCEL_PATH, c.to_headers());
        }
    }

    /// Runs one v2 session: PREPARE, connect, READY (with the PUT's write
    /// while READY is open), and the checks of the answer. Any failure after
    /// PREPARE made a session sends CANCEL.
    pub(crate) fn run_v2(
        &self,
        s: &mut RcV2Session,
        bucket: &str,
        key: &str,
        object_offset: Option<u64>,
        part: Option<&UploadPart>,
        probing: bool,
    ) -> Result<Outcome> {
        let r = self.run_v2_inner(s, bucket, key, object_offset, part, probing);
        if r.is_err() {
            s.abort();
            self.cancel(s, bucket, key);
        }
        r
    }

    fn run_v2_inner(
        &self,
        s: &mut RcV2Session,
        bucket: &str,
        key: &str,
        object_offset: Option<u64>,
        part: Option<&UploadPart>,
        probing: bool,
    ) -> Result<Outcome> {
        let mut prepare = s.prepare_request(bucket, key, object_offset)?;
        prepare.part = part.cloned();
        let ex = self.control_blocking(bucket, key, rc_v2::PREPARE_PATH, prepare.to_headers())?;
        if ex.unsupported() {
            return Ok(Outcome::Unsupported(
                "the server declined RDMA for both the binding exchange and hipobj-rc-v2 (HTTP 501, x-amz-rdma-protocol-status: unsupported)".into(),
            ));
        }
        let status = ex.status.unwrap_or(0);
        let speaks_v2 = ex
            .rdma_headers()
            .any(|(n, v)| n == rc_v2::PROTOCOL_HEADER && v == rc_v2::PROTOCOL.as_bytes());
        if probing && status != 200 && !speaks_v2 {
            // The first PREPARE to an endpoint that pointed us to v2 did not
            // get a v2 answer: this server does not serve it after all.
            return Ok(Outcome::Unsupported(format!(
                "the server pointed to hipobj-rc-v2, but answered its PREPARE with HTTP {status}"
            )));
        }
        if speaks_v2 {
            // A v2 answer, a refusal included, proves the protocol: a
            // transfer refused for its length (413) is sent again as parts
            // straight to v2.
            self.protocol.set(Protocol::RcV2);
            self.protocol.set_v2_parts(advertises_parts(ex.rdma_headers()));
        }
        if let Some(host) = &ex.host {
            s.expect_server(self.server_addrs(host));
        }
        s.control_channel(self.channel_of(&ex));
        s.prepared_from(status, ex.rdma_headers())
            .map_err(|e| with_status(e, "PREPARE", status))?;
        let ready = s.ready_request()?.to_headers();
        let client = self.clone();
        let (b, k) = (bucket.to_owned(), key.to_owned());
        let task = self
            .rt
            .spawn(async move { client.control(&b, &k, rc_v2::READY_PATH, ready).await });
        if s.direction() == hipobj::Direction::Put {
            std::thread::sleep(PUT_WRITE_DELAY);
        }
        let started = s.start();
        let ex = self.rt.block_on(task).map_err(|e| {
            Error::new(
                ErrorKind::InternalError,
                format!("the READY request's task failed: {e}"),
            )
        })?;
        started?;
        let status = match (ex.status, &ex.failure) {
            (Some(st), _) => st,
            (None, Some(e)) => return Err(e.clone()),
            (None, None) => return Err(Error::new(ErrorKind::S3Error, "READY: no response")),
        };
        let etag = ex
            .rdma_headers()
            .find(|(n, _)| *n == rc_v2::ETAG_HEADER)
            .and_then(|(_, v)| std::str::from_utf8(v).ok().map(str::to_owned));
        let n = s
            .finish_from(status, ex.rdma_headers())
            .map_err(|e| with_status(e, "READY", status))?;
        Ok(Outcome::Done(n, etag))
    }

    /// GetObject by hipobj-rc-v2: one session for the range (or, without
    /// one, for the whole object, whose size a HeadObject finds first: v2
    /// moves exactly the size asked for).
    pub(crate) fn v2_get(
        &self,
        reg: &mut Registration<'_>,
        at: Span,
        bucket: &str,
        key: &str,
        range: Option<&str>,
        probing: bool,
    ) -> Result<Transfer> {
        let (offset, len, object_size) = match range {
            Some(r) => {
                let (o, n) = v2_range(r, at.len).ok_or_else(|| {
                    Error::new(
                        ErrorKind::InvalidValue,
                        format!("hipobj-rc-v2 serves ranges of the form bytes=a-b or bytes=a-, not {r:?}"),
                    )
                })?;
                (o, n, None)
            }
            None => {
                let size = self.object_size(bucket, key)?;
                (0, size, Some(size))
            }
        };
        if len > at.len as u64 {
            return Err(Error::new(
                ErrorKind::SizeTooLarge,
                format!(
                    "the object or range ({len} bytes) is larger than the {}-byte buffer",
                    at.len
                ),
            ));
        }
        if len == 0 {
            return self.plain_get(
                reg,
                at,
                bucket,
                key,
                range,
                "an empty object moves no bytes".into(),
                None,
            );
        }
        let n = usize::try_from(len).map_err(|_| Error::new(ErrorKind::SizeTooLarge, "length"))?;
        let mut s = self.hipobj.rc_v2_get(reg, at.offset, n)?;
        match self.run_v2(&mut s, bucket, key, Some(offset), None, probing)? {
            Outcome::Done(bytes, etag) => {
                self.protocol.set(Protocol::RcV2);
                Ok(Transfer::by_rdma(
                    bytes,
                    etag,
                    object_size,
                    if range.is_some() { 206 } else { 200 },
                ))
            }
            Outcome::Unsupported(why) => {
                drop(s);
                self.protocol.set(Protocol::Plain(why.clone()));
                self.declined_get(reg, at, bucket, key, range, S3Call::Get { range }, why)
            }
        }
    }

    /// One ranged GET by hipobj-rc-v2 into `at` of a registration other
    /// parts fill at the same time: a session of its own (its own QP and
    /// server session). A decline here fails: the first part moved by v2.
    pub(crate) fn v2_get_part(
        &self,
        reg: &Registration<'_>,
        at: Span,
        bucket: &str,
        key: &str,
        range: &str,
    ) -> Result<Transfer> {
        let offset = v2_range(range, at.len)
            .filter(|&(_, n)| n == at.len as u64)
            .map(|(o, _)| o)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidValue,
                    format!("the range {range:?} is not the part's {} bytes", at.len),
                )
            })?;
        let mut s = self.hipobj.rc_v2_get_part(reg, at.offset, at.len)?;
        match self.run_v2(&mut s, bucket, key, Some(offset), None, false)? {
            Outcome::Done(bytes, etag) => Ok(Transfer::by_rdma(bytes, etag, None, 206)),
            Outcome::Unsupported(why) => Err(Error::new(
                ErrorKind::S3Error,
                format!(
                    "GetObject {range}: the server declined hipobj-rc-v2 for this part after moving the first by it ({why}); no part goes over plain HTTP"
                ),
            )),
        }
    }

    /// PutObject by hipobj-rc-v2: one session, the client's write into the
    /// server's staging buffer; for an UploadPart `op`, the part (the `mp`
    /// extension: only to a server that advertised it, as one without it
    /// would store the bytes as the object).
    pub(crate) fn v2_put(
        &self,
        reg: &Registration<'_>,
        at: Span,
        bucket: &str,
        key: &str,
        op: S3Call<'_>,
        probing: bool,
    ) -> Result<Transfer> {
        let part = match op {
            S3Call::Part { upload_id, number } => Some(UploadPart {
                upload_id: upload_id.to_owned(),
                number: u16::try_from(number)
                    .ok()
                    .filter(|n| (1..=UploadPart::MAX_NUMBER).contains(n))
                    .ok_or_else(|| {
                        Error::new(
                            ErrorKind::InvalidValue,
                            format!("part number {number} is not 1 to 10000"),
                        )
                    })?,
            }),
            S3Call::Put | S3Call::Get { .. } => None,
        };
        let mut s = self.hipobj.rc_v2_put(reg, at.offset, at.len)?;
        match self.run_v2(&mut s, bucket, key, None, part.as_ref(), probing)? {
            Outcome::Done(bytes, etag) => {
                self.protocol.set(Protocol::RcV2);
                Ok(Transfer::by_rdma(bytes, etag, None, 200))
            }
            Outcome::Unsupported(why) => {
                drop(s);
                self.protocol.set(Protocol::Plain(why.clone()));
                self.declined_put(reg, at, bucket, key, op, why)
            }
        }
    }
}

fn with_status(e: hipobj::Error, what: &str, status: u16) -> Error {
    let e = Error::new(e.kind(), format!("hipobj-rc-v2 {what} (HTTP {status}): {e}"));
    // A refusal's status, for the split of a transfer the server refused
    // for its length (413).
    if status >= 400 { e.with_status(status) } else { e }
}

/// The object offset and length of a Range value the v2 path can serve:
/// `bytes=a-b` (`b - a + 1` bytes) or `bytes=a-` (`len` bytes from `a`).
pub(crate) fn v2_range(range: &str, len: usize) -> Option<(u64, u64)> {
    let spec = range.trim().strip_prefix("bytes=")?;
    let (a, b) = spec.split_once('-')?;
    let a: u64 = a.trim().parse().ok()?;
    if b.trim().is_empty() {
        return Some((a, len as u64));
    }
    let b: u64 = b.trim().parse().ok()?;
    Some((a, b.checked_sub(a)?.checked_add(1)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_and_ranges() {
        assert_eq!(
            origin("http://127.0.0.1:9000/bkt/key?x-id=1"),
            "http://127.0.0.1:9000"
        );
        assert_eq!(origin("https://h"), "https://h");
        assert_eq!(v2_range("bytes=10-19", 100), Some((10, 10)));
        assert_eq!(v2_range("bytes=10-", 100), Some((10, 100)));
        assert_eq!(v2_range("bytes=-10", 100), None);
        assert_eq!(v2_range("bytes=19-10", 100), None);
    }
}
