//! S3 error bodies as S3 writes them: every error answered over the S3
//! port (s3s's, the store's, the access policy's, the front door's own)
//! leaves with `<Code>`, `<Message>`, `<Resource>` and `<RequestId>`, and
//! the same id in `x-amz-request-id`.
//!
//! s3s writes `<Message>` only where the error was given one, and never
//! `<Resource>`; clients print a missing message as "Unknown" (the AWS
//! CLI's `(NoSuchKey) ...: Unknown`). [`finish`] fills in a sentence for the
//! code where there is none, the request's path as the resource, and the
//! request id. A message the error carries is kept: the store's own
//! failures already say nothing of files or secrets (`hipobj_store`'s
//! `internal`).

use s3s::Body;

/// Gives `resp` the request's id `id` as `x-amz-request-id` (and
/// `x-amz-id-2`), and, where it is an S3 error held whole, the body S3
/// writes: its code, a message (the error's own, or one for its code),
/// `resource` (the request's path) and the request id. Other bodies (a
/// streamed one, the `hipobj-rc-v2` control path's text) keep theirs.
pub(crate) fn finish(resp: &mut http::Response<Body>, resource: &str, id: &str) {
    if let Ok(v) = http::HeaderValue::from_str(id) {
        resp.headers_mut().insert("x-amz-request-id", v.clone());
        resp.headers_mut().insert("x-amz-id-2", v);
    }
    if resp.status().as_u16() < 400 || resp.body().bytes().is_none() {
        return;
    }
    let Some(body) = resp.body_mut().take_bytes() else {
        return;
    };
    let new = match std::str::from_utf8(&body)
        .ok()
        .and_then(|t| rewrite(t, resource, id))
    {
        Some(new) => new,
        None => {
            *resp.body_mut() = Body::from(body);
            return;
        }
    };
    if let Ok(v) = http::HeaderValue::from_str(&new.len().to_string()) {
        resp.headers_mut().insert(http::header::CONTENT_LENGTH, v);
    }
    *resp.body_mut() = Body::from(new);
}

/// The S3 error body `text` with a message, `resource` and `id`; `None`
/// when `text` is not an S3 error body.
fn rewrite(text: &str, resource: &str, id: &str) -> Option<String> {
    let inner = text
        .trim_start()
        .strip_prefix("<?xml")
        .and_then(|t| t.split_once("?>"))
        .map_or(text, |(_, rest)| rest)
        .trim()
        .strip_prefix("<Error>")?
        .strip_suffix("</Error>")?;
    let code = element(inner, "Code").filter(|c| !c.is_empty())?;
    let message = match element(inner, "Message").map(str::trim) {
        Some(m) if !m.is_empty() => m.to_owned(),
        _ => xml_text(message_for(code)),
    };
    Some(format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message>\
         <Resource>{}</Resource><RequestId>{id}</RequestId></Error>",
        xml_text(resource)
    ))
}

/// The text of the first `<name>` element of `xml` (as written, escaped).
fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let start = xml.find(&open)? + open.len();
    let len = xml[start..].find(&close)?;
    Some(&xml[start..start + len])
}

