//! Before the first body-less write to an endpoint: find out, with a
//! request that no server can act on, whether it speaks the protocol.
//!
//! A PutObject or UploadPart that carries a token has no body: a server that
//! ignores the token stores the empty body, replacing the object (in a
//! versioned bucket, adding an empty version). So no such request goes to
//! an endpoint until it has been seen to speak the binding exchange. The
//! probe is a one-byte ranged GetObject of the same key with a GET token
//! over a one-byte buffer of its own: a plain server answers it as a GET
//! (the byte, `404` or `416`), which changes nothing; a server that speaks
//! the binding exchange answers `409` (a binding round: nothing is read or
//! written) or, on a connection already bound to it, moves the byte into
//! the probe's buffer (a `409` ends the probe: it is not sent again after
//! the binding round); an hipobj-rc-v2 server answers `501` with
//! `x-amz-rdma-protocol-status: unsupported` (docs/protocol.md, "A token
//! never harms a server that ignores it").

use std::sync::{Arc, Mutex, PoisonError, Weak};

use hipobj::{ErrorKind, Instance};

use crate::capture::Exchange;
use crate::error::{Error, Result};
use crate::{RdmaS3Client, S3Call};

/// The probe's range: one byte, so that a plain server sends at most one.
const RANGE: &str = "bytes=0-0";

/// What the probe found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// The binding exchange.
    Binding,
    /// `501` + `unsupported`: hipobj-rc-v2, or nothing.
    RcV2,
    /// A server that ignores the token, for the reason given.
    Plain(String),
    /// `404` or `416` with no reply, from an endpoint not proven for this
    /// instance: a plain server, or one that speaks the protocol reached
    /// over a connection something else bound to it (which then answers
    /// as any S3 server would). This write goes over plain HTTP, and
    /// nothing is remembered: the next write asks again.
    Unsure(String),
}

/// Endpoints (`host:port`) that a client over one hipObject instance has
/// seen speak the binding exchange. A probe answered `404` or `416` with no
/// reply may have gone over a connection that another client of the same
/// instance had already bound to that server (which then answers as any S3
/// server would); this tells the two apart.
type Proven = Vec<(Weak<Instance>, String)>;

static PROVEN: Mutex<Proven> = Mutex::new(Vec::new());

