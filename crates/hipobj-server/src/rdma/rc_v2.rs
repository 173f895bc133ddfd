//! `POST /.hipobj-rc/prepare|ready|cancel`: the `hipobj-rc-v2` control
//! path (docs/protocol.md, "hipobj-rc-v2 server"), served before s3s sees
//! the request (`.hipobj-rc` would be parsed as a bucket name).
//!
//! This module only maps HTTP onto [`hipobj_target::rc_v2::V2Sessions`]:
//! [`check_control`] checks the request, its signature and its headers;
//! this checks the object with the store (404, 416) and the bucket's owner
//! (403), hands the store to the session as the bytes' source or sink, and
//! writes the statuses and headers of [`hipobj_proto::rc_v2`].

use std::sync::Arc;
use std::sync::atomic::Ordering;

use hipobj_proto::rc_v2::{self, Direction, PrepareRequest, ReadyRequest, ReadyResponse, Status};
use hipobj_target::Caller;
use hipobj_target::Request;
use hipobj_target::rc_v2::{ControlHttp, ControlRequest, V2Failure, V2Sessions, check_control};
use s3s::{Body, S3, S3Error, S3ErrorCode, S3Request, dto};
use tokio::runtime::Handle;

use super::ClientAddr;
use super::checksum::Summed;
use super::layer::{StoreSink, StoreSource};
use super::same_bucket::{Guarded, SameBucket};
use crate::metrics::{Metrics, inc};
use crate::s3::owners::Owners;

/// The control path's state.
#[derive(Clone)]
pub struct V2 {
    /// `None` when RDMA is off: every request gets 501.
    pub sessions: Option<Arc<V2Sessions>>,
    /// The store (the same one S3 requests reach).
    pub store: Arc<dyn S3>,
    /// Who owns which bucket.
    pub owners: Owners,
    /// The access keys in service.
    pub keys: Arc<crate::keys::Keys>,
    /// The counters.
    pub metrics: Arc<Metrics>,
}

impl std::fmt::Debug for V2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("V2")
            .field("rdma", &self.sessions.is_some())
            .finish_non_exhaustive()
    }
}

/// What a 503 (over a quota) tells the client to wait, in seconds.
const RETRY_AFTER_SECS: &str = "1";

/// A control response: status, headers, and a short text body saying why.
fn respond(status: Status, headers: Vec<(&'static str, String)>, why: &str) -> http::Response<Body> {
    let mut resp = http::Response::new(if why.is_empty() {
        Body::empty()
    } else {
        Body::from(format!("{why}\n"))
    });
    *resp.status_mut() =
        http::StatusCode::from_u16(status.code()).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    h.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    h.insert(
        rc_v2::PROTOCOL_HEADER,
        http::HeaderValue::from_static(rc_v2::PROTOCOL),
    );
    if status == Status::Unsupported {
        h.insert(
            rc_v2::PROTOCOL_STATUS_HEADER,
            http::HeaderValue::from_static(rc_v2::PROTOCOL_STATUS_UNSUPPORTED),
        );
    } else {
        // The `mp` extension, on every v2 answer (a 413 included: the
        // client then sends the object's parts by v2).
        h.insert(
            rc_v2::CAPABILITIES_HEADER,
            http::HeaderValue::from_static(rc_v2::CAPABILITY_MULTIPART),
        );
    }
    if status == Status::Busy {
        // Over a session or memory quota: sessions end within the prepare
        // and transfer timeouts, so a retry soon may find room.
        h.insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static(RETRY_AFTER_SECS),
        );
    }
    for (n, v) in headers {
        if let Ok(v) = http::HeaderValue::from_str(&v) {
            h.insert(n, v);
        }
    }
    if !why.is_empty() {
        h.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain"),
        );
    }
    resp
}

fn fail(status: Status, why: &str) -> http::Response<Body> {
    respond(status, Vec::new(), why)
}

/// The status for a store error.
fn store_status(e: &S3Error) -> Status {
    match e.code() {
        S3ErrorCode::NoSuchBucket | S3ErrorCode::NoSuchKey => Status::NotFound,
        S3ErrorCode::InvalidRange => Status::RangeNotSatisfiable,
        S3ErrorCode::AccessDenied => Status::Forbidden,
        S3ErrorCode::InvalidArgument | S3ErrorCode::InvalidBucketName | S3ErrorCode::KeyTooLongError => {
            Status::BadRequest
        }
        S3ErrorCode::EntityTooLarge => Status::TooLarge,
        _ => Status::Internal,
    }
}

fn store_fail(e: &S3Error) -> http::Response<Body> {
    fail(store_status(e), e.message().unwrap_or("the store failed"))
}

