//! [`RdmaLayer`]: the RDMA layer in front of a store. It only maps: who the
//! caller is, the store as the bytes' source or sink, and the target's
//! answer as an S3 response. Binding, moving, the success reply and the
//! rebind after a failed RDMA are all the target's (one call,
//! [`hipobj_target::Target::serve`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use hipobj_proto::Token;
use hipobj_target::{Answer, Caller, Request, Selected, Sink, Source, TargetError};
use http::{HeaderMap, HeaderValue, StatusCode};
use s3s::dto;
use s3s::{S3, S3Error, S3Request, S3Response, S3Result, s3_error};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::bridge::{BlockingBody, ChannelBody, ChunkSender, blob, send_chunk};
use super::same_bucket::{Guarded, SameBucket};
use super::{BYTES, ClientAddr, REPLY, Rdma, TOKEN, decline, error, invalid_token, target_error, with_reply};
use crate::metrics::{Metrics, inc};
use crate::s3::owners::Owners;
use hipobj_store::Requester;
use hipobj_store::file_range::{FileRange, WantsFileRange};

/// The RDMA layer: serves token requests itself, passes the rest to `inner`.
pub struct RdmaLayer {
    inner: Arc<dyn S3>,
    rdma: Option<Arc<Rdma>>,
    metrics: Arc<Metrics>,
    /// Who owns which bucket: a transfer moves bytes only while its bucket
    /// is the one the request was allowed in (`super::same_bucket`).
    owners: Owners,
}

impl std::fmt::Debug for RdmaLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaLayer")
            .field("rdma", &self.rdma.is_some())
            .finish_non_exhaustive()
    }
}

/// Counts a transfer in flight for as long as it lives.
pub(super) struct InFlight(Arc<Metrics>);