/// `s` escaped for XML text.
pub(crate) fn xml_text(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A sentence for an S3 error code, for an error that came without one.
pub(crate) fn message_for(code: &str) -> &'static str {
    match code {
        "AccessDenied" => "Access denied: this request is not allowed for the key that signed it.",
        "AccessForbidden" => "Access to this resource is forbidden.",
        "BadDigest" => "The Content-MD5 or checksum sent with the request does not match the data received.",
        "BucketAlreadyExists" => "The bucket name is taken; choose another name.",
        "BucketAlreadyOwnedByYou" => "You already own a bucket with this name.",
        "BucketNotEmpty" => "The bucket is not empty: delete its objects before deleting the bucket.",
        "EntityTooLarge" => "The upload is larger than this server accepts.",
        "EntityTooSmall" => {
            "A part other than the last is smaller than the smallest part this server accepts."
        }
        "ExpiredToken" | "InvalidToken" => "The security token sent with the request is not valid.",
        "IllegalLocationConstraintException" => {
            "The bucket cannot be created in the region the request names."
        }
        "IncompleteBody" => "The request body is shorter than the request said it would be.",
        "InsufficientStorage" => {
            "The server has no room left to store this data; free some space and try again."
        }
        "InternalError" => "The server met an internal error; try again, and if it lasts tell its operator.",
        "InvalidAccessKeyId" => crate::keys::UNKNOWN_KEY,
        "InvalidArgument" => "An argument of the request is not valid.",
        "InvalidBucketName" => "The bucket name is not valid.",
        "InvalidBucketState" => "The bucket is not in a state that allows this request.",
        "InvalidDigest" => "The Content-MD5 sent with the request is not a valid MD5 digest.",
        "InvalidEncryptionAlgorithmError" => "The encryption algorithm the request names is not valid.",
        "InvalidObjectState" => "The object is not in a state that allows this request.",
        "InvalidPart" => "A part the request lists was not uploaded, or its ETag differs.",
        "InvalidPartOrder" => "The parts must be listed in ascending order of part number.",
        "InvalidPolicyDocument" => "The form's policy document is not valid.",
        "InvalidRange" => "The range the request asks for does not overlap the object.",
        "InvalidRequest" => "The request is not valid.",
        "InvalidStorageClass" => "The storage class the request names is not valid.",
        "KeyTooLongError" => "The object key is longer than 1024 bytes.",
        "MalformedACLError" => "The ACL sent with the request is not well formed.",
        "MalformedPOSTRequest" => "The body of the POST request is not well-formed multipart/form-data.",
        "MalformedXML" => "The XML sent with the request is not well formed or does not match the schema.",
        "MaxMessageLengthExceeded" => "The request is too long.",
        "MetadataTooLarge" => "The object's metadata headers are larger than S3 allows.",
        "MethodNotAllowed" => "This method is not allowed on this resource.",
        "MissingContentLength" => "The request needs a Content-Length header.",
        "MissingSecurityHeader" => "The request is missing a header it needs.",
        "NoSuchBucket" => "The bucket the request names does not exist.",
        "NoSuchKey" => "The object key the request names does not exist.",
        "NoSuchUpload" => {
            "No multipart upload with this id is in progress: it was completed, aborted, or never begun."
        }
        "NoSuchVersion" => "The version the request names does not exist.",
        "NotImplemented" => "This server does not implement a feature the request uses.",
        "OperationAborted" => "Another operation on this resource is in progress; try again.",
        "PreconditionFailed" => "A condition the request set (If-Match and the like) does not hold.",
        "RequestTimeTooSkewed" => "The request's time is too far from the server's clock.",
        "RequestTimeout" => "The request body did not arrive in time.",
        "ServiceUnavailable" => "The service cannot serve the request now; try again later.",
        "SignatureDoesNotMatch" => {
            "The signature sent does not match the one the server computed for this request; check the secret key and the signing method."
        }
        "SlowDown" => "The server is busy; slow down and try again.",
        "TooManyBuckets" => "The account has as many buckets as it may have.",
        "XAmzContentSHA256Mismatch" => "The x-amz-content-sha256 header does not match the body received.",
        c if c.starts_with("NoSuch") || c.ends_with("NotFoundError") => {
            "The bucket has no such configuration."
        }
        _ => "The server could not serve the request as sent.",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_gets_a_message_a_resource_and_an_id() {
        let s3s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchKey</Code></Error>";
        let got = rewrite(s3s, "/b/a&b", "ID").unwrap_or_default();
        assert!(got.contains("<Code>NoSuchKey</Code>"), "{got}");
        assert!(
            got.contains(&format!("<Message>{}</Message>", message_for("NoSuchKey"))),
            "{got}"
        );
        assert!(got.contains("<Resource>/b/a&amp;b</Resource>"), "{got}");
        assert!(got.contains("<RequestId>ID</RequestId>"), "{got}");
    }

    #[test]
    fn an_errors_own_message_is_kept_and_its_old_id_replaced() {
        let s3s = "<Error><Code>InvalidArgument</Code><Message>a &lt; b</Message><RequestId>OLD</RequestId></Error>";
        let got = rewrite(s3s, "/b", "NEW").unwrap_or_default();
        assert!(got.contains("<Message>a &lt; b</Message>"), "{got}");
        assert!(
            got.contains("<RequestId>NEW</RequestId>") && !got.contains("OLD"),
            "{got}"
        );
    }

    #[test]
    fn what_is_not_an_s3_error_is_left_alone() {
        assert_eq!(rewrite("no session\n", "/", "X"), None);
        assert_eq!(rewrite("<Error><Message>m</Message></Error>", "/", "X"), None);
    }

    #[test]
    fn every_code_has_a_sentence() {
        for code in ["NoSuchKey", "SomethingNew", "NoSuchCORSConfiguration"] {
            let m = message_for(code);
            assert!(m.ends_with('.') && m.len() > 20 && m != "Unknown", "{code}: {m}");
        }
    }
}
