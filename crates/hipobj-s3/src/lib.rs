//! hipObject with aws-sdk-s3: GetObject (with an optional Range),
//! PutObject and UploadPart straight into and out of memory registered
//! with a [`hipobj::Client`], the bytes moved by the server with RDMA.
//!
//! [`RdmaS3Client`] pairs an [`aws_sdk_s3::Client`] with a
//! [`hipobj::Client`]. Each call runs one hipObject transfer
//! (docs/protocol.md §3) whose [`hipobj::Control`] is an ordinary SDK call
//! with the token in the `x-amz-rdma-token` header:
//!
//! - the header is added by `customize().mutate_request`, which runs before
//!   SigV4 signing, so the token is among the signed headers;
//! - PutObject and UploadPart send no body (`Content-Length: 0`) and sign
//!   `UNSIGNED-PAYLOAD`; the server READs the bytes from the buffer;
//! - request checksums are only computed where S3 requires them and SDK
//!   retries are off for these requests: a checksum of the empty body would
//!   be wrong, and a retried request would pair one reply with another
//!   request's token exchange; a transfer that failed before any byte could
//!   move (no connection, `503 SlowDown`) is run again whole, with a new
//!   token ([`TokenRetries`]);
//! - the response's `x-amz-rdma-reply`, `x-amz-rdma-bytes-transferred`,
//!   `ETag` and status are read from the raw response by an interceptor, so
//!   the reply of a `409` binding answer, which the SDK turns into an error,
//!   is still seen.
//!
//! When the server declines RDMA (reply `501`, HTTP 501 with no reply, or a
//! plain success with no reply header at all: a server that does not speak
//! the protocol), the call falls back to plain HTTP through the same
//! registered buffer and says so in [`Transfer::declined`]; never silently.
//! [`RdmaS3Client::fallback`] turns that off. The plain-HTTP transfers are
//! the [`plain`] module's, for callers with no RDMA client too; several
//! gateways in front of one store are [`FailoverClient`] and, for plain
//! clients, [`PlainFailover`] (one policy, [`Failover`]).
//!
//! # Threads
//!
//! The calls are blocking. Each SDK request is driven with
//! [`tokio::runtime::Handle::block_on`] on the runtime handle given to
//! [`RdmaS3Client::new`], from inside the transfer's callbacks, on the
//! calling thread. So call them from a thread that is not running
//! asynchronous code of that runtime: a plain thread, `main` outside
//! `block_on`, or [`tokio::task::spawn_blocking`]. A multi-thread runtime
//! is needed (its workers drive the connections while the caller blocks).
//! The client is cheap to clone, and many threads may run transfers at
//! once; each takes one of the hipObject client's connections.
//!
//! ```no_run
//! # fn demo(s3: aws_sdk_s3::Client, rt: &tokio::runtime::Runtime) -> Result<(), hipobj_s3::Error> {
//! use hipobj_s3::{RdmaS3Client, Span};
//! let hipobj = hipobj::Client::builder(hipobj_system::platform())
//!     .nic_hint("softroce0")
//!     .build()?;
//! let client = RdmaS3Client::new(s3, hipobj.clone(), rt.handle().clone());
//! let mut reg = hipobj.register(vec![0u8; 1 << 20])?;
//! let got = client.get_object(&mut reg, Span::whole(1 << 20), "bucket", "key", None)?;
//! println!("{} bytes, over RDMA: {}", got.bytes, got.rdma);
//! # Ok(()) }
//! ```

mod args;
mod capture;
pub mod credentials;
mod endpoint;
mod error;
mod failover;
mod parts;
pub mod plain;
mod probe;
mod rc_v2;
mod retry;
pub mod tls;

use std::sync::Arc;

use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::{RequestChecksumCalculation, ResponseChecksumValidation};
use hipobj::{Control, ControlError, ErrorKind, Registration};

pub use args::{CustomerKey, Encryption, ObjectArgs};
use capture::{Capture, Exchange};
pub use error::{Error, Result};
pub use failover::{Failed, Failover, FailoverClient, PlainFailover, RetryPolicy, Served};
pub use parts::Parallel;
pub use probe::{endpoint_proven, note_endpoint_proven};
pub use rc_v2::Protocol;
pub use retry::TokenRetries;