impl V2 {
    /// A store request on behalf of `access_key`.
    fn store_request<T>(&self, input: T, method: http::Method, access_key: &str) -> S3Request<T> {
        S3Request {
            input,
            method,
            uri: http::Uri::from_static("/"),
            headers: http::HeaderMap::new(),
            extensions: http::Extensions::new(),
            credentials: Some(s3s::auth::Credentials {
                access_key: access_key.to_owned(),
                secret_key: self.keys.secret(access_key).unwrap_or_default().into(),
            }),
            region: None,
            service: None,
            trailing_headers: None,
        }
    }

    /// Serves one request under [`rc_v2::PATH_PREFIX`].
    pub async fn handle<B>(&self, req: http::Request<B>) -> http::Response<Body> {
        let (parts, _body) = req.into_parts();
        let r = self.serve(&parts).await;
        let status = r.status().as_u16();
        if status == 503 {
            self.metrics
                .limit_acted(&self.metrics.rdma_v2_busy, "rdma_v2_quota", || {
                    format!(
                        "a hipobj-rc-v2 {} was refused: sessions or staging memory at their limit",
                        parts.uri.path()
                    )
                });
        }
        if status >= 400 && status != 501 {
            inc(&self.metrics.rdma_v2_errors);
            tracing::info!(path = parts.uri.path(), status, "hipobj-rc-v2 request refused");
        }
        r
    }

    async fn serve(&self, parts: &http::request::Parts) -> http::Response<Body> {
        let headers = super::sigv4::header_pairs(&parts.headers);
        let req = ControlHttp {
            method: parts.method.as_str(),
            path: parts.uri.path(),
            query: parts.uri.query(),
            headers: &headers,
        };
        let checked = check_control(
            &req,
            self.sessions.is_some(),
            &self.keys.current(),
            hipobj_target::sigv4::now_secs(),
        );
        let (key, control) = match checked {
            Ok(x) => x,
            Err(r) => {
                if r.declined {
                    inc(&self.metrics.rdma_declines);
                }
                return fail(r.status, &r.why);
            }
        };
        // check_control declines every request while RDMA is off.
        let Some(sessions) = self.sessions.clone() else {
            return fail(Status::Unsupported, "RDMA is not enabled on this server");
        };
        let caller = Caller {
            access_key: key,
            address: parts.extensions.get::<ClientAddr>().map(|a| a.0.ip()),
        };
        match control {
            ControlRequest::Prepare(p) => self.prepare(sessions, caller, p).await,
            ControlRequest::Ready(r) => self.ready(sessions, caller, r).await,
            ControlRequest::Cancel(c) => {
                sessions.cancel(&caller, &c.session);
                respond(Status::Cancelled, Vec::new(), "")
            }
        }
    }

    async fn prepare(
        &self,
        sessions: Arc<V2Sessions>,
        caller: Caller,
        p: PrepareRequest,
    ) -> http::Response<Body> {
        let (bucket, key) = (p.target.bucket().to_owned(), p.target.key().to_owned());
        if let Err(e) = hipobj_store::names::check_key(&key) {
            return store_fail(&e);
        }
        // Which bucket of this name the caller may use now: READY and the
        // transfer compare it again (`super::same_bucket`).
        let same = match SameBucket::now(&self.owners, &bucket, &caller.access_key).await {
            Ok(s) => s,
            Err(e) => return store_fail(&e),
        };
        match p.op {
            Direction::Get => {
                let mut b = dto::HeadObjectInput::builder();
                b.set_bucket(bucket);
                b.set_key(key);
                let Ok(input) = b.build() else {
                    return fail(Status::Internal, "building the store request failed");
                };
                let req = self.store_request(input, http::Method::HEAD, &caller.access_key);
                let len = match self.store.head_object(req).await {
                    Ok(r) => r
                        .output
                        .content_length
                        .and_then(|n| u64::try_from(n).ok())
                        .unwrap_or(0),
                    Err(e) => return store_fail(&e),
                };
                let end = p.offset.unwrap_or(0).checked_add(p.size.get_u64());
                if end.is_none_or(|end| end > len) {
                    return fail(
                        Status::RangeNotSatisfiable,
                        &format!("offset + size runs past the object's {len} bytes"),
                    );
                }
            }
            Direction::Put => {
                let mut b = dto::HeadBucketInput::builder();
                b.set_bucket(bucket.clone());
                let Ok(input) = b.build() else {
                    return fail(Status::Internal, "building the store request failed");
                };
                let req = self.store_request(input, http::Method::HEAD, &caller.access_key);
                if let Err(e) = self.store.head_bucket(req).await {
                    return store_fail(&e);
                }
                // A part's upload must exist (404 NoSuchUpload), as
                // UploadPart would say.
                if let Some(part) = &p.part {
                    let mut b = dto::ListPartsInput::builder();
                    b.set_bucket(bucket);
                    b.set_key(key);
                    b.set_upload_id(part.upload_id.clone());
                    b.set_max_parts(Some(1));
                    let Ok(input) = b.build() else {
                        return fail(Status::Internal, "building the store request failed");
                    };
                    let req = self.store_request(input, http::Method::GET, &caller.access_key);
                    if let Err(e) = self.store.list_parts(req).await {
                        return store_fail(&e);
                    }
                }
            }
        }
        let generation = same.generation().map(str::to_owned);
        let made = tokio::task::spawn_blocking(move || {
            sessions.prepare_in(&caller, &p, std::time::Instant::now(), generation)
        })
        .await;
        match made {
            Ok(Ok(resp)) => {
                inc(&self.metrics.rdma_v2_sessions);
                respond(Status::Ok, resp.to_headers(), "")
            }
            Ok(Err(V2Failure::Status(s, why))) => fail(s, &why),
            Ok(Err(V2Failure::Store(()))) | Err(_) => fail(Status::Internal, "preparing the session failed"),
        }
    }

