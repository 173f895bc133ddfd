//! Who may do what: signed requests (SigV4, checked by s3s against the
//! configured keys), anonymous ones only when configured, object keys that
//! pass `hipobj_store::names`, and headers that the signature covers.
//!
//! Beyond what s3s checks, a signed request is refused when:
//!
//! * it is signed with SigV2 (no date in the signature: a captured request
//!   would replay forever);
//! * it carries an `x-amz-*` header that is not among its signed headers
//!   (a header added in transit, such as `x-amz-copy-source`, would change
//!   what the request does);
//! * it is a presigned URL valid for more than 7 days.
//!
//! A request carrying an SSE-C key (`x-amz-server-side-encryption-customer-key`
//! or its copy-source form) is refused unless its connection is TLS, as AWS
//! does: on plain HTTP everyone on the path has read the key (the
//! `sse_c_over_http` switch is for test rigs without TLS).
//!
//! Who asks goes down to the store in the request's extensions
//! ([`Requester`]): the bucket's owner; another signed key, which the fs
//! store lets do what the canned ACLs grant, and only for the operations of
//! `ACL_OPERATIONS`; or, with `public_access`, an unsigned request, the
//! same, and never with an RDMA token.
//!
//! And any request asking for what the server does not implement (SSE-KMS,
//! object lock, grants to accounts, tagging, and with the S3 back end ACLs
//! other than private) is answered `501 NotImplemented` before anything is
//! stored.

use s3s::access::{S3Access, S3AccessContext};
use s3s::dto;
use s3s::path::S3Path;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Result, s3_error};

use hipobj_store::Requester;
use hipobj_store::names::check_key;

use super::bucket_use::BucketUse;

/// The access policy.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    /// Serve unsigned requests.
    pub anonymous: bool,
    /// Who owns which bucket.
    pub owners: super::owners::Owners,
    /// Accept SSE-C keys on plain-HTTP connections.
    pub sse_c_over_http: bool,
    /// The store serves canned ACLs (the fs store): a requester other than
    /// a bucket's owner may do what they grant.
    pub acls: bool,
    /// Serve unsigned requests that the ACLs allow (off unless configured).
    pub public_access: bool,
}

/// A copy's source bucket, held as the request's own bucket is (when it
/// is another), so that the bytes copied are from the bucket checked.
#[derive(Debug, Clone)]
struct SourceUse(#[expect(dead_code, reason = "held for its drop")] BucketUse);

/// The operations a bucket's or an object's ACL can open to a requester
/// other than the bucket's owner; everything else is the owner's alone.
const ACL_OPERATIONS: &[&str] = &[
    "GetObject",
    "HeadObject",
    "ListObjects",
    "ListObjectsV2",
    "ListObjectVersions",
    "PutObject",
    "DeleteObject",
    "DeleteObjects",
];

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

/// SigV4 dates a request by `x-amz-date`, or by `Date` when that is
/// absent (AWS accepts either; botocore signs with `Date` when the caller
/// set one). s3s reads only `x-amz-date`, so for a SigV4 request that
/// signed `Date` and has no `x-amz-date`, this adds `x-amz-date` with the
/// same instant in SigV4's form. The value is part of what the signature
/// covers (the string to sign), so it cannot change what was signed.
pub(crate) fn date_for_sigv4(headers: &mut http::HeaderMap, uri: &http::Uri) {
    let sigv4 = headers
        .get(http::header::AUTHORIZATION)
        .is_some_and(|v| v.as_bytes().starts_with(b"AWS4-HMAC-SHA256 "));
    if !sigv4 || headers.contains_key("x-amz-date") {
        return;
    }
    if !signed_headers(headers, uri).is_some_and(|s| s.iter().any(|h| h == "date")) {
        return;
    }
    let amz = headers
        .get(http::header::DATE)
        .and_then(|v| v.to_str().ok())
        .and_then(amz_date_of)
        .and_then(|d| http::HeaderValue::from_str(&d).ok());
    if let Some(v) = amz {
        headers.insert("x-amz-date", v);
    }
}

/// An HTTP date (RFC 9110's IMF-fixdate, or RFC 5322's with a `+0000` or
/// `-0000` zone as Python's `formatdate` writes it) as SigV4's
/// `YYYYMMDD'T'HHMMSS'Z'`; `None` for anything else.
fn amz_date_of(date: &str) -> Option<String> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let mut parts = date.split_ascii_whitespace();
    let weekday = parts.next()?;
    if !weekday.ends_with(',') {
        return None;
    }
    let day: u32 = parts.next()?.parse().ok()?;
    let month = parts.next()?;
    let month = MONTHS.iter().position(|m| *m == month)? + 1;
    let year: u32 = parts.next()?.parse().ok()?;
    let mut hms = parts.next()?.split(':').map(|n| n.parse::<u32>().ok());
    let (h, m, sec) = (hms.next()??, hms.next()??, hms.next()??);
    let zone = parts.next()?;
    let valid = (1..=31).contains(&day)
        && (1970..=9999).contains(&year)
        && h < 24
        && m < 60
        && sec < 61
        && hms.next().is_none()
        && parts.next().is_none()
        && matches!(zone, "GMT" | "UTC" | "+0000" | "-0000");
    valid.then(|| format!("{year:04}{month:02}{day:02}T{h:02}{m:02}{sec:02}Z"))
}

