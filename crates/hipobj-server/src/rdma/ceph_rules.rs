//! The Ceph RGW fork's rules for a token request, reproduced for tests of
//! clients (`rdma.rules = "ceph-rgw"`, docs/server.md): a transfer over
//! the limit is answered `413` (the fork's session buffer is 64 MiB), with
//! no limit named; and every `x-amz-rdma-*` request header must be among
//! the SigV4 signed headers, else `403`. Signed means covered by the
//! signature that s3s verified: this module only checks the list.

use http::{HeaderMap, StatusCode, Uri};
use s3s::S3Error;

use super::error;

/// Which rules token requests are held to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RdmaRules {
    /// This server's own: over the limit is `400 InvalidRDMAToken` naming
    /// the limit; the headers are signed as the client chose.
    #[default]
    Hipobj,
    /// The Ceph RGW fork's (module docs).
    CephRgw,
}

/// The prefix of every header of the RDMA protocols.
const RDMA_HEADER_PREFIX: &str = "x-amz-rdma-";

/// The header names a request's SigV4 signature covers: the
/// Authorization header's `SignedHeaders=`, or a presigned URL's
/// `X-Amz-SignedHeaders`. Empty when it has neither (an anonymous
/// request).
pub(super) fn signed_headers(headers: &HeaderMap, uri: &Uri) -> Vec<String> {
    let list = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|auth| {
            auth.split([',', ' '])
                .find_map(|part| part.trim().strip_prefix("SignedHeaders="))
                .map(str::to_owned)
        })
        .or_else(|| {
            uri.query()?.split('&').find_map(|pair| {
                let (name, value) = pair.split_once('=')?;
                name.eq_ignore_ascii_case("X-Amz-SignedHeaders")
                    .then(|| value.replace("%3B", ";").replace("%3b", ";"))
            })
        })
        .unwrap_or_default();
    list.split(';')
        .filter(|n| !n.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

/// Holds a token request of `len` bytes to `rules` (`max` the server's
/// limit on one transfer).
pub(super) fn admit(
    rules: RdmaRules,
    headers: &HeaderMap,
    uri: &Uri,
    len: u64,
    max: u64,
) -> Result<(), S3Error> {
    if rules != RdmaRules::CephRgw {
        return Ok(());
    }
    let signed = signed_headers(headers, uri);
    if let Some(name) = headers
        .keys()
        .map(http::HeaderName::as_str)
        .find(|n| n.starts_with(RDMA_HEADER_PREFIX) && !signed.iter().any(|s| s == n))
    {
        return Err(error(
            "AccessDenied",
            StatusCode::FORBIDDEN,
            format!("{name} is not among the request's signed headers"),
        ));
    }
    if len > max {
        return Err(error(
            "EntityTooLarge",
            StatusCode::PAYLOAD_TOO_LARGE,
            "the transfer is larger than the RDMA session buffer",
        ));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn with_auth(auth: &str, extra: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, auth.parse().unwrap());
        for n in extra {
            h.insert(
                http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                "x".parse().unwrap(),
            );
        }
        h
    }

    const AUTH: &str = "AWS4-HMAC-SHA256 Credential=k/20261207/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date;x-amz-rdma-token, Signature=00";

    #[test]
    fn an_unsigned_rdma_header_is_refused_and_a_signed_one_passes() {
        let uri: Uri = "/b/k".parse().unwrap();
        let h = with_auth(AUTH, &["x-amz-rdma-token"]);
        assert!(admit(RdmaRules::CephRgw, &h, &uri, 1, 10).is_ok());
        // A party on the path adds a header the signature does not cover.
        let h = with_auth(AUTH, &["x-amz-rdma-token", "x-amz-rdma-offset"]);
        let e = admit(RdmaRules::CephRgw, &h, &uri, 1, 10).unwrap_err();
        assert_eq!(e.status_code(), Some(StatusCode::FORBIDDEN));
        // This server's own rules leave it to the signature.
        assert!(admit(RdmaRules::Hipobj, &h, &uri, 1, 10).is_ok());
    }

    #[test]
    fn over_the_limit_is_413_and_names_no_limit() {
        let uri: Uri = "/b/k".parse().unwrap();
        let h = with_auth(AUTH, &["x-amz-rdma-token"]);
        let e = admit(RdmaRules::CephRgw, &h, &uri, 11, 10).unwrap_err();
        assert_eq!(e.status_code(), Some(StatusCode::PAYLOAD_TOO_LARGE));
        assert!(!e.message().unwrap_or("").contains("10"));
    }

    #[test]
    fn a_presigned_url_names_its_signed_headers_in_the_query() {
        let uri: Uri = "/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-SignedHeaders=host%3Bx-amz-rdma-token&X-Amz-Signature=00"
            .parse()
            .unwrap();
        assert_eq!(
            signed_headers(&HeaderMap::new(), &uri),
            ["host", "x-amz-rdma-token"]
        );
    }
}
