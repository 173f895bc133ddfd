//! The S3 back end: every request is forwarded to another S3 service with
//! aws-sdk-s3, through s3s-aws's proxy. The server then adds RDMA and its
//! own credentials in front of MinIO, Ceph RGW, AWS, garage or moto.

use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_smithy_runtime_api::client::result::ConnectorError;
use s3s::{S3, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, dto};

use serde::{Deserialize, Serialize};

/// The S3 service the S3 back end forwards to.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteConfig {
    /// Its URL, e.g. `http://127.0.0.1:9001`.
    pub endpoint: String,
    /// The region to sign for.
    #[serde(default = "default_region")]
    pub region: String,
    /// Access key id at that service.
    pub access_key: String,
    /// Secret key at that service.
    pub secret_key: String,
    /// Path-style addressing (`/bucket/key`); most self-hosted services need it.
    #[serde(default = "yes")]
    pub path_style: bool,
}

impl std::fmt::Debug for RemoteConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteConfig")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key", &self.access_key)
            .field("path_style", &self.path_style)
            .finish_non_exhaustive()
    }
}

fn default_region() -> String {
    "us-east-1".into()
}

fn yes() -> bool {
    true
}

/// The proxy, with one change to its errors: a back end that gave no
/// answer is `503 ServiceUnavailable` (see [`upstream`]).
pub struct Remote {
    proxy: s3s_aws::Proxy,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote").finish_non_exhaustive()
    }
}

/// A proxy to the service `config` names.
pub fn open(config: &RemoteConfig) -> Remote {
    let creds = Credentials::new(
        config.access_key.clone(),
        config.secret_key.clone(),
        None,
        None,
        "hipobj-server configuration",
    );
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(config.endpoint.clone())
        .region(Region::new(config.region.clone()))
        .credentials_provider(creds)
        .force_path_style(config.path_style)
        // Checksums travel as the client sent them; the proxy adds none.
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        // A GET's body is checked against the checksum the back end
        // returns with it (`ChecksumMode`), so that bytes the back end or
        // the path to it damaged fail the read instead of reaching the
        // client (or its memory by RDMA) as good ones.
        .response_checksum_validation(ResponseChecksumValidation::WhenSupported)
        .build();
    Remote {
        proxy: s3s_aws::Proxy::from(aws_sdk_s3::Client::from_conf(conf)),
    }
}

/// s3s-aws answers `500 InternalError` for every SDK failure that carries
/// no response from the back end: the connection refused or broken, a
/// timeout, a response cut off or unreadable. Those say that this gateway
/// cannot reach its store, not that the request is wrong, so they become
/// `503 ServiceUnavailable`: a client with several gateways
/// (`FailoverClient`, `hipobj --endpoint-url A,B`) then sends the request
/// to another gateway, whose path to the store may work (a distributed
/// store with one node down). A request whose own body failed (an RDMA
/// upload that stopped part way: the SDK's "user" connector error) stays as
/// it was, and so do the back end's own error responses.
fn upstream(e: S3Error) -> S3Error {
    let no_answer = *e.code() == S3ErrorCode::InternalError && e.source().is_some_and(store_did_not_answer);
    if no_answer {
        tracing::warn!(error = ?e.source(), "the S3 back end did not answer");
        S3Error::with_message(
            S3ErrorCode::ServiceUnavailable,
            "the storage back end behind this gateway did not answer",
        )
    } else {
        e
    }
}

/// Whether `e`, the SDK error behind an s3s-aws error, is the store not
/// answering. aws-smithy's `SdkError` names its variant in its Display and
/// has the connector's error as its source.
fn store_did_not_answer(e: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    match e.to_string().as_str() {
        "request has timed out" | "response error" => true,
        "dispatch failure" => std::error::Error::source(e)
            .and_then(|c| c.downcast_ref::<ConnectorError>())
            .is_some_and(|c| !c.is_user()),
        _ => false,
    }
}

// async_trait rewrites the methods it sees in the impl, so each group is
// written out in it rather than through a nested macro call.
macro_rules! forward {
    (
        metadata { $($m:ident: $mi:ident => $mo:ident,)* }
        bytes { $($b:ident: $bi:ident => $bo:ident,)* }
    ) => {
        #[async_trait::async_trait]
        impl S3 for Remote {
            $(
                async fn $m(&self, req: S3Request<dto::$mi>) -> S3Result<S3Response<dto::$mo>> {
                    self.proxy.$m(req).await.map_err(upstream)
                }
            )*
            $(
                async fn $b(&self, mut req: S3Request<dto::$bi>) -> S3Result<S3Response<dto::$bo>> {
                    let asked = req.input.ask_checksums();
                    let mut resp = self.proxy.$b(req).await.map_err(upstream)?;
                    resp.output.keep_checksums(asked);
                    Ok(resp)
                }
            )*
        }
    };
}