/// Longest validity of a presigned URL, as AWS: 7 days.
pub(crate) const MAX_PRESIGN_SECS: u64 = 7 * 24 * 3600;

/// `x-amz-*` headers an SDK may send outside the signature that change
/// nothing the server does.
const UNSIGNED_OK: &[&str] = &["x-amz-user-agent"];

/// Whether the request is signed with SigV2 (header or query).
fn is_sig_v2(headers: &http::HeaderMap, uri: &http::Uri) -> bool {
    let header = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("AWS "));
    let query = uri.query().is_some_and(|q| {
        q.split('&')
            .any(|kv| kv.starts_with("AWSAccessKeyId=") || kv.starts_with("Signature="))
            && !q.split('&').any(|kv| kv.starts_with("X-Amz-Signature="))
    });
    header || query
}

/// The presigned URL's `X-Amz-Expires`, if any.
fn presign_expires(uri: &http::Uri) -> Option<&str> {
    uri.query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix("X-Amz-Expires="))
}

/// Whether a presigned URL's `X-Amz-Expires` is negative: it expired
/// before it was signed. s3s's parser refuses it with `400`; S3 answers
/// `403`, as for any expired URL, so the front answers before s3s.
pub(crate) fn presign_expired_at_signing(uri: &http::Uri) -> bool {
    presign_expires(uri)
        .and_then(|e| e.strip_prefix('-'))
        .is_some_and(|e| !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit()))
}

/// Refuses headers asking for features this server does not implement,
/// so that nothing is stored without the protection the client asked for.
fn refuse_unimplemented(headers: &http::HeaderMap, acls: bool) -> S3Result<()> {
    for (name, value) in headers {
        let n = name.as_str();
        let kms_value = n == "x-amz-server-side-encryption"
            && value.to_str().is_ok_and(|v| v.trim().starts_with("aws:kms"));
        let what = if kms_value
            || n.starts_with("x-amz-server-side-encryption-aws-kms")
            || n == "x-amz-server-side-encryption-context"
        {
            Some("SSE-KMS")
        } else if n.starts_with("x-amz-object-lock-") {
            Some("object lock")
        } else if n == "x-amz-bucket-object-lock-enabled" {
            value
                .to_str()
                .is_ok_and(|v| v.eq_ignore_ascii_case("true"))
                .then_some("object lock")
        } else if n.starts_with("x-amz-grant-") {
            Some("ACL grants")
        } else if n == "x-amz-acl" && acls {
            None
        } else if n == "x-amz-acl" {
            (!matches!(value.to_str(), Ok("private" | "bucket-owner-full-control")))
                .then_some("ACLs other than private with this storage back end")
        } else if n == "x-amz-tagging" {
            Some("object tagging")
        } else {
            None
        };
        if let Some(what) = what {
            return Err(S3Error::with_message(
                S3ErrorCode::NotImplemented,
                format!("{what} is not implemented by this server ({n}); nothing was done"),
            ));
        }
    }
    Ok(())
}