impl InFlight {
    pub(super) fn new(m: &Arc<Metrics>) -> Self {
        m.rdma_in_flight.fetch_add(1, Ordering::Relaxed);
        Self(m.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.rdma_in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

fn task_failed(e: impl std::fmt::Display) -> S3Error {
    error(
        "RDMATransferFailed",
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("the transfer task failed: {e}"),
    )
}

/// The token a request carries: `None` without the header, an error for a
/// header that is not exactly one well-formed token
/// ([`hipobj_proto::token_from_header`], which the fuzz target
/// `token_decode` reaches).
fn token_of(headers: &HeaderMap) -> S3Result<Option<Token>> {
    hipobj_proto::token_from_header(headers.get_all(TOKEN).iter().map(HeaderValue::as_bytes))
        .map_err(|e| invalid_token(e.to_string()))
}

/// Who sent a request: its access key and the address it came from.
fn caller_of<T>(req: &S3Request<T>) -> Caller {
    Caller {
        access_key: req
            .credentials
            .as_ref()
            .map(|c| c.access_key.clone())
            .unwrap_or_default(),
        address: req.extensions.get::<ClientAddr>().map(|a| a.0.ip()),
    }
}

/// The headers of a successful RDMA reply.
fn success_headers(reply: &str, bytes: u64) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(reply) {
        h.insert(REPLY, v);
    }
    h.insert(BYTES, HeaderValue::from(bytes));
    // The reply names a server QP bound to one client: no cache may keep it.
    h.insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h
}

/// A body on an RDMA request is a client error: the bytes travel by RDMA.
fn no_body(content_length: Option<i64>) -> S3Result<()> {
    match content_length {
        None | Some(0) => Ok(()),
        Some(n) => Err(s3_error!(
            InvalidRequest,
            "a request with x-amz-rdma-token carries no body (Content-Length is {n}, must be 0)"
        )),
    }
}

fn object_read_failed(e: std::io::Error) -> S3Error {
    error(
        "RDMATransferFailed",
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("the object could not be read: {e}"),
    )
}

/// A GET's source: the store's GetObject, opened once the target has found
/// the binding, its bytes read on the target's (blocking) thread: from the
/// object's file where the store offers it, else from the body.
pub(super) struct StoreSource {
    rt: Handle,
    inner: Arc<dyn S3>,
    req: Option<S3Request<dto::GetObjectInput>>,
    reader: Option<Reader>,
    resp: Option<S3Response<dto::GetObjectOutput>>,
}

/// Where an opened GET's bytes come from.
enum Reader {
    /// `pread` from the store's file into the slot.
    File(FileRange),
    /// The store's body stream, copied into the slot.
    Body(BlockingBody),
}

impl StoreSource {
    /// A source that runs `req` on `inner` when the transfer opens it.
    pub(super) fn new(rt: Handle, inner: Arc<dyn S3>, mut req: S3Request<dto::GetObjectInput>) -> Self {
        req.extensions.insert(WantsFileRange);
        Self {
            rt,
            inner,
            req: Some(req),
            reader: None,
            resp: None,
        }
    }
}

impl Source for StoreSource {
    type Error = S3Error;

    fn open(&mut self) -> Result<Selected, S3Error> {
        let req = self
            .req
            .take()
            .ok_or_else(|| task_failed("the object was opened twice"))?;
        let mut resp = self.rt.block_on(self.inner.get_object(req))?;
        let out = &mut resp.output;
        let len = out
            .content_length
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| s3_error!(InternalError, "the store did not say how long the object is"))?;
        let body = out.body.take().unwrap_or_else(|| {
            dto::StreamingBlob::wrap(futures::stream::empty::<Result<bytes::Bytes, std::io::Error>>())
        });
        self.reader = Some(match resp.extensions.remove::<FileRange>() {
            Some(f) if f.len() == len => Reader::File(f),
            Some(_) => {
                return Err(s3_error!(
                    InternalError,
                    "the store's file range is not the object's length"
                ));
            }
            None => Reader::Body(BlockingBody::new(self.rt.clone(), body)),
        });
        let partial = out.content_range.is_some();
        self.resp = Some(resp);
        Ok(Selected { len, partial })
    }

    fn fill(&mut self, off: u64, buf: &mut [u8]) -> Result<(), S3Error> {
        match &mut self.reader {
            Some(Reader::File(f)) => f.read_at(off, buf).map_err(object_read_failed),
            Some(Reader::Body(b)) => b.fill(buf).map_err(object_read_failed),
            None => Err(task_failed("the object was read before it was opened")),
        }
    }
}

/// A PUT's sink: the store's PutObject or UploadPart, started once the
/// target has found the binding, fed through a bounded channel.
pub(super) struct StoreSink<T, S> {
    rt: Handle,
    store: Option<S>,
    tx: Option<ChunkSender>,
    task: Option<JoinHandle<S3Result<S3Response<T>>>>,
    resp: Option<S3Response<T>>,
}

impl<T, S, F> Sink for StoreSink<T, S>
where
    T: Send + 'static,
    S: FnOnce(dto::StreamingBlob, i64) -> F,
    F: Future<Output = S3Result<S3Response<T>>> + Send + 'static,
{
    type Error = S3Error;

    fn open(&mut self, len: u64) -> Result<(), S3Error> {
        let store = self
            .store
            .take()
            .ok_or_else(|| task_failed("the store was opened twice"))?;
        let content_length =
            i64::try_from(len).map_err(|_| invalid_token("the token's length is too large"))?;
        let (tx, body) = ChannelBody::new(len, 4);
        self.tx = Some(tx);
        self.task = Some(self.rt.spawn(store(blob(body), content_length)));
        Ok(())
    }

    fn drain(&mut self, _off: u64, chunk: &[u8]) -> Result<(), S3Error> {
        match &self.tx {
            // The store stopped reading: its own error says why (see
            // `finish`); this one only stops the transfer.
            Some(tx) => send_chunk(tx, chunk).map_err(task_failed),
            None => Err(task_failed("the store was fed before it was opened")),
        }
    }

    fn commit(&mut self) -> Result<(), S3Error> {
        self.tx = None;
        let task = self.task.take().ok_or_else(|| task_failed("nothing to commit"))?;
        let resp = self.rt.block_on(task).map_err(task_failed)??;
        self.resp = Some(resp);
        Ok(())
    }
}

impl<T, S> StoreSink<T, S> {
    /// A sink that starts `store` when the transfer opens it.
    pub(super) fn new(rt: Handle, store: S) -> Self {
        Self {
            rt,
            store: Some(store),
            tx: None,
            task: None,
            resp: None,
        }
    }

