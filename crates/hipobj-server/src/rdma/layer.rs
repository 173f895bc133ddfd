//! [`RdmaS3`]: the RDMA layer in front of a store.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use hipobj_peer::{PeerError, RdmaPeer, Step};
use hipobj_proto::{Token, Transport};
use http::{HeaderMap, HeaderValue, StatusCode};
use s3s::dto;
use s3s::{S3, S3Request, S3Response, S3Result, s3_error};
use tokio::sync::OwnedSemaphorePermit;

use super::bridge::{BlockingBody, ChannelBody, blob, send_chunk};
use super::{BYTES, REPLY, Rdma, TOKEN, decline, error, invalid_token, peer_error, with_reply};
use crate::metrics::{Metrics, inc};

/// The RDMA layer: serves token requests itself, passes the rest to `inner`.
pub struct RdmaS3 {
    inner: Arc<dyn S3>,
    rdma: Option<Arc<Rdma>>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for RdmaS3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaS3")
            .field("rdma", &self.rdma.is_some())
            .finish_non_exhaustive()
    }
}

/// A transfer cleared to run: the device, and one of its transfer slots.
struct Cleared {
    peer: Arc<RdmaPeer>,
    _slot: OwnedSemaphorePermit,
}

/// Counts a transfer in flight for as long as it lives.
struct InFlight(Arc<Metrics>);

impl InFlight {
    fn new(m: &Arc<Metrics>) -> Self {
        m.rdma_in_flight.fetch_add(1, Ordering::Relaxed);
        Self(m.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.rdma_in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Runs a blocking peer call off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, PeerError> + Send + 'static,
) -> S3Result<T> {
    blocking_raw(f).await?.map_err(peer_error)
}

/// As [`blocking`], keeping the peer's own error for the caller to judge.
async fn blocking_raw<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, PeerError> + Send + 'static,
) -> S3Result<Result<T, PeerError>> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        error(
            "RDMATransferFailed",
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the transfer task failed: {e}"),
        )
    })
}

/// The token a request carries: `None` without the header, an error for a
/// header that is not exactly one well-formed token.
fn token_of(headers: &HeaderMap) -> S3Result<Option<Token>> {
    let mut all = headers.get_all(TOKEN).iter();
    let Some(v) = all.next() else { return Ok(None) };
    if all.next().is_some() {
        return Err(invalid_token("more than one x-amz-rdma-token header"));
    }
    Token::decode(v.as_bytes())
        .map(Some)
        .map_err(|e| invalid_token(format!("x-amz-rdma-token: {e}")))
}

/// The headers of a successful RDMA reply.
fn success_headers(reply: &str, bytes: u64) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(reply) {
        h.insert(REPLY, v);
    }
    h.insert(BYTES, HeaderValue::from(bytes));
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

impl RdmaS3 {
    /// The layer over `inner`; with `rdma` `None`, token requests get `501`.
    pub fn new(inner: Arc<dyn S3>, rdma: Option<Arc<Rdma>>, metrics: Arc<Metrics>) -> Self {
        Self { inner, rdma, metrics }
    }