/// Refuses an SSE-C key that came over plain HTTP, unless configured to
/// take it.
fn check_customer_key_transport(cx: &mut S3AccessContext<'_>, over_http: bool) -> S3Result<()> {
    let carries_key = cx.headers().keys().any(|n| {
        n.as_str() == "x-amz-server-side-encryption-customer-key"
            || n.as_str() == "x-amz-copy-source-server-side-encryption-customer-key"
    });
    let tls = cx
        .extensions_mut()
        .get::<crate::front::conn::Transport>()
        .is_some_and(|t| t.tls);
    if carries_key && !tls && !over_http {
        return Err(s3_error!(
            InvalidRequest,
            "Requests specifying Server Side Encryption with Customer provided keys must be made over a secure connection."
        ));
    }
    Ok(())
}

/// An empty `Content-MD5` is refused as AWS does (s3s reads it as no
/// header at all, and the body would be stored unchecked); a malformed one
/// is refused by the store when it verifies the body.
fn check_content_md5(headers: &http::HeaderMap) -> S3Result<()> {
    match headers.get("content-md5") {
        Some(v) if v.as_bytes().iter().all(u8::is_ascii_whitespace) => Err(s3_error!(
            InvalidDigest,
            "The Content-MD5 you specified is not valid: it is empty"
        )),
        _ => Ok(()),
    }
}

/// The checks on a signed request that s3s does not make.
fn check_signed(headers: &http::HeaderMap, uri: &http::Uri) -> S3Result<()> {
    if is_sig_v2(headers, uri) {
        return Err(s3_error!(
            InvalidRequest,
            "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256."
        ));
    }
    let presigned = presign_expires(uri);
    if let Some(exp) = presigned
        && exp.parse::<u64>().map_or(true, |e| e > MAX_PRESIGN_SECS)
    {
        // 403, as S3 answers a presigned URL valid for longer than a week
        // (ceph/s3-tests' x_amz_expires cases; a negative one is refused
        // before s3s, `presign_expired_at_signing`).
        return Err(S3Error::with_message(
            S3ErrorCode::AccessDenied,
            format!("X-Amz-Expires must be less than a week (in seconds) that is {MAX_PRESIGN_SECS}"),
        ));
    }
    let signed = signed_headers(headers, uri).unwrap_or_default();
    for name in headers.keys() {
        let n = name.as_str();
        if !n.starts_with("x-amz-") || UNSIGNED_OK.contains(&n) || signed.iter().any(|s| s == n) {
            continue;
        }
        // The request is dated by its signed `Date` ([`date_for_sigv4`]);
        // the signature covers this value through the string to sign.
        if n == "x-amz-date" && signed.iter().any(|s| s == "date") {
            continue;
        }
        // A presigned request's body hash is checked against the body by
        // s3s whether or not it was signed.
        if presigned.is_some() && n == "x-amz-content-sha256" {
            continue;
        }
        return Err(S3Error::with_message(
            S3ErrorCode::AccessDenied,
            format!("{n} must be one of the request's signed headers"),
        ));
    }
    Ok(())
}