/// A request of the bytes group whose answer the back end should send
/// with its checksums, so that the SDK checks the body against them.
trait AskChecksums {
    /// Asks for them; whether the client had asked itself.
    fn ask_checksums(&mut self) -> bool;
}

/// The answer to such a request: the checksums the client did not ask for
/// are left out, as the back end would have.
trait KeepChecksums {
    fn keep_checksums(&mut self, asked: bool);
}

impl AskChecksums for dto::GetObjectInput {
    fn ask_checksums(&mut self) -> bool {
        let asked = self.checksum_mode.is_some();
        if !asked {
            self.checksum_mode = Some(dto::ChecksumMode::from_static(dto::ChecksumMode::ENABLED));
        }
        asked
    }
}

impl KeepChecksums for dto::GetObjectOutput {
    fn keep_checksums(&mut self, asked: bool) {
        // The SDK checks the body as it streams and can only tell at its
        // end: the last chunk waits for that verdict, so that a body the
        // back end's checksum refuses reaches the client short, never whole.
        if let Some(body) = self.body.take() {
            self.body = Some(dto::StreamingBlob::new(HoldLast {
                inner: body,
                held: None,
            }));
        }
        if !asked {
            self.checksum_crc32 = None;
            self.checksum_crc32c = None;
            self.checksum_crc64nvme = None;
            self.checksum_sha1 = None;
            self.checksum_sha256 = None;
            self.checksum_type = None;
        }
    }
}

/// A body whose last chunk is given out only once the stream under it
/// ended cleanly.
struct HoldLast {
    inner: dto::StreamingBlob,
    held: Option<bytes::Bytes>,
}

impl futures::Stream for HoldLast {
    type Item = Result<bytes::Bytes, s3s::StdError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        loop {
            match std::pin::Pin::new(&mut self.inner).poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    if let Some(before) = self.held.replace(chunk) {
                        return Poll::Ready(Some(Ok(before)));
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    self.held = None;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => return Poll::Ready(self.held.take().map(Ok)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl s3s::stream::ByteStream for HoldLast {
    fn remaining_length(&self) -> s3s::stream::RemainingLength {
        let held = self.held.as_ref().map_or(0, bytes::Bytes::len);
        let inner = self.inner.remaining_length();
        match inner.exact() {
            Some(n) => s3s::stream::RemainingLength::new_exact(n + held),
            None => s3s::stream::RemainingLength::unknown(),
        }
    }
}

impl AskChecksums for dto::PutObjectInput {
    fn ask_checksums(&mut self) -> bool {
        true
    }
}

impl KeepChecksums for dto::PutObjectOutput {
    fn keep_checksums(&mut self, _: bool) {}
}

impl AskChecksums for dto::UploadPartInput {
    fn ask_checksums(&mut self) -> bool {
        true
    }
}

impl KeepChecksums for dto::UploadPartOutput {
    fn keep_checksums(&mut self, _: bool) {}
}

// Every operation the server serves (super::operations), to the back end.
crate::s3_operations!(forward);

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_s3::error::SdkError;
    use aws_sdk_s3::operation::get_object::GetObjectError;
    use aws_smithy_runtime_api::client::orchestrator::HttpResponse;

    fn proxied(e: SdkError<GetObjectError, HttpResponse>) -> S3Error {
        let mut err = S3Error::new(S3ErrorCode::InternalError);
        err.set_source(Box::new(e));
        upstream(err)
    }

    fn io(what: &str) -> Box<dyn std::error::Error + Send + Sync> {
        Box::new(std::io::Error::other(what.to_owned()))
    }

    #[test]
    fn no_answer_from_the_store_is_503_and_the_requests_own_failures_stay() {
        for e in [
            SdkError::dispatch_failure(ConnectorError::io(io("connection refused"))),
            SdkError::dispatch_failure(ConnectorError::other(io("closed before the answer"), None)),
            SdkError::dispatch_failure(ConnectorError::timeout(io("connect"))),
            SdkError::timeout_error(io("read")),
        ] {
            let got = proxied(e);
            assert_eq!(*got.code(), S3ErrorCode::ServiceUnavailable);
            assert_eq!(got.status_code().map(|s| s.as_u16()), Some(503));
        }
        // The request's body failed (an RDMA upload stopped): not the store.
        let got = proxied(SdkError::dispatch_failure(ConnectorError::user(io(
            "the RDMA transfer stopped",
        ))));
        assert_eq!(*got.code(), S3ErrorCode::InternalError);
        assert!(
            proxied(SdkError::construction_failure(io("bad input"))).code() == &S3ErrorCode::InternalError
        );
        // Errors s3s-aws already gave a code (the store's own answer) pass.
        let mut own = S3Error::new(S3ErrorCode::NoSuchKey);
        own.set_source(io("service error"));
        assert_eq!(*upstream(own).code(), S3ErrorCode::NoSuchKey);
    }
}