    async fn ready(
        &self,
        sessions: Arc<V2Sessions>,
        caller: Caller,
        r: ReadyRequest,
    ) -> http::Response<Body> {
        let claimed = match sessions.claim(&caller, &r, std::time::Instant::now()) {
            Ok(c) => c,
            Err(V2Failure::Status(s, why)) => return fail(s, &why),
            Err(V2Failure::Store(())) => return fail(Status::Internal, "claiming the session failed"),
        };
        let s = claimed.session();
        let (op, size, offset, cookie) = (s.op(), s.size(), s.offset(), s.cookie());
        let (bucket, key) = (s.object().bucket().to_owned(), s.object().key().to_owned());
        // The bucket PREPARE found must still be there, the caller's: a
        // bucket deleted and made again since is another's (or another of
        // the caller's), and the session ends here, before its QP connects.
        // Held from before that check until the transfer's last byte is
        // committed, the bucket cannot be deleted in between
        // (`crate::s3::bucket_use`).
        let _held = match self.owners.uses().shared(&bucket).await {
            Ok(h) => h,
            Err(e) => return store_fail(&e),
        };
        let same = SameBucket::recorded(
            &self.owners,
            &bucket,
            &caller.access_key,
            s.bucket_generation().map(str::to_owned),
        );
        if let Err(e) = same.check().await {
            return store_fail(&e);
        }
        let rt = Handle::current();
        let _flight = super::layer::InFlight::new(&self.metrics);
        let (moved, etag, crc) = match op {
            Direction::Get => {
                let mut b = dto::GetObjectInput::builder();
                b.set_bucket(bucket);
                b.set_key(key);
                b.set_range(Some(dto::Range::Int {
                    first: offset,
                    last: Some(offset + u64::from(size) - 1),
                }));
                let Ok(input) = b.build() else {
                    return fail(Status::Internal, "building the store request failed");
                };
                let mut src = Summed::new(Guarded::new(
                    StoreSource::new(
                        rt.clone(),
                        self.store.clone(),
                        self.store_request(input, http::Method::GET, &caller.access_key),
                    ),
                    Some(same),
                    rt,
                ));
                let ran = tokio::task::spawn_blocking(move || {
                    let m = sessions.run(claimed, Request::Get(&mut src));
                    (m, src.sum())
                })
                .await;
                match ran {
                    Ok((m, crc)) => (Ok(m), None, crc),
                    Err(e) => (Err(e), None, None),
                }
            }
            Direction::Put => match self
                .ready_put(sessions, claimed, same, &caller, bucket, key)
                .await
            {
                Ok((moved, etag, crc)) => (Ok(moved), etag, crc),
                Err(resp) => return resp,
            },
        };
        let bytes = match moved {
            Ok(Ok(n)) => n,
            Ok(Err(V2Failure::Status(s, why))) => return fail(s, &why),
            Ok(Err(V2Failure::Store(e))) => return store_fail(&e),
            Err(e) => return fail(Status::Internal, &format!("the transfer task failed: {e}")),
        };
        match op {
            Direction::Get => {
                inc(&self.metrics.rdma_gets);
                self.metrics
                    .rdma_bytes_written
                    .fetch_add(bytes, Ordering::Relaxed);
            }
            Direction::Put => {
                inc(&self.metrics.rdma_puts);
                self.metrics.rdma_bytes_read.fetch_add(bytes, Ordering::Relaxed);
            }
        }
        tracing::info!(op = op.as_str(), bytes, "hipobj-rc-v2 transfer done");
        let resp = ReadyResponse {
            cookie,
            bytes,
            etag,
            version_id: None,
            checksum_crc64nvme: crc,
        };
        respond(Status::Ok, resp.to_headers(), "")
    }