impl Policy {
    /// `bucket` held for one request (`super::bucket_use`): alone for
    /// CreateBucket and DeleteBucket, shared for everything else.
    ///
    /// A CreateBucket of another key's bucket and a DeleteBucket by a key
    /// that may not use the bucket are refused before they wait for it, so
    /// that they cannot hold up the requests of the bucket's owner; a
    /// DeleteBucket checks again, once the bucket is its alone, that it is
    /// the bucket it was allowed to delete.
    async fn hold(&self, bucket: &str, op: &str, who: Option<&str>) -> S3Result<BucketUse> {
        let uses = self.owners.uses();
        match (op, who) {
            ("CreateBucket", Some(who)) => {
                if let Err(e) = self.owners.check(bucket, who).await {
                    return Err(if *e.code() == S3ErrorCode::AccessDenied {
                        S3Error::with_message(
                            S3ErrorCode::BucketAlreadyExists,
                            "The requested bucket name is not available: another key owns it",
                        )
                    } else {
                        e
                    });
                }
                uses.exclusive(bucket).await
            }
            ("DeleteBucket", Some(who)) => {
                let allowed = self.owners.generation(bucket, who).await?;
                let held = uses.exclusive(bucket).await?;
                if self.owners.generation(bucket, who).await? != allowed {
                    return Err(S3Error::with_message(
                        S3ErrorCode::OperationAborted,
                        format!("bucket {bucket:?} was deleted or made again meanwhile; nothing was done"),
                    ));
                }
                Ok(held)
            }
            ("CreateBucket" | "DeleteBucket", None) => uses.exclusive(bucket).await,
            _ => uses.shared(bucket).await,
        }
    }

    /// `x-amz-expected-bucket-owner`: a request that names another owner
    /// than the bucket's is `403 AccessDenied`, whoever sends it (S3's
    /// guard against writing into a bucket that changed hands).
    async fn check_expected_owner(&self, cx: &S3AccessContext<'_>) -> S3Result<()> {
        let Some(expected) = cx.headers().get("x-amz-expected-bucket-owner") else {
            return Ok(());
        };
        let (S3Path::Bucket { bucket } | S3Path::Object { bucket, .. }) = cx.s3_path() else {
            return Ok(());
        };
        match self.owners.owner_id(bucket).await {
            Some(id) if expected.as_bytes() != id.as_bytes() => Err(s3_error!(
                AccessDenied,
                "the bucket's owner is not x-amz-expected-bucket-owner"
            )),
            _ => Ok(()),
        }
    }

