//! Several gateways in front of one store: a call that finds its gateway
//! gone is sent again to the next one.
//!
//! [`Failover`] is that policy over any list of per-endpoint clients:
//! [`FailoverClient`] holds one [`RdmaS3Client`] per endpoint (all sharing
//! one [`hipobj::Client`], so one pool of connections), and
//! [`PlainFailover`] one [`aws_sdk_s3::Client`] per endpoint, for the
//! requests that carry no token (HeadObject, multipart bookkeeping, and
//! the plain-HTTP transfers of [`crate::plain`] when there is no RDMA
//! client at all). Each holds a current endpoint. A call goes to the
//! current endpoint; when it fails in a way that says the gateway, not the
//! request, is the problem ([`Error::may_fail_over`]: no HTTP response at
//! all, the connection refused or broken before the answer, a plain GET's
//! body cut off, or `502`/`503`/`504`), the client moves on to the next
//! endpoint in the list, waits [`RetryPolicy::backoff`], and sends the call
//! again from the start: a new token, and on a gateway it was not bound
//! to, a fresh binding round (docs/protocol.md §3). It stays on the
//! endpoint that answered.
//!
//! What a retry may repeat: GetObject, PutObject and UploadPart each carry
//! the whole object or part, so sending one again stores the same bytes or
//! reads the object afresh; no call is ever half applied (a gateway that
//! dies while streaming a PUT to its store leaves the store without the
//! object, since the store sees a short body). A PUT whose gateway died
//! after the store committed it, but before the answer, is stored twice
//! with the same bytes; between the two, another writer's version of the
//! same key may have landed, and the retry then replaces it (as any S3
//! client retrying a PUT does). A GET whose gateway died part way may have
//! written part of the object into the buffer: the retry writes all of it;
//! if every attempt fails, the buffer's contents are undefined. Of the
//! other requests a caller sends through [`PlainFailover`], what a repeat
//! does is the caller's to weigh: CompleteMultipartUpload sent again is
//! answered `200` by S3; a CreateMultipartUpload whose answer was lost
//! leaves an upload behind that nothing completes.
//!
//! Errors that are the request's own (`404`, `403`, a bad digest, a buffer
//! too small, a declined transfer with fallback off) are returned at once
//! and never sent elsewhere: another gateway over the same store would say
//! the same.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hipobj::{ErrorKind, Registration};

use crate::{Error, RdmaS3Client, Result, Span, Transfer};

/// How many times a call is tried, and the pause between tries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries per call, the first included, across endpoints; at least 1.
    /// `None`: one per endpoint (each gateway is tried once).
    pub attempts: Option<usize>,
    /// Pause before each retry.
    pub backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: None,
            backoff: Duration::from_millis(100),
        }
    }
}

/// A call that succeeded, and where.
#[derive(Clone, Debug)]
pub struct Served<T> {
    /// What the call returned.
    pub value: T,
    /// The index (in the endpoint list) of the endpoint that served it.
    pub endpoint: usize,
    /// The tries that failed first, with the endpoint each went to.
    pub failed: Vec<(usize, Error)>,
}

/// A call whose every try failed: the last error, where it came from, and
/// the tries before it.
#[derive(Clone, Debug)]
pub struct Failed {
    /// The last try's error.
    pub error: Error,
    /// The index of the endpoint the last try went to.
    pub endpoint: usize,
    /// The tries that failed before it, with the endpoint each went to.
    pub failed: Vec<(usize, Error)>,
}

impl Failed {
    /// The last error, its sentence naming the earlier failed tries.
    pub fn into_error(self) -> Error {
        self.error.after_failover(&self.failed)
    }
}

/// A list of per-endpoint clients `C` with the failover policy (see the
/// module docs). Cheap to clone; each clone keeps its own current endpoint.
#[derive(Debug)]
pub struct Failover<C> {
    endpoints: Arc<[C]>,
    current: AtomicUsize,
    policy: RetryPolicy,
}

/// S3 over RDMA through a list of gateways, with failover.
pub type FailoverClient = Failover<RdmaS3Client>;

/// Plain S3 requests through a list of gateways, with the same failover.
pub type PlainFailover = Failover<aws_sdk_s3::Client>;