    /// Everything before the data moves: decline (`501`), check the token,
    /// bind the client QP (`409`), and take a transfer slot.
    async fn clear(&self, token: &Token) -> S3Result<Cleared> {
        inc(&self.metrics.rdma_requests);
        let Some(rdma) = &self.rdma else {
            inc(&self.metrics.rdma_declines);
            return Err(decline("RDMA is not enabled on this server; use plain HTTP"));
        };
        if token.transport != Transport::Rc {
            inc(&self.metrics.rdma_declines);
            return Err(decline("this server serves RC tokens only; use plain HTTP"));
        }
        rdma.peer.check_token(token, 0).map_err(peer_error)?;
        let peer = rdma.peer.clone();
        let t = *token;
        match blocking(move || peer.step(&t)).await? {
            Step::Bind(reply) => {
                inc(&self.metrics.rdma_binds);
                tracing::debug!(client_qpn = token.qpn, "binding a client QP: {reply}");
                let e = error(
                    "RDMABindRequired",
                    StatusCode::CONFLICT,
                    "the client QP is not bound to this server: connect it to the QP in x-amz-rdma-reply and resend",
                );
                Err(with_reply(e, &reply.to_string()))
            }
            Step::Bound => {
                let slot = rdma
                    .slots
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|_| s3_error!(ServiceUnavailable, "the server is shutting down"))?;
                Ok(Cleared {
                    peer: rdma.peer.clone(),
                    _slot: slot,
                })
            }
        }
    }

    /// The answer to an RDMA that failed on a binding: the peer has dropped
    /// the binding (the client QP was reset, recycled or rebound elsewhere,
    /// or the connection broke), so bind afresh and answer `409`, and a
    /// client whose QP went stale recovers in the same request
    /// (docs/protocol.md §4). Moving no data, the new binding costs nothing
    /// if the client gives up instead.
    async fn rebind(&self, token: &Token, why: String) -> s3s::S3Error {
        let Some(rdma) = &self.rdma else {
            return peer_error(PeerError::Transfer(why));
        };
        tracing::info!(
            client_qpn = token.qpn,
            "RDMA on a binding failed ({why}); binding afresh"
        );
        let peer = rdma.peer.clone();
        let t = *token;
        match blocking(move || peer.step(&t)).await {
            Ok(Step::Bind(reply)) => {
                inc(&self.metrics.rdma_binds);
                inc(&self.metrics.rdma_errors);
                let e = error(
                    "RDMABindRequired",
                    StatusCode::CONFLICT,
                    format!(
                        "the RDMA on this client QP's old binding failed ({why}): connect it to the QP in x-amz-rdma-reply and resend"
                    ),
                );
                with_reply(e, &reply.to_string())
            }
            Ok(Step::Bound) | Err(_) => peer_error(PeerError::Transfer(why)),
        }
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
        let cleared = self.clear(&token).await?;
        let mut resp = self.inner.get_object(req).await?;
        let out = &mut resp.output;
        let len = out
            .content_length
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| s3_error!(InternalError, "the store did not say how long the object is"))?;
        // Never truncate: a buffer smaller than the selection fails here,
        // before any byte moves.
        cleared.peer.check_token(&token, len).map_err(peer_error)?;
        let body = out.body.take().unwrap_or_else(|| {
            dto::StreamingBlob::wrap(futures::stream::empty::<Result<bytes::Bytes, std::io::Error>>())
        });
        let _flight = InFlight::new(&self.metrics);
        let peer = cleared.peer.clone();
        let rt = tokio::runtime::Handle::current();
        let sent = match blocking_raw(move || {
            let _slot = cleared;
            let mut src = BlockingBody::new(rt, body);
            peer.write_to_client(&token, len, &mut |_, chunk| src.fill(chunk))
        })
        .await?
        {
            Ok(n) => n,
            Err(PeerError::Transfer(why)) => return Err(self.rebind(&token, why).await),
            Err(e) => return Err(peer_error(e)),
        };
        inc(&self.metrics.rdma_gets);
        self.metrics.rdma_bytes_written.fetch_add(sent, Ordering::Relaxed);
        let status = if out.content_range.is_some() { 206 } else { 200 };
        let peer = self.peer()?;
        let reply = peer.success_reply(&token, status, sent).map_err(peer_error)?;
        // The bytes went by RDMA: no body, and no checksums that would
        // describe a body (aws-sdk-s3 would check them against nothing).
        out.content_length = Some(0);
        out.checksum_crc32 = None;
        out.checksum_crc32c = None;
        out.checksum_crc64nvme = None;
        out.checksum_sha1 = None;
        out.checksum_sha256 = None;
        out.checksum_type = None;
        resp.headers.extend(success_headers(&reply.to_string(), sent));
        Ok(resp)
    }

    fn peer(&self) -> S3Result<Arc<RdmaPeer>> {
        self.rdma
            .as_ref()
            .map(|r| r.peer.clone())
            .ok_or_else(|| decline("RDMA is not enabled on this server; use plain HTTP"))
    }

    /// PUT and UploadPart: reads the token's bytes from the client while the
    /// store takes them in; `store` gets the body and runs to completion.
    async fn rdma_upload<T, F>(
        &self,
        token: Token,
        store: impl FnOnce(dto::StreamingBlob, i64) -> F,
    ) -> S3Result<S3Response<T>>
    where
        F: Future<Output = S3Result<S3Response<T>>>,
    {
        let cleared = self.clear(&token).await?;
        let len = token.len;
        let content_length =
            i64::try_from(len).map_err(|_| invalid_token("the token's length is too large"))?;
        let (tx, body) = ChannelBody::new(len, 4);
        let _flight = InFlight::new(&self.metrics);
        let peer = cleared.peer.clone();
        let mover = tokio::task::spawn_blocking(move || {
            let _slot = cleared;
            peer.read_from_client(&token, len, &mut |_, chunk| send_chunk(&tx, chunk))
        });
        let (stored, moved) = tokio::join!(store(blob(body), content_length), mover);
        let moved = moved.map_err(|e| {
            error(
                "RDMATransferFailed",
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the transfer task failed: {e}"),
            )
        })?;
        let mut resp = match (stored, moved) {
            (Ok(resp), Ok(n)) if n == len => resp,
            (Ok(_), Ok(n)) => {
                return Err(error(
                    "RDMATransferFailed",
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("moved {n} of {len} bytes"),
                ));
            }
            // The store stopped on its own (no such bucket, a bad digest):
            // the mover then failed only because nobody took its chunks.
            (Err(e), Err(PeerError::Io(_)) | Ok(_)) => return Err(e),
            // The RDMA failed: that is the cause, whatever the store made
            // of the short body (it stored nothing). Bind afresh.
            (_, Err(PeerError::Transfer(why))) => return Err(self.rebind(&token, why).await),
            (_, Err(e)) => return Err(peer_error(e)),
        };
        inc(&self.metrics.rdma_puts);
        self.metrics.rdma_bytes_read.fetch_add(len, Ordering::Relaxed);
        let reply = self.peer()?.success_reply(&token, 200, len).map_err(peer_error)?;
        resp.headers.extend(success_headers(&reply.to_string(), len));
        Ok(resp)
    }
}