/// Where in a registration a transfer reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// Bytes from the start of the registration.
    pub offset: usize,
    /// Bytes: exactly this many for a PUT or part, and for a GET by RDMA (a
    /// shorter object or range fails with `S3Error`: the server's count must
    /// match); at most this many for a GET that fell back to plain HTTP.
    pub len: usize,
}

impl Span {
    /// `len` bytes from the start.
    pub const fn whole(len: usize) -> Self {
        Self { offset: 0, len }
    }
}

/// What one call did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transfer {
    /// Bytes moved into (GET) or out of (PUT, part) the buffer.
    pub bytes: u64,
    /// The ETag the server returned.
    pub etag: Option<String>,
    /// Whether the bytes moved by RDMA (false: plain HTTP).
    pub rdma: bool,
    /// Why RDMA was not used, when the server declined it.
    pub declined: Option<String>,
    /// The whole object's size, when the response says (`Content-Range` of a
    /// ranged GET, or the length of a plain GET).
    pub object_size: Option<u64>,
    /// The HTTP status of the response that finished the call.
    pub status: u16,
}

impl Transfer {
    /// A call whose bytes moved by RDMA.
    pub(crate) fn by_rdma(bytes: u64, etag: Option<String>, object_size: Option<u64>, status: u16) -> Self {
        Self {
            bytes,
            etag,
            rdma: true,
            declined: None,
            object_size,
            status,
        }
    }
}

/// An S3 client whose GetObject, PutObject and UploadPart move the bytes by
/// RDMA into and out of memory registered with a [`hipobj::Client`].
#[derive(Clone, Debug)]
pub struct RdmaS3Client {
    s3: aws_sdk_s3::Client,
    hipobj: hipobj::Client,
    rt: tokio::runtime::Handle,
    fallback: bool,
    protocol: rc_v2::Memory,
    servers: endpoint::EndpointAddrs,
    args: ObjectArgs,
    retries: TokenRetries,
    /// How large transfers are split ([`Parallel`]).
    parallel: Parallel,
    /// The endpoint's limit on one transfer, once learned.
    limit: parts::Limit,
    /// Whether the S3 client's HTTP client skips verifying an https
    /// endpoint's certificate (see [`RdmaS3Client::tls_unverified`]).
    tls_unverified: bool,
}

/// Why an UploadPart does not go by hipobj-rc-v2.
const NO_V2_PARTS: &str = "this hipobj-rc-v2 server did not advertise parts (x-amz-rdma-capabilities: mp), and hipobj-rc-v2 has no UploadPart without them";

/// Why a client with [`ObjectArgs`] does not use hipobj-rc-v2.
const NO_V2_ARGS: &str = "hipobj-rc-v2 names no object version or encryption";

/// The S3 request a transfer drives.
#[derive(Clone, Copy, Debug)]
enum S3Call<'a> {
    Get { range: Option<&'a str> },
    Put,
    Part { upload_id: &'a str, number: i32 },
}

impl S3Call<'_> {
    fn name(&self) -> &'static str {
        match self {
            S3Call::Get { .. } => "GetObject",
            S3Call::Put => "PutObject",
            S3Call::Part { .. } => "UploadPart",
        }
    }
}

impl RdmaS3Client {
    /// Pairs an S3 client with a hipObject client. SDK calls run on `rt`
    /// (see the crate docs on threads).
    pub fn new(s3: aws_sdk_s3::Client, hipobj: hipobj::Client, rt: tokio::runtime::Handle) -> Self {
        Self {
            s3,
            hipobj,
            rt,
            fallback: true,
            protocol: rc_v2::Memory::default(),
            servers: endpoint::EndpointAddrs::default(),
            args: ObjectArgs::default(),
            retries: TokenRetries::default(),
            parallel: Parallel::default(),
            limit: parts::Limit::default(),
            tls_unverified: false,
        }
    }

    /// Says that the S3 client's HTTP client does not verify an https
    /// endpoint's certificate (one built to skip it): its https answers are
    /// then checked as plain HTTP's are.
    ///
    /// By default a request sent to an `https://` endpoint counts as
    /// authenticated by TLS, as both [`tls::http_client`] and aws-sdk-s3's
    /// own HTTP client verify the certificate against the trusted roots and
    /// the host, with no way to turn that off: a binding reply or PREPARE
    /// answer to it may name the server's RDMA NIC at any unicast address
    /// (a multi-homed server), not only at the endpoint host's addresses
    /// (docs/protocol.md §8). Over plain HTTP the endpoint check stays,
    /// with `HIPOBJ_ALLOW_PEER_GID` for the other addresses.
    #[must_use]
    pub fn tls_unverified(mut self) -> Self {
        self.tls_unverified = true;
        self
    }

