//! The built-in S3 client: hipobj-s3 (aws-sdk-s3 with the token, the
//! binding round and the plain-HTTP fallback) for Python programs that do
//! not use boto3.

use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::{BehaviorVersion, RequestChecksumCalculation, ResponseChecksumValidation};
use aws_sdk_s3::primitives::{ByteStream, DateTime};
use aws_sdk_s3::types::CompletedMultipartUpload;
use hipobj::ErrorKind;
use hipobj_s3::credentials::{self, Source};
use hipobj_s3::{Parallel, RdmaS3Client, Span, Transfer};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::memory::Registration;
use crate::{Client, own_err, raise_s3};

/// aws-sdk-s3 on a runtime of its own, paired with a hipObject client.
#[pyclass(module = "hipobj._native", name = "S3Client", frozen)]
pub(crate) struct S3Client {
    inner: RdmaS3Client,
    // Keeps the runtime the SDK runs on alive as long as the client.
    _rt: tokio::runtime::Runtime,
}

fn result<'py>(py: Python<'py>, t: &Transfer) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("bytes", t.bytes)?;
    d.set_item("rdma", t.rdma)?;
    d.set_item("declined", t.declined.clone())?;
    d.set_item("etag", t.etag.clone())?;
    d.set_item("object_size", t.object_size)?;
    d.set_item("status", t.status)?;
    Ok(d)
}

/// Seconds since the epoch of an S3 time stamp.
fn epoch(t: Option<&DateTime>) -> Option<f64> {
    t.map(|t| t.secs() as f64 + f64::from(t.subsec_nanos()) / 1e9)
}

/// One entry of a listing: `{"key", "size", "etag", "mtime"}`.
fn object_entry<'py>(py: Python<'py>, o: &aws_sdk_s3::types::Object) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("key", o.key())?;
    d.set_item("size", o.size().unwrap_or(0))?;
    d.set_item("etag", o.e_tag())?;
    d.set_item("mtime", epoch(o.last_modified()))?;
    Ok(d)
}

impl S3Client {
    /// Runs one SDK call on the client's runtime with the GIL released.
    fn call<T: Send, F>(&self, py: Python<'_>, f: impl FnOnce(aws_sdk_s3::Client) -> F + Send) -> PyResult<T>
    where
        F: std::future::Future<Output = Result<T, hipobj_s3::Error>> + Send,
    {
        let s3 = self.inner.s3().clone();
        let rt = self.inner.runtime().clone();
        py.allow_threads(|| rt.block_on(f(s3)))
            .map_err(|e| raise_s3(py, &e))
    }
}

/// Explicit keys (both, with an optional session token), or the SDK's
/// default chain with an optional profile; not both.
fn credential_source(
    access_key: Option<&str>,
    secret_key: Option<&str>,
    session_token: Option<&str>,
    profile: Option<&str>,
) -> Result<Source, &'static str> {
    match (access_key, secret_key) {
        (Some(k), Some(s)) if profile.is_none() => Ok(Source::keys(k, s, session_token)),
        (Some(_), Some(_)) => Err("give either access_key and secret_key or a profile, not both"),
        (Some(_), None) | (None, Some(_)) => {
            Err("access_key and secret_key go together: give both or neither")
        }
        (None, None) if session_token.is_some() => Err(
            "a session_token goes with access_key and secret_key (or set AWS_SESSION_TOKEN with AWS_ACCESS_KEY_ID)",
        ),
        (None, None) => Ok(Source::chain(profile)),
    }
}