impl<C> Clone for Failover<C> {
    fn clone(&self) -> Self {
        Self {
            endpoints: Arc::clone(&self.endpoints),
            current: AtomicUsize::new(self.current()),
            policy: self.policy.clone(),
        }
    }
}

impl<C> Failover<C> {
    /// One client per endpoint, tried in this order starting with the
    /// first. Fails on an empty list.
    pub fn new(endpoints: Vec<C>) -> Result<Self> {
        if endpoints.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidValue,
                "a failover client needs at least one endpoint",
            ));
        }
        Ok(Self {
            endpoints: endpoints.into(),
            current: AtomicUsize::new(0),
            policy: RetryPolicy::default(),
        })
    }

    /// The same client, starting at endpoint `index` (modulo the list's
    /// length): spreads clients over the gateways.
    #[must_use]
    pub fn starting_at(self, index: usize) -> Self {
        self.current
            .store(index % self.endpoints.len(), Ordering::Relaxed);
        self
    }

    /// The same client with `policy`.
    #[must_use]
    pub fn policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The endpoint the next call goes to first.
    pub fn current(&self) -> usize {
        self.current.load(Ordering::Relaxed)
    }

    /// The client of endpoint `index`.
    pub fn endpoint(&self, index: usize) -> Option<&C> {
        self.endpoints.get(index)
    }

    /// The endpoints' clients, in the order they are tried.
    pub fn endpoints(&self) -> &[C] {
        &self.endpoints
    }

    /// How many endpoints there are.
    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    /// Always false: there is at least one endpoint.
    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    /// Runs `call` on the current endpoint, moving on to the next one as
    /// the policy allows while it fails with [`Error::may_fail_over`].
    /// Returns the last error, naming the earlier ones, when every try
    /// failed.
    pub fn run<T>(&self, call: impl FnMut(&C) -> Result<T>) -> Result<Served<T>> {
        self.try_each(call).map_err(Failed::into_error)
    }

    /// As [`Failover::run`], with every failed try given back apart when
    /// none succeeded.
    pub fn try_each<T>(&self, mut call: impl FnMut(&C) -> Result<T>) -> Result<Served<T>, Failed> {
        let n = self.endpoints.len();
        let tries = self.policy.attempts.unwrap_or(n).max(1);
        let mut failed = Vec::new();
        for attempt in 0..tries {
            let at = self.current() % n;
            if attempt > 0 && !self.policy.backoff.is_zero() {
                std::thread::sleep(self.policy.backoff);
            }
            let Some(client) = self.endpoints.get(at) else {
                break;
            };
            match call(client) {
                Ok(value) => {
                    return Ok(Served {
                        value,
                        endpoint: at,
                        failed,
                    });
                }
                Err(e) => {
                    if e.may_fail_over() {
                        // Move on unless another call of this client already did.
                        let _ = self.current.compare_exchange(
                            at,
                            (at + 1) % n,
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        );
                    }
                    if !e.may_fail_over() || attempt + 1 == tries {
                        return Err(Failed {
                            error: e,
                            endpoint: at,
                            failed,
                        });
                    }
                    failed.push((at, e));
                }
            }
        }
        Err(Failed {
            error: Error::new(ErrorKind::InternalError, "the failover loop ended without a try"),
            endpoint: self.current() % n,
            failed,
        })
    }
}

impl Failover<RdmaS3Client> {
    /// [`RdmaS3Client::get_object`] with failover.
    pub fn get_object(
        &self,
        reg: &mut Registration<'_>,
        at: Span,
        bucket: &str,
        key: &str,
        range: Option<&str>,
    ) -> Result<Served<Transfer>> {
        self.run(|c| c.get_object(reg, at, bucket, key, range))
    }

    /// [`RdmaS3Client::put_object`] with failover.
    pub fn put_object(
        &self,
        reg: &Registration<'_>,
        at: Span,
        bucket: &str,
        key: &str,
    ) -> Result<Served<Transfer>> {
        self.run(|c| c.put_object(reg, at, bucket, key))
    }

    /// [`RdmaS3Client::upload_part`] with failover.
    pub fn upload_part(
        &self,
        reg: &Registration<'_>,
        at: Span,
        bucket: &str,
        key: &str,
        upload_id: &str,
        number: i32,
    ) -> Result<Served<Transfer>> {
        self.run(|c| c.upload_part(reg, at, bucket, key, upload_id, number))
    }
}