fn proven_list() -> std::sync::MutexGuard<'static, Proven> {
    PROVEN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether a transfer of `hipobj` to the endpoint `authority` (`host` or
/// `host:port`, as requests name it) has seen it speak the binding
/// exchange: a `409` or an RDMA success. For front ends that drive
/// transfers themselves (Python's boto3 integration) and share an instance
/// with an [`crate::RdmaS3Client`].
pub fn endpoint_proven(hipobj: &hipobj::Client, authority: &str) -> bool {
    let me = Arc::downgrade(hipobj.instance());
    proven_list()
        .iter()
        .any(|(w, a)| w.ptr_eq(&me) && w.strong_count() > 0 && a == authority)
}

/// Notes that `authority` was seen to speak the binding exchange through
/// `hipobj` (see [`endpoint_proven`]).
pub fn note_endpoint_proven(hipobj: &hipobj::Client, authority: &str) {
    let me = Arc::downgrade(hipobj.instance());
    let mut list = proven_list();
    list.retain(|(w, _)| w.strong_count() > 0);
    if !list.iter().any(|(w, a)| w.ptr_eq(&me) && a == authority) {
        list.push((me, authority.to_owned()));
    }
}

impl RdmaS3Client {
    /// Runs the probe for a write of `bucket`/`key`. A failure to reach the
    /// server, and an S3 error that any request would get (a wrong key or
    /// secret, `5xx`), is the write's error.
    pub(crate) fn probe(&self, bucket: &str, key: &str, op: &str) -> Result<Found> {
        self.probe_as_get(bucket, key)
            .map_err(|e| e.renamed("GetObject", op))
    }

    fn probe_as_get(&self, bucket: &str, key: &str) -> Result<Found> {
        let mut reg = self.hipobj.register(vec![0u8; 1])?;
        let op = S3Call::Get { range: Some(RANGE) };
        let run = self.run_retried(bucket, key, op, true, |ex| self.hipobj.get(&mut reg, 0, 1, ex));
        let (outcome, spoke) = (run.outcome, run.spoke);
        let Some(last) = run.last else {
            return Err(Error::from(outcome.err().unwrap_or_else(|| {
                hipobj::Error::new(ErrorKind::InternalError, "the probe ended without an S3 exchange")
            })));
        };
        if spoke {
            self.proven(last.authority.clone());
            return Ok(Found::Binding);
        }
        classify(&last, self.was_proven(&last), outcome.err())
    }

    /// Whether the endpoint takes an object by RDMA only whole: a
    /// hipobj-rc-v2 server, as rc-v2 has no UploadPart. Asks the endpoint
    /// (a write's probe) when what it speaks is not known yet. A caller
    /// that uploads large objects in parts (the CLI) sends such a server
    /// one PutObject instead.
    pub fn takes_puts_whole(&self, bucket: &str, key: &str) -> Result<bool> {
        match self.protocol.get() {
            crate::Protocol::RcV2 => Ok(true),
            crate::Protocol::Unknown if self.args.is_default() => {
                match self.probe(bucket, key, "PutObject")? {
                    Found::RcV2 => Ok(true),
                    Found::Plain(why) => {
                        self.protocol.set(crate::Protocol::Plain(why));
                        Ok(false)
                    }
                    Found::Binding | Found::Unsure(_) => Ok(false),
                }
            }
            _ => Ok(false),
        }
    }

    /// Notes that `authority`, where the last transfer went, speaks the
    /// binding exchange: for this client (and its clones), and for other
    /// clients over the same hipObject instance.
    pub(crate) fn proven(&self, authority: Option<String>) {
        self.protocol.set(crate::Protocol::Binding);
        if let Some(a) = authority {
            note_endpoint_proven(&self.hipobj, &a);
        }
    }

    fn was_proven(&self, ex: &Exchange) -> bool {
        ex.authority
            .as_deref()
            .is_some_and(|a| endpoint_proven(&self.hipobj, a))
    }
}

/// What a probe answered with no reply of the binding exchange comes to.
fn classify(last: &Exchange, proven: bool, failed: Option<hipobj::Error>) -> Result<Found> {
    if last.unsupported() {
        return Ok(Found::RcV2);
    }
    if let Some(why) = last.declined() {
        return Ok(Found::Plain(why));
    }
    let Some(status) = last.status else {
        // No answer: the connection was refused or broke.
        return Err(last.failure.clone().unwrap_or_else(|| {
            Error::from(failed.unwrap_or_else(|| hipobj::Error::new(ErrorKind::S3Error, "no answer")))
        }));
    };
    let credentials = matches!(
        last.failure.as_ref().and_then(Error::s3_code),
        Some("SignatureDoesNotMatch" | "InvalidAccessKeyId" | "InvalidToken" | "ExpiredToken")
    );
    match status {
        404 | 416 if proven => Ok(Found::Binding),
        404 | 416 => Ok(Found::Unsure(format!(
            "the server did not show that it speaks the RDMA protocol (it answered a GetObject that carried a token with HTTP {status} and no x-amz-rdma-reply header)"
        ))),
        // An S3 answer to the GET itself (read access denied to a writer):
        // what a plain server says.
        400..=499 if !credentials => Ok(Found::Plain(format!(
            "the server does not speak the RDMA protocol (it answered a GetObject that carried a token with HTTP {status} and no x-amz-rdma-reply header)"
        ))),
        _ => Err(last.failure.clone().unwrap_or_else(|| {
            Error::new(
                ErrorKind::S3Error,
                format!("the server answered a GetObject that carried a token with HTTP {status}"),
            )
        })),
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
    fn a_plain_answer_to_the_probe_is_plain_and_never_a_binding() {
        for s in [200, 206, 403] {
            assert!(
                matches!(classify(&ex(s, None), false, None), Ok(Found::Plain(_))),
                "HTTP {s}"
            );
        }
        for s in [404, 416] {
            assert!(
                matches!(classify(&ex(s, None), false, None), Ok(Found::Unsure(_))),
                "HTTP {s}"
            );
        }
        assert!(matches!(
            classify(&ex(501, None), false, None),
            Ok(Found::Plain(_))
        ));
        // A connection another client bound: the server answers 404 itself.
        assert_eq!(classify(&ex(404, None), true, None), Ok(Found::Binding));
        assert!(classify(&ex(403, None), true, None).is_ok_and(|f| f != Found::Binding));
        // Errors any request would get are the write's own.
        assert!(classify(&ex(500, None), false, None).is_err());
        assert!(classify(&Exchange::default(), false, None).is_err());
    }

    #[test]
    fn the_v2_pointer_is_found() {
        let mut e = ex(501, Some("501"));
        e.protocol_status = Some("unsupported".into());
        assert_eq!(classify(&e, false, None), Ok(Found::RcV2));
    }
}