    /// A copy's source: a key the store accepts, in a bucket the caller
    /// may use, held for the request. A source in the request's own bucket
    /// is held already (holding it twice could wait on a DeleteBucket that
    /// waits on this request).
    async fn check_copy_source(
        &self,
        source: &dto::CopySource,
        dest: &str,
        credentials: Option<&s3s::auth::Credentials>,
        extensions: &mut http::Extensions,
    ) -> S3Result<()> {
        let dto::CopySource::Bucket { bucket, key, .. } = source else {
            return Ok(());
        };
        check_key(key)?;
        if **bucket != *dest {
            let held = self.owners.uses().shared(bucket).await?;
            extensions.insert(SourceUse(held));
        }
        if let Some(c) = credentials {
            self.owners.check(bucket, &c.access_key).await?;
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl S3Access for Policy {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        // The operation's name for the request's metrics and access log line.
        let op = crate::operation::lookup(cx.s3_op().name());
        if let Some(slot) = cx.extensions_mut().get::<crate::access_log::OperationSlot>() {
            slot.set(op);
        }
        let signed = cx.credentials().is_some();
        let acl_op = self.acls && ACL_OPERATIONS.contains(&cx.s3_op().name());
        let mut requester = Requester::Owner;
        if !signed && !self.anonymous {
            if !(self.public_access && acl_op) {
                return Err(s3_error!(
                    AccessDenied,
                    "anonymous access is off on this server: sign the request (AWS SigV4)"
                ));
            }
            if cx.headers().contains_key(hipobj_proto::TOKEN_HEADER) {
                return Err(s3_error!(
                    AccessDenied,
                    "RDMA is never served to an unsigned request: sign it (AWS SigV4)"
                ));
            }
            requester = Requester::Anonymous;
        }
        if signed {
            check_signed(cx.headers(), cx.uri())?;
        }
        refuse_unimplemented(cx.headers(), self.acls)?;
        check_customer_key_transport(cx, self.sse_c_over_http)?;
        check_content_md5(cx.headers())?;
        if let S3Path::Object { key, .. } = cx.s3_path() {
            check_key(key)?;
        }
        // The bucket is held from before the checks below until the store
        // has answered (`super::bucket_use`).
        let who = cx.credentials().map(|c| c.access_key.clone());
        let bucket = match cx.s3_path() {
            S3Path::Bucket { bucket } | S3Path::Object { bucket, .. } => Some(bucket.clone()),
            S3Path::Root => None,
        };
        if let Some(bucket) = &bucket {
            let held = self.hold(bucket, cx.s3_op().name(), who.as_deref()).await?;
            cx.extensions_mut().insert(held);
        }
        self.check_expected_owner(cx).await?;
        if let Some(who) = who {
            let owned = match &bucket {
                Some(bucket) if cx.s3_op().name() == "CreateBucket" => self.owners.claim(bucket, &who).await,
                Some(bucket) => self.owners.check(bucket, &who).await,
                None => Ok(()),
            };
            match owned {
                Ok(()) => {}
                // Another key's bucket: what its ACLs grant, decided by the
                // store, and nothing more.
                Err(e) if acl_op && *e.code() == S3ErrorCode::AccessDenied => requester = Requester::Other,
                Err(e) => return Err(e),
            }
        }
        cx.extensions_mut().insert(requester);
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
        let dest = req.input.bucket.clone();
        self.check_copy_source(
            &req.input.copy_source,
            &dest,
            req.credentials.as_ref(),
            &mut req.extensions,
        )
        .await
    }

    async fn upload_part_copy(&self, req: &mut S3Request<dto::UploadPartCopyInput>) -> S3Result<()> {
        let dest = req.input.bucket.clone();
        self.check_copy_source(
            &req.input.copy_source,
            &dest,
            req.credentials.as_ref(),
            &mut req.extensions,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_dates_become_sigv4_dates() {
        let cases = [
            ("Tue, 01 Dec 2026 00:54:00 -0000", Some("20261201T005400Z")),
            ("Sun, 06 Nov 1994 08:49:37 GMT", Some("19941106T084937Z")),
            ("Tue, 01 Dec 2026 00:54:00 +0100", None),
            ("01 Dec 2026 00:54:00 GMT", None),
            ("Tue, 01 Foo 2026 00:54:00 GMT", None),
            ("Tue, 01 Dec 2026 24:00:00 GMT", None),
            ("Tue, 01 Dec 2026 00:54 GMT", None),
            ("Tue, 01 Dec 2026 00:54:00 GMT trailing", None),
            ("", None),
        ];
        for (date, want) in cases {
            assert_eq!(amz_date_of(date).as_deref(), want, "{date:?}");
        }
    }

    #[test]
    fn a_signed_date_header_dates_a_sigv4_request() {
        let auth = |signed: &str| {
            let mut h = http::HeaderMap::new();
            let v = format!(
                "AWS4-HMAC-SHA256 Credential=ak/20261201//s3/aws4_request, SignedHeaders={signed}, Signature=ab"
            );
            h.insert(
                http::header::AUTHORIZATION,
                http::HeaderValue::from_str(&v).unwrap_or(http::HeaderValue::from_static("x")),
            );
            h.insert(
                http::header::DATE,
                http::HeaderValue::from_static("Tue, 01 Dec 2026 00:54:00 -0000"),
            );
            h
        };
        let uri: http::Uri = "/b/k".parse().unwrap_or_default();
        let mut h = auth("date;host");
        date_for_sigv4(&mut h, &uri);
        assert_eq!(
            h.get("x-amz-date").map(|v| v.as_bytes()),
            Some(&b"20261201T005400Z"[..])
        );
        // Date outside the signature: left alone (s3s refuses the request).
        let mut h = auth("host");
        date_for_sigv4(&mut h, &uri);
        assert!(h.get("x-amz-date").is_none());
        // An x-amz-date of the request's own is never replaced.
        let mut h = auth("date;host");
        h.insert("x-amz-date", http::HeaderValue::from_static("20261201T010000Z"));
        date_for_sigv4(&mut h, &uri);
        assert_eq!(
            h.get("x-amz-date").map(|v| v.as_bytes()),
            Some(&b"20261201T010000Z"[..])
        );
    }

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
