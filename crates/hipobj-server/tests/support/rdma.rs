//! S3 requests carrying `x-amz-rdma-token`, sent with aws-sdk-s3 (the
//! token header is signed, the payload is UNSIGNED-PAYLOAD), and what came
//! back: status, reply header, byte count, error code.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use aws_sdk_s3::config::interceptors::BeforeDeserializationInterceptorContextRef;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_s3::error::BoxError;

/// What a token request got back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub status: u16,
    pub reply: Option<String>,
    pub bytes: Option<u64>,
    pub code: Option<String>,
    pub etag: Option<String>,
    pub content_length: Option<String>,
    pub cache_control: Option<String>,
}

impl Outcome {
    pub(crate) fn parsed(&self) -> hipobj_proto::Reply {
        hipobj_proto::parse_reply(self.reply.as_deref().unwrap_or("").as_bytes()).unwrap()
    }
}

#[derive(Clone, Debug, Default)]
struct Capture(Arc<Mutex<Outcome>>);

impl Intercept for Capture {
    fn name(&self) -> &'static str {
        "capture-rdma-reply"
    }

    fn read_before_deserialization(
        &self,
        ctx: &BeforeDeserializationInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let r = ctx.response();
        let h = r.headers();
        let mut o = self.0.lock().unwrap();
        o.status = r.status().as_u16();
        o.reply = h.get(hipobj_proto::REPLY_HEADER).map(str::to_owned);
        o.bytes = h.get(hipobj_proto::BYTES_HEADER).and_then(|v| v.parse().ok());
        o.etag = h.get("etag").map(str::to_owned);
        o.content_length = h.get("content-length").map(str::to_owned);
        o.cache_control = h.get("cache-control").map(str::to_owned);
        Ok(())
    }
}

fn finish<T, E: aws_sdk_s3::error::ProvideErrorMetadata, R>(
    cap: Capture,
    r: Result<T, aws_sdk_s3::error::SdkError<E, R>>,
) -> Outcome {
    let mut o = cap.0.lock().unwrap().clone();
    if let Err(e) = r {
        o.code = Some(
            e.as_service_error()
                .and_then(|s| s.code())
                .unwrap_or("not a service error")
                .to_owned(),
        );
    }
    o
}

/// GetObject with `token` (and an optional Range).
pub(crate) async fn get(
    c: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    token: &str,
    range: Option<&str>,
) -> Outcome {
    let cap = Capture::default();
    let t = token.to_owned();
    let r = c
        .get_object()
        .bucket(bucket)
        .key(key)
        .set_range(range.map(str::to_owned))
        .customize()
        .mutate_request(move |req| {
            req.headers_mut().insert(hipobj_proto::TOKEN_HEADER, t.clone());
        })
        .interceptor(cap.clone())
        .send()
        .await;
    let r = match r {
        Ok(out) => {
            // An RDMA GET has no body.
            let body = out.body.collect().await.unwrap().into_bytes();
            assert!(body.is_empty(), "an RDMA GET returned {} body bytes", body.len());
            Ok(())
        }
        Err(e) => Err(e),
    };
    finish(cap, r)
}

/// PutObject with `token`, an empty body, and optional Content-MD5.
pub(crate) async fn put(
    c: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    token: &str,
    md5_b64: Option<&str>,
) -> Outcome {
    let cap = Capture::default();
    let t = token.to_owned();
    let r = c
        .put_object()
        .bucket(bucket)
        .key(key)
        .set_content_md5(md5_b64.map(str::to_owned))
        .customize()
        .disable_payload_signing()
        .mutate_request(move |req| {
            req.headers_mut().insert(hipobj_proto::TOKEN_HEADER, t.clone());
        })
        .interceptor(cap.clone())
        .send()
        .await;
    finish(cap, r)
}

/// UploadPart with `token` and an empty body.
pub(crate) async fn upload_part(
    c: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    upload_id: &str,
    part: i32,
    token: &str,
) -> Outcome {
    let cap = Capture::default();
    let t = token.to_owned();
    let r = c
        .upload_part()
        .bucket(bucket)
        .key(key)
        .upload_id(upload_id)
        .part_number(part)
        .customize()
        .disable_payload_signing()
        .mutate_request(move |req| {
            req.headers_mut().insert(hipobj_proto::TOKEN_HEADER, t.clone());
        })
        .interceptor(cap.clone())
        .send()
        .await;
    finish(cap, r)
}

/// What one RDMA request asks the server for.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    Get { key: String, range: Option<String> },
    Put { key: String },
    Part { key: String, upload_id: String, n: i32 },
}

impl Op {
    /// GetObject of the whole object.
    pub(crate) fn get(key: impl Into<String>) -> Self {
        Self::Get {
            key: key.into(),
            range: None,
        }
    }

    /// PutObject.
    pub(crate) fn put(key: impl Into<String>) -> Self {
        Self::Put { key: key.into() }
    }
}

/// The hipobj `Control` over aws-sdk-s3: each `send_request` is one real,
/// signed S3 request carrying the token; `recv_reply` hands back its
/// `x-amz-rdma-reply`. Every token sent and every outcome are kept.
pub(crate) struct S3Control<'a> {
    pub rt: &'a tokio::runtime::Handle,
    pub s3: &'a aws_sdk_s3::Client,
    pub bucket: &'a str,
    pub op: Op,
    pub tokens: Vec<String>,
    pub seen: Vec<Outcome>,
}

impl<'a> S3Control<'a> {
    pub(crate) fn new(
        rt: &'a tokio::runtime::Handle,
        s3: &'a aws_sdk_s3::Client,
        bucket: &'a str,
        op: Op,
    ) -> Self {
        Self {
            rt,
            s3,
            bucket,
            op,
            tokens: Vec::new(),
            seen: Vec::new(),
        }
    }

    /// The last request's outcome.
    pub(crate) fn last(&self) -> &Outcome {
        self.seen.last().unwrap()
    }
}

impl hipobj::Control for S3Control<'_> {
    fn send_request(&mut self, token: &str) -> Result<(), hipobj::ControlError> {
        self.tokens.push(token.to_owned());
        let b = self.bucket;
        let o = self.rt.block_on(async {
            match &self.op {
                Op::Get { key, range } => get(self.s3, b, key, token, range.as_deref()).await,
                Op::Put { key } => put(self.s3, b, key, token, None).await,
                Op::Part { key, upload_id, n } => upload_part(self.s3, b, key, upload_id, *n, token).await,
            }
        });
        self.seen.push(o);
        Ok(())
    }

    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, hipobj::ControlError> {
        let o = self.last();
        let r = o.reply.as_deref().ok_or_else(|| {
            hipobj::ControlError(format!("HTTP {} {:?}: no x-amz-rdma-reply", o.status, o.code))
        })?;
        reply[..r.len()].copy_from_slice(r.as_bytes());
        Ok(r.len())
    }
}