    /// How the request `ex` records reached the server: by verified TLS
    /// when it was sent to an `https://` URL and this client's HTTP client
    /// verifies certificates.
    pub(crate) fn channel_of(&self, ex: &Exchange) -> hipobj::ControlChannel {
        if ex.https && !self.tls_unverified {
            hipobj::ControlChannel::VerifiedTls
        } else {
            hipobj::ControlChannel::Unauthenticated
        }
    }

    /// How a transfer whose request carried a token is tried again (see
    /// [`TokenRetries`]; docs/protocol.md, "Retries of requests that carry
    /// a token"): by default 4 tries, pauses from 100 ms doubling up to 5 s,
    /// with jitter.
    #[must_use]
    pub fn token_retries(mut self, retries: TokenRetries) -> Self {
        self.retries = retries;
        self
    }

    /// This client with `args` (a version to read, an encryption) on every
    /// request it sends. Clients are cheap to clone: one per object's
    /// arguments is fine. hipobj-rc-v2 has no field for them, so a client
    /// with arguments never moves bytes by rc-v2 (an rc-v2 server's
    /// transfers fall back to plain HTTP, or fail without fallback).
    pub fn object_args(mut self, args: ObjectArgs) -> Self {
        self.args = args;
        self
    }

    /// The addresses of `host`, the host a request went to: over plain
    /// HTTP, the only ones a binding reply or a PREPARE answer to it may
    /// name the server QP at (docs/protocol.md §8; `HIPOBJ_ALLOW_PEER_GID`
    /// adds more, or turns the check off; over verified https any unicast
    /// address passes, see [`RdmaS3Client::tls_unverified`]). Resolved once
    /// per host.
    pub fn server_addrs(&self, host: &str) -> Vec<std::net::IpAddr> {
        self.servers.resolve(host)
    }

    /// Which RDMA protocol the endpoint was found to speak (shared by the
    /// clones of this client). The first transfer finds out: the binding
    /// exchange first; on `501` with `x-amz-rdma-protocol-status:
    /// unsupported`, hipobj-rc-v2; plain HTTP last, said in
    /// [`Transfer::declined`]. Later transfers go straight to what was
    /// found.
    pub fn protocol(&self) -> Protocol {
        self.protocol.get()
    }

    /// This client with `protocol` taken as found for its endpoint, without
    /// asking: for a server the program knows (one it started itself).
    /// Taking [`Protocol::Binding`] for a server that ignores the token
    /// lets a PutObject store an empty object there (docs/protocol.md, "A
    /// token never harms a server that ignores it").
    #[must_use]
    pub fn known_protocol(self, protocol: Protocol) -> Self {
        self.protocol.set(protocol);
        self
    }

    /// Whether a declined transfer falls back to plain HTTP (the default) or
    /// fails with [`Error::is_declined`].
    #[must_use]
    pub fn fallback(mut self, allow: bool) -> Self {
        self.fallback = allow;
        self
    }

    /// The S3 client.
    pub fn s3(&self) -> &aws_sdk_s3::Client {
        &self.s3
    }

    /// The hipObject client.
    pub fn hipobj(&self) -> &hipobj::Client {
        &self.hipobj
    }