    /// The store's response, once committed.
    pub(super) fn take_response(&mut self) -> Option<S3Response<T>> {
        self.resp.take()
    }

    /// After the target returned: a store still running (the transfer
    /// stopped early) sees its body end in an error, stores nothing, and is
    /// waited for; its error, if any, is returned.
    pub(super) async fn finish(&mut self) -> Option<S3Error> {
        self.tx = None;
        let task = self.task.take()?;
        match task.await {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e),
            Err(e) => Some(task_failed(e)),
        }
    }
}

impl RdmaLayer {
    /// The layer over `inner`; with `rdma` `None`, token requests get `501`.
    pub fn new(inner: Arc<dyn S3>, rdma: Option<Arc<Rdma>>, metrics: Arc<Metrics>, owners: Owners) -> Self {
        Self {
            inner,
            rdma,
            metrics,
            owners,
        }
    }

    /// The bucket a token request was allowed in, as it is now, to be
    /// found again before the store is used: for the bucket's owner and
    /// the keys it is shared with. `None` for a requester the owner model
    /// does not name (anonymous access; another key a canned ACL lets in,
    /// which the store checks itself at each call).
    async fn same_bucket<T>(&self, req: &S3Request<T>, bucket: &str) -> S3Result<Option<SameBucket>> {
        let Some(c) = &req.credentials else {
            return Ok(None);
        };
        if matches!(
            req.extensions.get::<Requester>(),
            Some(Requester::Other | Requester::Anonymous)
        ) {
            return Ok(None);
        }
        SameBucket::now(&self.owners, bucket, &c.access_key)
            .await
            .map(Some)
    }

    /// A token request held to the rules the server was configured with
    /// (docs/server.md, `rdma.rules`).
    fn admit<T>(&self, req: &S3Request<T>, token: &Token) -> S3Result<()> {
        match &self.rdma {
            Some(r) => super::ceph_rules::admit(r.rules, &req.headers, &req.uri, token.len, r.max_transfer),
            None => Ok(()),
        }
    }

    /// The device, or `501` when RDMA is off.
    fn rdma(&self) -> S3Result<Arc<Rdma>> {
        inc(&self.metrics.rdma_requests);
        self.rdma.clone().ok_or_else(|| {
            inc(&self.metrics.rdma_declines);
            decline("RDMA is not enabled on this server; use plain HTTP")
        })
    }

    /// A `409` answer: connect the client QP to the server QP it names.
    fn bind(&self, reply: &hipobj_proto::Reply, after_failure: Option<String>) -> S3Error {
        inc(&self.metrics.rdma_binds);
        let msg = match after_failure {
            None => "the client QP is not bound to this server: connect it to the QP in x-amz-rdma-reply and resend".to_owned(),
            Some(why) => {
                inc(&self.metrics.rdma_errors);
                tracing::info!("RDMA on a binding failed ({why}); bound afresh");
                format!(
                    "the RDMA on this client QP's old binding failed ({why}): connect it to the QP in x-amz-rdma-reply and resend"
                )
            }
        };
        let e = error("RDMABindRequired", StatusCode::CONFLICT, msg);
        with_reply(e, &reply.to_string())
    }