#[pymethods]
impl S3Client {
    #[new]
    #[pyo3(signature = (client, endpoint, access_key=None, secret_key=None, region=None, fallback=true, ca_bundle=None, session_token=None, profile=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        client: &Client,
        endpoint: &str,
        access_key: Option<&str>,
        secret_key: Option<&str>,
        region: Option<&str>,
        fallback: bool,
        ca_bundle: Option<std::path::PathBuf>,
        session_token: Option<&str>,
        profile: Option<&str>,
    ) -> PyResult<Self> {
        let source = credential_source(access_key, secret_key, session_token, profile)
            .map_err(|why| own_err(py, ErrorKind::InvalidValue, why))?;
        // The argument, else AWS_CA_BUNDLE, else the system's roots.
        let http = hipobj_s3::tls::CaBundle::resolve(ca_bundle.as_deref())
            .and_then(|ca| hipobj_s3::tls::http_client(ca.as_ref()))
            .map_err(|e| own_err(py, ErrorKind::InvalidValue, e.to_string()))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| {
                own_err(
                    py,
                    ErrorKind::InternalError,
                    format!("cannot start the I/O runtime: {e}"),
                )
            })?;
        // A provider, not resolved keys: the SDK's identity cache asks it
        // again before temporary credentials expire.
        let (region, creds) = py.allow_threads(|| {
            rt.block_on(async {
                let region = credentials::region(region, profile).await;
                let creds = credentials::provider(&source, region.clone(), Some(http.clone())).await;
                (region, creds)
            })
        });
        let conf = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .http_client(http)
            .endpoint_url(endpoint)
            .region(region)
            .credentials_provider(creds)
            .force_path_style(true)
            // Requests without a token (HeadObject, Create/Complete/
            // AbortMultipartUpload, small bodies, listings) retry as the
            // AWS SDKs' standard mode does (503 SlowDown, 500, 502, 504,
            // failed connections), with docs/protocol.md's attempts and
            // pauses; hipobj-s3 turns the SDK's retries off for each
            // request that carries a token and retries those itself.
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(4)
                    .with_initial_backoff(std::time::Duration::from_millis(100))
                    .with_max_backoff(std::time::Duration::from_secs(5)),
            )
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            .build();
        let s3 = aws_sdk_s3::Client::from_conf(conf);
        let inner = RdmaS3Client::new(s3, client.inner.clone(), rt.handle().clone()).fallback(fallback);
        Ok(Self { inner, _rt: rt })
    }

    /// GetObject (optionally a `range` such as `bytes=0-1023`) into `len`
    /// bytes at `offset` of `reg`. Returns a dict of what happened.
    #[pyo3(signature = (reg, offset, len, bucket, key, range=None))]
    #[allow(clippy::too_many_arguments)]
    fn get_object<'py>(
        &self,
        py: Python<'py>,
        reg: &Registration,
        offset: usize,
        len: usize,
        bucket: &str,
        key: &str,
        range: Option<&str>,
    ) -> PyResult<Bound<'py, PyDict>> {
        reg.check_writable(py)?;
        let at = Span { offset, len };
        let out = reg.with_host(py, |r| self.inner.get_object(r, at, bucket, key, range))?;
        result(py, &out.map_err(|e| raise_s3(py, &e))?)
    }

    /// Bytes `first..first + len` of the object into `len` bytes at
    /// `offset` of `reg`, as hipobj-s3's `get_ranges` moves them: ranged
    /// GETs of `part_size` bytes (the client's when None; a server's
    /// smaller limit, learned from its refusal, wins), `in_flight` at a
    /// time, every part proven and of one ETag.
    #[pyo3(signature = (reg, offset, len, bucket, key, first, part_size=None, in_flight=None))]
    #[allow(clippy::too_many_arguments)]
    fn get_object_ranges<'py>(
        &self,
        py: Python<'py>,
        reg: &Registration,
        offset: usize,
        len: usize,
        bucket: &str,
        key: &str,
        first: u64,
        part_size: Option<usize>,
        in_flight: Option<usize>,
    ) -> PyResult<Bound<'py, PyDict>> {
        reg.check_writable(py)?;
        let now = self.inner.parallel_settings();
        let c = self.inner.clone().parallel(Parallel {
            part_size: part_size.unwrap_or(now.part_size),
            in_flight: in_flight.unwrap_or(now.in_flight),
        });
        let at = Span { offset, len };
        let out = reg.with_host(py, |r| c.get_ranges(r, at, bucket, key, first))?;
        result(py, &out.map_err(|e| raise_s3(py, &e))?)
    }

    /// PutObject of the `len` bytes at `offset` of `reg`.
    fn put_object<'py>(
        &self,
        py: Python<'py>,
        reg: &Registration,
        offset: usize,
        len: usize,
        bucket: &str,
        key: &str,
    ) -> PyResult<Bound<'py, PyDict>> {
        let at = Span { offset, len };
        let out = reg.with_host(py, |r| self.inner.put_object(r, at, bucket, key))?;
        result(py, &out.map_err(|e| raise_s3(py, &e))?)
    }

    /// PutObject of the `len` bytes at `offset` of `reg`, split by
    /// hipobj-s3 as a multipart upload of `part_size`-byte parts,
    /// `in_flight` at a time (the server's limit and protocol decide as
    /// for `put_object`: hipobj-rc-v2 takes it whole).
    #[allow(clippy::too_many_arguments)]
    fn put_object_in_parts<'py>(
        &self,
        py: Python<'py>,
        reg: &Registration,
        offset: usize,
        len: usize,
        bucket: &str,
        key: &str,
        part_size: usize,
        in_flight: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        let at = Span { offset, len };
        let c = self.inner.clone().parallel(Parallel { part_size, in_flight });
        let out = reg.with_host(py, |r| c.put_object(r, at, bucket, key))?;
        result(py, &out.map_err(|e| raise_s3(py, &e))?)
    }

    /// UploadPart `number` of `upload_id` from the `len` bytes at `offset`.
    #[allow(clippy::too_many_arguments)]
    fn upload_part<'py>(
        &self,
        py: Python<'py>,
        reg: &Registration,
        offset: usize,
        len: usize,
        bucket: &str,
        key: &str,
        upload_id: &str,
        number: i32,
    ) -> PyResult<Bound<'py, PyDict>> {
        let at = Span { offset, len };
        let out = reg.with_host(py, |r| {
            self.inner.upload_part(r, at, bucket, key, upload_id, number)
        })?;
        result(py, &out.map_err(|e| raise_s3(py, &e))?)
    }

    /// HeadObject: `{"size", "etag", "mtime"}`; a missing key is `NoSuchKey`.
    fn head_object<'py>(&self, py: Python<'py>, bucket: &str, key: &str) -> PyResult<Bound<'py, PyDict>> {
        let (b, k) = (bucket.to_owned(), key.to_owned());
        let out = self.call(py, move |s3| async move {
            s3.head_object()
                .bucket(b)
                .key(k)
                .send()
                .await
                .map_err(|e| hipobj_s3::Error::from_sdk("HeadObject", &e))
        })?;
        let d = PyDict::new(py);
        d.set_item("size", out.content_length().unwrap_or(0))?;
        d.set_item("etag", out.e_tag())?;
        d.set_item("mtime", epoch(out.last_modified()))?;
        Ok(d)
    }

    /// ListObjectsV2 of `prefix` (every page): `(objects, common prefixes)`;
    /// with `delimiter` (`"/"`) the keys below the next delimiter are
    /// folded into common prefixes.
    #[pyo3(signature = (bucket, prefix="", delimiter=None))]
    fn list_objects<'py>(
        &self,
        py: Python<'py>,
        bucket: &str,
        prefix: &str,
        delimiter: Option<&str>,
    ) -> PyResult<(Bound<'py, PyList>, Vec<String>)> {
        let objects = PyList::empty(py);
        let mut prefixes = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let (b, p, d, t) = (
                bucket.to_owned(),
                prefix.to_owned(),
                delimiter.map(str::to_owned),
                token.take(),
            );
            let page = self.call(py, move |s3| async move {
                s3.list_objects_v2()
                    .bucket(b)
                    .prefix(p)
                    .set_delimiter(d)
                    .set_continuation_token(t)
                    .send()
                    .await
                    .map_err(|e| hipobj_s3::Error::from_sdk("ListObjectsV2", &e))
            })?;
            for o in page.contents() {
                objects.append(object_entry(py, o)?)?;
            }
            prefixes.extend(
                page.common_prefixes()
                    .iter()
                    .filter_map(|c| c.prefix().map(str::to_owned)),
            );
            match page.next_continuation_token() {
                Some(t) if page.is_truncated() == Some(true) => token = Some(t.to_owned()),
                _ => break,
            }
        }
        Ok((objects, prefixes))
    }

    /// DeleteObject.
    fn delete_object(&self, py: Python<'_>, bucket: &str, key: &str) -> PyResult<()> {
        let (b, k) = (bucket.to_owned(), key.to_owned());
        self.call(py, move |s3| async move {
            s3.delete_object()
                .bucket(b)
                .key(k)
                .send()
                .await
                .map(drop)
                .map_err(|e| hipobj_s3::Error::from_sdk("DeleteObject", &e))
        })
    }

    /// CopyObject inside the server.
    fn copy_object(
        &self,
        py: Python<'_>,
        bucket: &str,
        key: &str,
        src_bucket: &str,
        src_key: &str,
    ) -> PyResult<()> {
        let (b, k, src) = (
            bucket.to_owned(),
            key.to_owned(),
            format!("{src_bucket}/{src_key}"),
        );
        self.call(py, move |s3| async move {
            s3.copy_object()
                .bucket(b)
                .key(k)
                .copy_source(src)
                .send()
                .await
                .map(drop)
                .map_err(|e| hipobj_s3::Error::from_sdk("CopyObject", &e))
        })
    }

    /// PutObject of `data` in the HTTP body (for empty and small objects,
    /// which RDMA cannot or need not carry).
    fn put_bytes(&self, py: Python<'_>, bucket: &str, key: &str, data: Vec<u8>) -> PyResult<()> {
        let (b, k) = (bucket.to_owned(), key.to_owned());
        self.call(py, move |s3| async move {
            s3.put_object()
                .bucket(b)
                .key(k)
                .body(ByteStream::from(data))
                .send()
                .await
                .map(drop)
                .map_err(|e| hipobj_s3::Error::from_sdk("PutObject", &e))
        })
    }

    /// GetObject of the whole object (or `range`) in the HTTP body.
    #[pyo3(signature = (bucket, key, range=None))]
    fn get_bytes<'py>(
        &self,
        py: Python<'py>,
        bucket: &str,
        key: &str,
        range: Option<&str>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let (b, k, r) = (bucket.to_owned(), key.to_owned(), range.map(str::to_owned));
        let data = self.call(py, move |s3| async move {
            let out = s3
                .get_object()
                .bucket(b)
                .key(k)
                .set_range(r)
                .send()
                .await
                .map_err(|e| hipobj_s3::Error::from_sdk("GetObject", &e))?;
            out.body
                .collect()
                .await
                .map(|d| d.into_bytes().to_vec())
                .map_err(|e| {
                    hipobj_s3::Error::new(
                        ErrorKind::S3Error,
                        format!("GetObject: reading the body failed: {e}"),
                    )
                })
        })?;
        Ok(PyBytes::new(py, &data))
    }

    /// CreateBucket.
    fn create_bucket(&self, py: Python<'_>, bucket: &str) -> PyResult<()> {
        let b = bucket.to_owned();
        self.call(py, move |s3| async move {
            s3.create_bucket()
                .bucket(b)
                .send()
                .await
                .map(drop)
                .map_err(|e| hipobj_s3::Error::from_sdk("CreateBucket", &e))
        })
    }

    /// CreateMultipartUpload; returns the upload id.
    fn create_multipart_upload(&self, py: Python<'_>, bucket: &str, key: &str) -> PyResult<String> {
        let s3 = self.inner.s3().clone();
        let rt = self.inner.runtime().clone();
        let out = py.allow_threads(|| {
            rt.block_on(s3.create_multipart_upload().bucket(bucket).key(key).send())
                .map_err(|e| hipobj_s3::Error::from_sdk("CreateMultipartUpload", &e))
        });
        let out = out.map_err(|e| raise_s3(py, &e))?;
        out.upload_id().map(str::to_owned).ok_or_else(|| {
            own_err(
                py,
                ErrorKind::S3Error,
                "CreateMultipartUpload: the response carries no UploadId",
            )
        })
    }

    /// CompleteMultipartUpload from `(number, etag)` pairs; returns the ETag.
    fn complete_multipart_upload(
        &self,
        py: Python<'_>,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: Vec<(i32, Option<String>)>,
    ) -> PyResult<Option<String>> {
        let s3 = self.inner.s3().clone();
        let rt = self.inner.runtime().clone();
        let done = CompletedMultipartUpload::builder()
            .set_parts(Some(
                parts
                    .into_iter()
                    .map(|(n, etag)| hipobj_s3::completed_part(n, etag))
                    .collect(),
            ))
            .build();
        let out = py.allow_threads(|| {
            rt.block_on(
                s3.complete_multipart_upload()
                    .bucket(bucket)
                    .key(key)
                    .upload_id(upload_id)
                    .multipart_upload(done)
                    .send(),
            )
            .map_err(|e| hipobj_s3::Error::from_sdk("CompleteMultipartUpload", &e))
        });
        let out = out.map_err(|e| raise_s3(py, &e))?;
        Ok(out.e_tag().map(str::to_owned))
    }

    /// AbortMultipartUpload (after a failed part).
    fn abort_multipart_upload(
        &self,
        py: Python<'_>,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> PyResult<()> {
        let s3 = self.inner.s3().clone();
        let rt = self.inner.runtime().clone();
        let out = py.allow_threads(|| {
            rt.block_on(
                s3.abort_multipart_upload()
                    .bucket(bucket)
                    .key(key)
                    .upload_id(upload_id)
                    .send(),
            )
            .map_err(|e| hipobj_s3::Error::from_sdk("AbortMultipartUpload", &e))
        });
        out.map(drop).map_err(|e| raise_s3(py, &e))
    }
}