    /// The runtime the SDK runs on.
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        &self.rt
    }

    /// GetObject (with `range`, an HTTP Range value such as
    /// `bytes=0-1023`) into `at` of `reg`. The server writes the object or
    /// the range at `reg`'s `at.offset`; it refuses an object larger than
    /// `at.len` rather than truncating it.
    ///
    /// Without a range, a buffer larger than [`Parallel::part_size`] (or
    /// than the limit the server was seen to set) is filled by ranged GETs
    /// in parallel ([`RdmaS3Client::get_ranges`], after a HeadObject for the
    /// size); so is one whose single transfer the server refused for its
    /// length, the limit then remembered. A client with [`ObjectArgs`]
    /// moves one transfer, as before.
    pub fn get_object(
        &self,
        reg: &mut Registration<'_>,
        at: Span,
        bucket: &str,
        key: &str,
        range: Option<&str>,
    ) -> Result<Transfer> {
        if range.is_none() && self.splits(at.len, false) {
            return self.get_split(reg, at, bucket, key);
        }
        match self.get_single(reg, at, bucket, key, range) {
            Err(e) if range.is_none() && self.args.is_default() && self.learn_limit(&e, at.len) => {
                self.get_split(reg, at, bucket, key)
            }
            r => r,
        }
    }

    /// The object's size, by HeadObject (0 when the answer has none).
    pub(crate) fn object_size(&self, bucket: &str, key: &str) -> Result<u64> {
        let s3 = self.s3.clone();
        let (b, k) = (bucket.to_owned(), key.to_owned());
        Ok(self
            .rt
            .block_on(async move { s3.head_object().bucket(b).key(k).send().await })
            .map_err(|e| Error::from_sdk("HeadObject", &e))?
            .content_length()
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0))
    }

    /// One GetObject transfer.
    pub(crate) fn get_single(
        &self,
        reg: &mut Registration<'_>,
        at: Span,
        bucket: &str,
        key: &str,
        range: Option<&str>,
    ) -> Result<Transfer> {
        let op = S3Call::Get { range };
        match self.protocol.get() {
            Protocol::RcV2 if !self.args.is_default() => {
                return self.declined_get(reg, at, bucket, key, range, op, NO_V2_ARGS.into());
            }
            Protocol::RcV2 => return self.v2_get(reg, at, bucket, key, range, false),
            Protocol::Plain(why) => return self.declined_get(reg, at, bucket, key, range, op, why),
            Protocol::Binding | Protocol::Unknown => {}
        }
        let run = self.run_retried(bucket, key, op, false, |ex| {
            self.hipobj.get(reg, at.offset, at.len, ex)
        });
        let authority = run.last.as_ref().and_then(|e| e.authority.clone());
        if run.spoke {
            // A 409 proves the binding exchange, whatever came after.
            self.proven(authority.clone());
        }
        match self
            .conclude(run.outcome, run.last, op)
            .map_err(|e| e.tried(run.tries))?
        {
            Ok(t) => {
                self.proven(authority);
                Ok(t)
            }
            Err((_, Some(last)))
                if last.unsupported()
                    && self.protocol.get() == Protocol::Unknown
                    && self.args.is_default() =>
            {
                self.v2_get(reg, at, bucket, key, range, true)
            }
            Err((declined, last)) => {
                self.protocol.set(Protocol::Plain(declined.clone()));
                if !self.fallback {
                    return Err(Error::declined(op.name(), declined));
                }
                self.plain_get(reg, at, bucket, key, range, declined, last)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn declined_get(
        &self,
        reg: &mut Registration<'_>,
        at: Span,
        bucket: &str,
        key: &str,
        range: Option<&str>,
        op: S3Call<'_>,
        why: String,
    ) -> Result<Transfer> {
        if !self.fallback {
            return Err(Error::declined(op.name(), why));
        }
        self.plain_get(reg, at, bucket, key, range, why, None)
    }

    /// PutObject of the `at.len` bytes at `at.offset` of `reg`.
    ///
    /// To a server that speaks the binding exchange, or hipobj-rc-v2 with
    /// the `mp` extension, more than [`Parallel::part_size`] bytes (or than
    /// the limit the server was seen to set) go as a multipart upload whose
    /// parts move in parallel ([`RdmaS3Client::upload_parts`]), aborted if
    /// a part fails. A plain server, or a hipobj-rc-v2 one without `mp`,
    /// gets one PutObject. Any server's
    /// refusal of a PutObject for its length also makes it a multipart
    /// upload, the limit then remembered. A client with [`ObjectArgs`]
    /// sends one PutObject, as before.
    pub fn put_object(&self, reg: &Registration<'_>, at: Span, bucket: &str, key: &str) -> Result<Transfer> {
        if self.splits(at.len, true) && self.protocol.get() == Protocol::Unknown {
            // Parts move by RDMA, in parallel, only over the binding
            // exchange: the probe settles the protocol before an upload is
            // made, and a hipobj-rc-v2 or plain server takes the object
            // whole, split only when it refuses it for its length.
            match self.put_probed(reg, at, bucket, key, S3Call::Put) {
                Ok(None) => {}
                Ok(Some(t)) => return Ok(t),
                Err(e) if self.learn_limit(&e, at.len) => return self.put_split(reg, at, bucket, key),
                Err(e) => return Err(e),
            }
        }
        if self.splits(at.len, true) {
            return self.put_split(reg, at, bucket, key);
        }
        match self.put_like(reg, at, bucket, key, S3Call::Put) {
            Err(e) if self.args.is_default() && self.learn_limit(&e, at.len) => {
                self.put_split(reg, at, bucket, key)
            }
            r => r,
        }
    }

    /// UploadPart `number` of multipart upload `upload_id`, from the
    /// `at.len` bytes at `at.offset` of `reg`.
    pub fn upload_part(
        &self,
        reg: &Registration<'_>,
        at: Span,
        bucket: &str,
        key: &str,
        upload_id: &str,
        number: i32,
    ) -> Result<Transfer> {
        self.put_like(reg, at, bucket, key, S3Call::Part { upload_id, number })
    }

    /// The probe's answer for a write to an endpoint not known yet: the
    /// write done whole over hipobj-rc-v2 or plain HTTP, or `None` when the
    /// endpoint speaks the binding exchange (remembered by the probe).
    fn put_probed(
        &self,
        reg: &Registration<'_>,
        at: Span,
        bucket: &str,
        key: &str,
        op: S3Call<'_>,
    ) -> Result<Option<Transfer>> {
        let done = match self.probe(bucket, key, op.name())? {
            probe::Found::Binding => return Ok(None),
            // A server that ignores tokens never sees a body-less write.
            probe::Found::Plain(why) => {
                self.protocol.set(Protocol::Plain(why.clone()));
                self.declined_put(reg, at, bucket, key, op, why)
            }
            probe::Found::Unsure(why) => self.declined_put(reg, at, bucket, key, op, why),
            probe::Found::RcV2 => match op {
                S3Call::Put if self.args.is_default() => self.v2_put(reg, at, bucket, key, op, true),
                S3Call::Put => self.declined_put(reg, at, bucket, key, op, NO_V2_ARGS.into()),
                S3Call::Part { .. } if self.args.is_default() && self.protocol.v2_parts() => {
                    self.v2_put(reg, at, bucket, key, op, true)
                }
                S3Call::Part { .. } if !self.args.is_default() => {
                    self.declined_put(reg, at, bucket, key, op, NO_V2_ARGS.into())
                }
                // No v2 answer seen says the server stores parts: a part is
                // never sent to one that would store it as the object.
                _ => self.declined_put(reg, at, bucket, key, op, NO_V2_PARTS.into()),
            },
        };
        done.map(Some)
    }

    fn put_like(
        &self,
        reg: &Registration<'_>,
        at: Span,
        bucket: &str,
        key: &str,
        op: S3Call<'_>,
    ) -> Result<Transfer> {
        match (self.protocol.get(), op) {
            (Protocol::RcV2, _) if !self.args.is_default() => {
                return self.declined_put(reg, at, bucket, key, op, NO_V2_ARGS.into());
            }
            (Protocol::RcV2, S3Call::Put) => return self.v2_put(reg, at, bucket, key, op, false),
            (Protocol::RcV2, S3Call::Part { .. }) if self.protocol.v2_parts() => {
                return self.v2_put(reg, at, bucket, key, op, false);
            }
            (Protocol::RcV2, _) => {
                return self.declined_put(reg, at, bucket, key, op, NO_V2_PARTS.into());
            }
            (Protocol::Plain(why), _) => return self.declined_put(reg, at, bucket, key, op, why),
            (Protocol::Unknown, _) => {
                if let Some(t) = self.put_probed(reg, at, bucket, key, op)? {
                    return Ok(t);
                }
            }
            (Protocol::Binding, _) => {}
        }
        let run = self.run_retried(bucket, key, op, false, |ex| {
            self.hipobj.put(reg, at.offset, at.len, ex)
        });
        let authority = run.last.as_ref().and_then(|e| e.authority.clone());
        if run.spoke {
            // A 409 proves the binding exchange, whatever came after.
            self.proven(authority.clone());
        }
        match self
            .conclude(run.outcome, run.last, op)
            .map_err(|e| e.tried(run.tries))?
        {
            Ok(t) => {
                self.proven(authority);
                Ok(t)
            }
            Err((declined, _)) => {
                self.protocol.set(Protocol::Plain(declined.clone()));
                self.declined_put(reg, at, bucket, key, op, declined)
            }
        }
    }

    fn declined_put(
        &self,
        reg: &Registration<'_>,
        at: Span,
        bucket: &str,
        key: &str,
        op: S3Call<'_>,
        why: String,
    ) -> Result<Transfer> {
        if !self.fallback {
            return Err(Error::declined(op.name(), why));
        }
        self.plain_put(reg, at, bucket, key, op, why)
    }

    /// Turns a transfer's outcome into a result, or into the reason to fall
    /// back (with the last exchange, whose body a plain GET may reuse).
    #[allow(clippy::type_complexity)]
    fn conclude(
        &self,
        outcome: hipobj::Result<()>,
        last: Option<Exchange>,
        op: S3Call<'_>,
    ) -> Result<std::result::Result<Transfer, (String, Option<Exchange>)>> {
        let Some(last) = last else {
            // The transfer failed before it sent anything.
            return Err(Error::from(outcome.err().unwrap_or_else(|| {
                hipobj::Error::new(
                    ErrorKind::InternalError,
                    "the transfer ended without an S3 exchange",
                )
            })));
        };
        if let Err(e) = outcome {
            let declined = last.declined().map(|why| {
                if !matches!(op, S3Call::Get { .. }) && last.stored_without_rdma() {
                    // Only after a probe found the binding exchange here:
                    // the endpoint mixes servers (docs/protocol.md, "A
                    // token never harms a server that ignores it").
                    format!(
                        "{why}; this endpoint mixes servers that speak the RDMA protocol with servers that do not, and one of the latter may have stored an empty object"
                    )
                } else {
                    why
                }
            });
            return match declined {
                // A 501 pointing to hipobj-rc-v2 is handed back even without
                // fallback: the caller tries v2 before giving up.
                Some(why) if self.fallback || last.unsupported() => Ok(Err((why, Some(last)))),
                Some(why) => Err(Error::declined(op.name(), why)),
                // A binding round the library refused (a server token it
                // will not connect to): its reason, not the 409's.
                None if last.is_bind() => Err(Error::from(e)),
                None => Err(last.error(op.name()).unwrap_or_else(|| Error::from(e))),
            };
        }
        let bytes = match (op, last.bytes) {
            (_, Some(n)) => n,
            (S3Call::Get { .. }, None) => last.range_len().ok_or_else(|| {
                Error::new(
                    ErrorKind::S3Error,
                    "the server reported an RDMA GET as done but not how many bytes it wrote (no x-amz-rdma-bytes-transferred)",
                )
            })?,
            (_, None) => 0,
        };
        Ok(Ok(Transfer::by_rdma(
            bytes,
            last.etag.clone(),
            last.object_size(),
            last.status.unwrap_or(0),
        )))
    }

    #[allow(clippy::too_many_arguments)]
    fn plain_get(
        &self,
        reg: &mut Registration<'_>,
        at: Span,
        bucket: &str,
        key: &str,
        range: Option<&str>,
        declined: String,
        last: Option<Exchange>,
    ) -> Result<Transfer> {
        if at.offset > reg.len() || at.len > reg.len() - at.offset {
            return Err(Error::new(
                ErrorKind::InvalidValue,
                "the span runs past the registration's end",
            ));
        }
        let dst = Span { ..at };
        // A server that ignored the token already sent the body: use it.
        if let Some(ex) = last.filter(|e| e.body.is_some())
            && let Some(body) = &ex.body
        {
            copy_in(reg, dst, 0, body)?;
            return Ok(Transfer {
                bytes: body.len() as u64,
                etag: ex.etag.clone(),
                rdma: false,
                declined: Some(declined),
                object_size: ex.object_size().or(Some(body.len() as u64)),
                status: ex.status.unwrap_or(0),
            });
        }
        let got = self.rt.block_on(plain::get_object_with(
            &self.s3,
            bucket,
            key,
            range,
            &self.args,
            |n, chunk| copy_in(reg, dst, n, chunk),
        ))?;
        Ok(Transfer {
            declined: Some(declined),
            ..got
        })
    }

    fn plain_put(
        &self,
        reg: &Registration<'_>,
        at: Span,
        bucket: &str,
        key: &str,
        op: S3Call<'_>,
        declined: String,
    ) -> Result<Transfer> {
        let mut src = vec![0u8; at.len];
        reg.read_into(at.offset, &mut src).map_err(|_| {
            Error::new(
                ErrorKind::InvalidValue,
                "the span runs past the registration's end",
            )
        })?;
        let body = bytes::Bytes::from(src);
        let sent = self.rt.block_on(async {
            match op {
                S3Call::Part { upload_id, number } => {
                    plain::upload_part_with(&self.s3, bucket, key, upload_id, number, body, &self.args).await
                }
                _ => plain::put_object_with(&self.s3, bucket, key, body, &self.args).await,
            }
        })?;
        Ok(Transfer {
            declined: Some(declined),
            ..sent
        })
    }

    /// Sends `op` with `token` and reports what came back.
    async fn send_rdma(&self, bucket: &str, key: &str, op: S3Call<'_>, token: &str) -> Exchange {
        let cap = Capture::default();
        let header = hipobj_proto::TOKEN_HEADER;
        let t = token.to_owned();
        let inject = move |req: &mut aws_smithy_runtime_api::http::Request| {
            req.headers_mut().insert(header, t.clone());
        };
        let o = rdma_overrides();
        let failure = match op {
            S3Call::Get { range } => {
                let r = self
                    .args
                    .get(self.s3.get_object())
                    .bucket(bucket)
                    .key(key)
                    .set_range(range.map(str::to_owned))
                    .customize()
                    .config_override(o)
                    .mutate_request(inject)
                    .interceptor(cap.clone())
                    .send()
                    .await;
                match r {
                    Ok(out) => match out.body.collect().await {
                        Ok(body) => {
                            let body = body.into_bytes();
                            // Keep a body only when it is the object (no RDMA happened).
                            cap.set_body(body);
                            None
                        }
                        Err(e) => Some(Error::new(
                            ErrorKind::S3Error,
                            format!("reading the GetObject body failed: {e}"),
                        )),
                    },
                    Err(e) => Some(Error::from_sdk("GetObject", &e)),
                }
            }
            S3Call::Put => self
                .args
                .put(self.s3.put_object())
                .bucket(bucket)
                .key(key)
                .customize()
                .config_override(o)
                .disable_payload_signing()
                .mutate_request(inject)
                .interceptor(cap.clone())
                .send()
                .await
                .err()
                .map(|e| Error::from_sdk("PutObject", &e)),
            S3Call::Part { upload_id, number } => self
                .args
                .part(self.s3.upload_part())
                .bucket(bucket)
                .key(key)
                .upload_id(upload_id)
                .part_number(number)
                .customize()
                .config_override(o)
                .disable_payload_signing()
                .mutate_request(inject)
                .interceptor(cap.clone())
                .send()
                .await
                .err()
                .map(|e| Error::from_sdk("UploadPart", &e)),
        };
        cap.finish(failure)
    }
}

/// What [`RdmaS3Client::run_retried`] came to.
struct Run {
    outcome: hipobj::Result<()>,
    last: Option<Exchange>,
    /// Whether an answer of the last try spoke the binding exchange.
    spoke: bool,
    tries: u32,
}

impl RdmaS3Client {
    /// Runs `call`, one hipObject transfer over a fresh [`Exchanger`] (so
    /// a fresh token), and runs it again while it failed in a way that
    /// moved no byte ([`retry::retry_reason`]), up to the client's
    /// [`TokenRetries`], pausing between tries.
    fn run_retried<'a>(
        &'a self,
        bucket: &'a str,
        key: &'a str,
        op: S3Call<'a>,
        probe: bool,
        mut call: impl FnMut(&mut Exchanger<'a>) -> hipobj::Result<()>,
    ) -> Run {
        let mut tries = 0u32;
        loop {
            let mut ex = Exchanger::new(self, bucket, key, op);
            ex.probe = probe;
            let outcome = call(&mut ex);
            tries += 1;
            let last = ex.last.take();
            if outcome.is_err()
                && tries < self.retries.attempts
                && retry::retry_reason(last.as_ref()).is_some()
            {
                std::thread::sleep(self.retries.pause(tries - 1));
                continue;
            }
            return Run {
                outcome,
                last,
                spoke: ex.spoke,
                tries,
            };
        }
    }
}

/// Settings of every request that carries a token.
fn rdma_overrides() -> aws_sdk_s3::config::Builder {
    aws_sdk_s3::config::Builder::default()
        .retry_config(RetryConfig::disabled())
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
}

/// Copies `chunk` to byte `at` of the span `dst` of `reg` (already checked
/// to lie inside it).
fn copy_in(reg: &mut Registration<'_>, dst: Span, at: usize, chunk: &[u8]) -> Result<()> {
    at.checked_add(chunk.len())
        .filter(|&e| e <= dst.len)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::SizeTooLarge,
                format!("the object is larger than the {}-byte buffer", dst.len),
            )
        })?;
    reg.write_from(dst.offset + at, chunk)
        .map_err(|e| Error::new(ErrorKind::InvalidValue, e.to_string()))
}