    fn failure(&self, e: TargetError<S3Error>) -> S3Error {
        if matches!(e, TargetError::Declined) {
            inc(&self.metrics.rdma_declines);
        }
        target_error(e)
    }

    /// Counts a failed token request (binds and declines have their own counters).
    fn failed<T>(&self, r: S3Result<T>) -> S3Result<T> {
        if let Err(e) = &r {
            let st = e.status_code();
            if st != Some(StatusCode::CONFLICT) && st != Some(StatusCode::NOT_IMPLEMENTED) {
                inc(&self.metrics.rdma_errors);
                tracing::info!(
                    "RDMA request failed: {:?} {}",
                    e.code(),
                    e.message().unwrap_or("")
                );
            }
        }
        r
    }

    async fn rdma_get(
        &self,
        token: Token,
        req: S3Request<dto::GetObjectInput>,
    ) -> S3Result<S3Response<dto::GetObjectOutput>> {
        let rdma = self.rdma()?;
        let caller = caller_of(&req);
        let same = self.same_bucket(&req, &req.input.bucket).await?;
        let _flight = InFlight::new(&self.metrics);
        let rt = Handle::current();
        let mut src = Guarded::new(StoreSource::new(rt.clone(), self.inner.clone(), req), same, rt);
        let (answer, mut src) = tokio::task::spawn_blocking(move || {
            let a = crate::cpu::mover(|| {
                let src = &mut crate::cpu::StoreSide(&mut src);
                rdma.target.serve(&caller, &token, Request::Get(src))
            });
            (a, src)
        })
        .await
        .map_err(task_failed)?;
        let (reply, bytes) = match answer {
            Ok(Answer::Done { reply, bytes, .. }) => (reply, bytes),
            Ok(Answer::Bind { reply, after_failure }) => return Err(self.bind(&reply, after_failure)),
            Err(e) => return Err(self.failure(e)),
        };
        let mut resp = src
            .inner_mut()
            .resp
            .take()
            .ok_or_else(|| task_failed("no response from the store"))?;
        inc(&self.metrics.rdma_gets);
        self.metrics
            .rdma_bytes_written
            .fetch_add(bytes, Ordering::Relaxed);
        let out = &mut resp.output;
        // The bytes went by RDMA: no body, and no checksums that would
        // describe a body (aws-sdk-s3 would check them against nothing).
        out.content_length = Some(0);
        out.checksum_crc32 = None;
        out.checksum_crc32c = None;
        out.checksum_crc64nvme = None;
        out.checksum_sha1 = None;
        out.checksum_sha256 = None;
        out.checksum_type = None;
        resp.headers.extend(success_headers(&reply.to_string(), bytes));
        Ok(resp)
    }

    /// PUT and UploadPart: the target reads the token's bytes from the
    /// client while `store` takes them in.
    async fn rdma_upload<T, S, F>(
        &self,
        caller: Caller,
        same: Option<SameBucket>,
        token: Token,
        store: S,
    ) -> S3Result<S3Response<T>>
    where
        T: Send + 'static,
        S: FnOnce(dto::StreamingBlob, i64) -> F + Send + 'static,
        F: Future<Output = S3Result<S3Response<T>>> + Send + 'static,
    {
        let rdma = self.rdma()?;
        let _flight = InFlight::new(&self.metrics);
        let rt = Handle::current();
        let mut sink = Guarded::new(
            StoreSink {
                rt: rt.clone(),
                store: Some(store),
                tx: None,
                task: None,
                resp: None,
            },
            same,
            rt,
        );
        let (answer, mut sink) = tokio::task::spawn_blocking(move || {
            let a = crate::cpu::mover(|| {
                let sink = &mut crate::cpu::StoreSide(&mut sink);
                rdma.target.serve(&caller, &token, Request::Put(sink))
            });
            (a, sink)
        })
        .await
        .map_err(task_failed)?;
        // A transfer that stopped early leaves the store running on a body
        // that now ends in an error: it stores nothing, and its error is
        // the cause when the store stopped first.
        let stored = sink.inner_mut().finish().await;
        let (reply, bytes) = match answer {
            Ok(Answer::Done { reply, bytes, .. }) => (reply, bytes),
            Ok(Answer::Bind { reply, after_failure }) => return Err(self.bind(&reply, after_failure)),
            // The bucket changed: that is why, whatever the store said of
            // its body cut short.
            Err(TargetError::Store(e)) if *e.code() == s3s::S3ErrorCode::AccessDenied => return Err(e),
            Err(TargetError::Store(e)) => return Err(stored.unwrap_or(e)),
            Err(e) => return Err(self.failure(e)),
        };
        let mut resp = sink
            .inner_mut()
            .resp
            .take()
            .ok_or_else(|| task_failed("no response from the store"))?;
        inc(&self.metrics.rdma_puts);
        self.metrics.rdma_bytes_read.fetch_add(bytes, Ordering::Relaxed);
        resp.headers.extend(success_headers(&reply.to_string(), bytes));
        Ok(resp)
    }
}