    /// A PUT session's bytes into the store: PutObject, or UploadPart for a
    /// part session (`mp`).
    async fn ready_put(
        &self,
        sessions: Arc<V2Sessions>,
        claimed: hipobj_target::rc_v2::Claimed,
        same: SameBucket,
        caller: &Caller,
        bucket: String,
        key: String,
    ) -> Result<PutOutcome, http::Response<Body>> {
        let store = self.store.clone();
        match claimed.session().part().cloned() {
            None => {
                let mut b = dto::PutObjectInput::builder();
                b.set_bucket(bucket);
                b.set_key(key);
                let Ok(input) = b.build() else {
                    return Err(fail(Status::Internal, "building the store request failed"));
                };
                let mut req = self.store_request(input, http::Method::PUT, &caller.access_key);
                let commit = move |body, len| {
                    req.input.body = Some(body);
                    req.input.content_length = Some(len);
                    async move { store.put_object(req).await }
                };
                put_bytes(sessions, claimed, same, commit, |o: &dto::PutObjectOutput| {
                    o.e_tag.as_ref()
                })
                .await
            }
            Some(part) => {
                let mut b = dto::UploadPartInput::builder();
                b.set_bucket(bucket);
                b.set_key(key);
                b.set_upload_id(part.upload_id);
                b.set_part_number(i32::from(part.number));
                let Ok(input) = b.build() else {
                    return Err(fail(Status::Internal, "building the store request failed"));
                };
                let mut req = self.store_request(input, http::Method::PUT, &caller.access_key);
                let commit = move |body, len| {
                    req.input.body = Some(body);
                    req.input.content_length = Some(len);
                    async move { store.upload_part(req).await }
                };
                put_bytes(sessions, claimed, same, commit, |o: &dto::UploadPartOutput| {
                    o.e_tag.as_ref()
                })
                .await
            }
        }
    }
}

/// What a PUT session moved: the count (or why not), the store's ETag, and
/// the CRC-64/NVME of the bytes.
type PutOutcome = (
    Result<u64, V2Failure<S3Error>>,
    Option<String>,
    Option<rc_v2::Crc64Nvme>,
);

/// A PUT session's bytes, moved by `sessions` into the store through
/// `commit` (PutObject, or UploadPart for a part): what moved, the ETag
/// `etag_of` reads from the store's answer, and the CRC-64/NVME of the
/// bytes taken from the staging buffer (which the store stored).
async fn put_bytes<T, C, F>(
    sessions: Arc<V2Sessions>,
    claimed: hipobj_target::rc_v2::Claimed,
    same: SameBucket,
    commit: C,
    etag_of: fn(&T) -> Option<&dto::ETag>,
) -> Result<PutOutcome, http::Response<Body>>
where
    T: Send + 'static,
    C: FnOnce(dto::StreamingBlob, i64) -> F + Send + 'static,
    F: std::future::Future<Output = s3s::S3Result<s3s::S3Response<T>>> + Send + 'static,
{
    let rt = Handle::current();
    let mut sink = Summed::new(Guarded::new(StoreSink::new(rt.clone(), commit), Some(same), rt));
    let (moved, mut sink) = match tokio::task::spawn_blocking(move || {
        let m = sessions.run(claimed, Request::Put(&mut sink));
        (m, sink)
    })
    .await
    {
        Ok(x) => x,
        Err(e) => return Err(fail(Status::Internal, &format!("the transfer task failed: {e}"))),
    };
    let crc = sink.sum();
    let stored = sink.inner_mut().inner_mut().finish().await;
    let moved = match moved {
        // The bucket changed: that is why, whatever the store said of its
        // body cut short.
        Err(V2Failure::Store(e)) if *e.code() == S3ErrorCode::AccessDenied => Err(V2Failure::Store(e)),
        Err(V2Failure::Store(e)) => Err(V2Failure::Store(stored.unwrap_or(e))),
        m => m,
    };
    let etag = sink
        .inner_mut()
        .inner_mut()
        .take_response()
        .and_then(|r| etag_of(&r.output).map(|e| format!("\"{}\"", e.value())));
    Ok((moved, etag, crc))
}