/// The [`Control`] of one call: each `send_request` is one SDK request.
struct Exchanger<'a> {
    client: &'a RdmaS3Client,
    bucket: &'a str,
    key: &'a str,
    op: S3Call<'a>,
    last: Option<Exchange>,
    /// Whether any answer of this call carried an `x-amz-rdma-reply` other
    /// than `501`: the server speaks the binding exchange.
    spoke: bool,
    /// The call is the probe of `probe.rs`: it ends at the first binding
    /// round, which has answered the question, without a second request.
    probe: bool,
}

impl<'a> Exchanger<'a> {
    fn new(client: &'a RdmaS3Client, bucket: &'a str, key: &'a str, op: S3Call<'a>) -> Self {
        Self {
            client,
            bucket,
            key,
            op,
            last: None,
            spoke: false,
            probe: false,
        }
    }
}

impl Control for Exchanger<'_> {
    fn send_request(&mut self, token: &str) -> std::result::Result<(), ControlError> {
        let ex = self
            .client
            .rt
            .block_on(self.client.send_rdma(self.bucket, self.key, self.op, token));
        let unreachable = ex.status.is_none();
        let why = ex.failure.as_ref().map(ToString::to_string);
        self.spoke |= ex.speaks_binding();
        self.last = Some(ex);
        match (unreachable, why) {
            (true, Some(why)) => Err(ControlError(why)),
            _ => Ok(()),
        }
    }

    fn recv_reply(&mut self, reply: &mut [u8]) -> std::result::Result<usize, ControlError> {
        let Some(ex) = &self.last else {
            return Err(ControlError("no request was sent".into()));
        };
        if self.probe && ex.is_bind() {
            return Err(ControlError(
                "the probe is answered: the server speaks the binding exchange".into(),
            ));
        }
        let Some(value) = &ex.reply else {
            return Err(ControlError(match &ex.failure {
                Some(e) => e.to_string(),
                None => format!(
                    "the {} response (HTTP {}) has no {} header",
                    self.op.name(),
                    ex.status.unwrap_or(0),
                    hipobj_proto::REPLY_HEADER
                ),
            }));
        };
        let dst = reply.get_mut(..value.len()).ok_or_else(|| {
            ControlError(format!(
                "the {} value is {} bytes, longer than any valid reply",
                hipobj_proto::REPLY_HEADER,
                value.len()
            ))
        })?;
        dst.copy_from_slice(value.as_bytes());
        Ok(value.len())
    }

    fn server_addrs(&self) -> Option<Vec<std::net::IpAddr>> {
        let host = self.last.as_ref()?.host.as_deref()?;
        Some(self.client.server_addrs(host))
    }

    fn control_channel(&self) -> hipobj::ControlChannel {
        self.last
            .as_ref()
            .map_or(hipobj::ControlChannel::Unauthenticated, |ex| {
                self.client.channel_of(ex)
            })
    }
}

/// The ETag the server gave each part, as CompleteMultipartUpload wants them.
pub fn completed_part(number: i32, etag: Option<String>) -> aws_sdk_s3::types::CompletedPart {
    aws_sdk_s3::types::CompletedPart::builder()
        .part_number(number)
        .set_e_tag(etag)
        .build()
}

// A shared, `Send` handle is all the callbacks need.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<RdmaS3Client>();
    assert_send_sync::<Arc<RdmaS3Client>>();
};