macro_rules! layer {
    (
        metadata { $($name:ident: $input:ident => $output:ident,)* }
        bytes {
            get_object: GetObjectInput => GetObjectOutput,
            put_object: PutObjectInput => PutObjectOutput,
            upload_part: UploadPartInput => UploadPartOutput,
        }
    ) => {
        #[async_trait::async_trait]
        impl S3 for RdmaLayer {
            $(
                async fn $name(&self, req: S3Request<dto::$input>) -> S3Result<S3Response<dto::$output>> {
                    self.inner.$name(req).await
                }
            )*

            async fn get_object(
                &self,
                req: S3Request<dto::GetObjectInput>,
            ) -> S3Result<S3Response<dto::GetObjectOutput>> {
                let Some(token) = self.failed(token_of(&req.headers))? else {
                    return self.inner.get_object(req).await;
                };
                self.failed(self.admit(&req, &token))?;
                let r = self.rdma_get(token, req).await;
                self.failed(r)
            }

            async fn put_object(
                &self,
                mut req: S3Request<dto::PutObjectInput>,
            ) -> S3Result<S3Response<dto::PutObjectOutput>> {
                let Some(token) = self.failed(token_of(&req.headers))? else {
                    return self.inner.put_object(req).await;
                };
                self.failed(self.admit(&req, &token))?;
                self.failed(no_body(req.input.content_length))?;
                let inner = self.inner.clone();
                let caller = caller_of(&req);
                let same = self.failed(self.same_bucket(&req, &req.input.bucket).await)?;
                let r = self
                    .rdma_upload(caller, same, token, move |body, len| {
                        req.input.body = Some(body);
                        req.input.content_length = Some(len);
                        async move { inner.put_object(req).await }
                    })
                    .await;
                self.failed(r)
            }

            async fn upload_part(
                &self,
                mut req: S3Request<dto::UploadPartInput>,
            ) -> S3Result<S3Response<dto::UploadPartOutput>> {
                let Some(token) = self.failed(token_of(&req.headers))? else {
                    return self.inner.upload_part(req).await;
                };
                self.failed(self.admit(&req, &token))?;
                self.failed(no_body(req.input.content_length))?;
                let inner = self.inner.clone();
                let caller = caller_of(&req);
                let same = self.failed(self.same_bucket(&req, &req.input.bucket).await)?;
                let r = self
                    .rdma_upload(caller, same, token, move |body, len| {
                        req.input.body = Some(body);
                        req.input.content_length = Some(len);
                        async move { inner.upload_part(req).await }
                    })
                    .await;
                self.failed(r)
            }
        }
    };
}

// The metadata operations pass to the store as they are; the three that
// carry bytes are served here when they carry a token.
hipobj_store::s3_operations!(layer);