macro_rules! layer {
    ($($name:ident: $input:ident => $output:ident,)*) => {
        #[async_trait::async_trait]
        impl S3 for RdmaS3 {
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
                self.failed(no_body(req.input.content_length))?;
                let inner = self.inner.clone();
                let r = self
                    .rdma_upload(token, move |body, len| {
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
                self.failed(no_body(req.input.content_length))?;
                let inner = self.inner.clone();
                let r = self
                    .rdma_upload(token, move |body, len| {
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

layer! {
    create_bucket: CreateBucketInput => CreateBucketOutput,
    delete_bucket: DeleteBucketInput => DeleteBucketOutput,
    head_bucket: HeadBucketInput => HeadBucketOutput,
    list_buckets: ListBucketsInput => ListBucketsOutput,
    get_bucket_location: GetBucketLocationInput => GetBucketLocationOutput,
    head_object: HeadObjectInput => HeadObjectOutput,
    delete_object: DeleteObjectInput => DeleteObjectOutput,
    delete_objects: DeleteObjectsInput => DeleteObjectsOutput,
    list_objects: ListObjectsInput => ListObjectsOutput,
    list_objects_v2: ListObjectsV2Input => ListObjectsV2Output,
    copy_object: CopyObjectInput => CopyObjectOutput,
    create_multipart_upload: CreateMultipartUploadInput => CreateMultipartUploadOutput,
    list_parts: ListPartsInput => ListPartsOutput,
    complete_multipart_upload: CompleteMultipartUploadInput => CompleteMultipartUploadOutput,
    abort_multipart_upload: AbortMultipartUploadInput => AbortMultipartUploadOutput,
    list_multipart_uploads: ListMultipartUploadsInput => ListMultipartUploadsOutput,
    upload_part_copy: UploadPartCopyInput => UploadPartCopyOutput,
}
