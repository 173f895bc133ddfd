//! Who may do what: signed requests (SigV4, checked by s3s against the
//! configured keys), anonymous ones only when configured, object keys that
//! pass `storage::names`, and tokens that the signature covers.

use s3s::access::{S3Access, S3AccessContext};
use s3s::dto;
use s3s::path::S3Path;
use s3s::{S3Request, S3Result, s3_error};

use crate::storage::names::check_key;

/// The access policy.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Serve unsigned requests.
    pub anonymous: bool,
}

/// The signed header names of a SigV4 request, from the Authorization
/// header or the presigned URL's query.
fn signed_headers<'a>(headers: &'a http::HeaderMap, uri: &'a http::Uri) -> Option<Vec<String>> {
    let from_auth = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.split([',', ' '])
                .find_map(|part| part.trim().strip_prefix("SignedHeaders="))
                .map(str::to_owned)
        });
    let from_query = || {
        uri.query().and_then(|q| {
            q.split('&')
                .find_map(|kv| kv.strip_prefix("X-Amz-SignedHeaders="))
                .map(|v| v.replace("%3B", ";").replace("%3b", ";"))
        })
    };
    from_auth
        .or_else(from_query)
        .map(|list| list.split(';').map(|h| h.trim().to_ascii_lowercase()).collect())
}

#[async_trait::async_trait]
impl S3Access for Policy {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let signed = cx.credentials().is_some();
        if !signed && !self.anonymous {
            return Err(s3_error!(
                AccessDenied,
                "anonymous access is off on this server: sign the request (AWS SigV4)"
            ));
        }
        if let S3Path::Object { key, .. } = cx.s3_path() {
            check_key(key)?;
        }
        if signed && cx.headers().contains_key(hipobj_proto::TOKEN_HEADER) {
            let covered = signed_headers(cx.headers(), cx.uri())
                .is_some_and(|h| h.iter().any(|n| n == hipobj_proto::TOKEN_HEADER));
            if !covered {
                return Err(s3_error!(
                    AccessDenied,
                    "x-amz-rdma-token must be one of the request's signed headers"
                ));
            }
        }
        Ok(())
    }

    async fn copy_object(&self, req: &mut S3Request<dto::CopyObjectInput>) -> S3Result<()> {
        if let dto::CopySource::Bucket { key, .. } = &req.input.copy_source {
            check_key(key)?;
        }
        Ok(())
    }

    async fn upload_part_copy(&self, req: &mut S3Request<dto::UploadPartCopyInput>) -> S3Result<()> {
        if let dto::CopySource::Bucket { key, .. } = &req.input.copy_source {
            check_key(key)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_signed_headers() {
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_static(
                "AWS4-HMAC-SHA256 Credential=ak/20260101/us-east-1/s3/aws4_request, \
                 SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-rdma-token, Signature=ab",
            ),
        );
        let uri: http::Uri = "/b/k".parse().unwrap_or_default();
        let s = signed_headers(&h, &uri).unwrap_or_default();
        assert!(s.contains(&"x-amz-rdma-token".to_owned()));
        let uri: http::Uri = "/b/k?X-Amz-SignedHeaders=host%3Bx-amz-rdma-token&X-Amz-Signature=1"
            .parse()
            .unwrap_or_default();
        let s = signed_headers(&http::HeaderMap::new(), &uri).unwrap_or_default();
        assert_eq!(s, ["host", "x-amz-rdma-token"]);
    }
}
