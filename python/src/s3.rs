//! The built-in S3 client: hipobj-s3 (aws-sdk-s3 with the token, the
//! binding round and the plain-HTTP fallback) for Python programs that do
//! not use boto3.

use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_sdk_s3::types::CompletedMultipartUpload;
use hipobj::ErrorKind;
use hipobj_s3::{RdmaS3Client, Span, Transfer};
use pyo3::prelude::*;
use pyo3::types::PyDict;

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

#[pymethods]
impl S3Client {
    #[new]
    #[pyo3(signature = (client, endpoint, access_key, secret_key, region="us-east-1", fallback=true, ca_bundle=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        client: &Client,
        endpoint: &str,
        access_key: &str,
        secret_key: &str,
        region: &str,
        fallback: bool,
        ca_bundle: Option<std::path::PathBuf>,
    ) -> PyResult<Self> {
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
        let conf = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .http_client(http)
            .endpoint_url(endpoint)
            .region(Region::new(region.to_owned()))
            .credentials_provider(Credentials::new(
                access_key,
                secret_key,
                None,
                None,
                "hipobj-python",
            ))
            .force_path_style(true)
            .retry_config(RetryConfig::disabled())
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
        if reg.is_readonly() {
            return Err(own_err(
                py,
                ErrorKind::InvalidValue,
                "a GET needs writable memory; this buffer is read-only",
            ));
        }
        let at = Span { offset, len };
        let out = reg.with_host(py, |r| self.inner.get_object(r, at, bucket, key, range))?;
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
