//! The S3 operations a request can be (s3s 0.14's set), as `&'static str`s:
//! the `operation` label of the request metrics and the access log takes
//! its value from this list only, so it has a bounded set of values.

/// Every operation s3s routes to, sorted.
pub(crate) const S3: &[&str] = &[
    "AbortMultipartUpload",
    "CompleteMultipartUpload",
    "CopyObject",
    "CreateBucket",
    "CreateBucketMetadataTableConfiguration",
    "CreateMultipartUpload",
    "CreateSession",
    "DeleteBucket",
    "DeleteBucketAnalyticsConfiguration",
    "DeleteBucketCors",
    "DeleteBucketEncryption",
    "DeleteBucketIntelligentTieringConfiguration",
    "DeleteBucketInventoryConfiguration",
    "DeleteBucketLifecycle",
    "DeleteBucketMetadataTableConfiguration",
    "DeleteBucketMetricsConfiguration",
    "DeleteBucketOwnershipControls",
    "DeleteBucketPolicy",
    "DeleteBucketReplication",
    "DeleteBucketTagging",
    "DeleteBucketWebsite",
    "DeleteObject",
    "DeleteObjectTagging",
    "DeleteObjects",
    "DeletePublicAccessBlock",
    "GetBucketAccelerateConfiguration",
    "GetBucketAcl",
    "GetBucketAnalyticsConfiguration",
    "GetBucketCors",
    "GetBucketEncryption",
    "GetBucketIntelligentTieringConfiguration",
    "GetBucketInventoryConfiguration",
    "GetBucketLifecycleConfiguration",
    "GetBucketLocation",
    "GetBucketLogging",
    "GetBucketMetadataTableConfiguration",
    "GetBucketMetricsConfiguration",
    "GetBucketNotificationConfiguration",
    "GetBucketOwnershipControls",
    "GetBucketPolicy",
    "GetBucketPolicyStatus",
    "GetBucketReplication",
    "GetBucketRequestPayment",
    "GetBucketTagging",
    "GetBucketVersioning",
    "GetBucketWebsite",
    "GetObject",
    "GetObjectAcl",
    "GetObjectAttributes",
    "GetObjectLegalHold",
    "GetObjectLockConfiguration",
    "GetObjectRetention",
    "GetObjectTagging",
    "GetObjectTorrent",
    "GetPublicAccessBlock",
    "HeadBucket",
    "HeadObject",
    "ListBucketAnalyticsConfigurations",
    "ListBucketIntelligentTieringConfigurations",
    "ListBucketInventoryConfigurations",
    "ListBucketMetricsConfigurations",
    "ListBuckets",
    "ListDirectoryBuckets",
    "ListMultipartUploads",
    "ListObjectVersions",
    "ListObjects",
    "ListObjectsV2",
    "ListParts",
    "PostObject",
    "PutBucketAccelerateConfiguration",
    "PutBucketAcl",
    "PutBucketAnalyticsConfiguration",
    "PutBucketCors",
    "PutBucketEncryption",
    "PutBucketIntelligentTieringConfiguration",
    "PutBucketInventoryConfiguration",
    "PutBucketLifecycleConfiguration",
    "PutBucketLogging",
    "PutBucketMetricsConfiguration",
    "PutBucketNotificationConfiguration",
    "PutBucketOwnershipControls",
    "PutBucketPolicy",
    "PutBucketReplication",
    "PutBucketRequestPayment",
    "PutBucketTagging",
    "PutBucketVersioning",
    "PutBucketWebsite",
    "PutObject",
    "PutObjectAcl",
    "PutObjectLegalHold",
    "PutObjectLockConfiguration",
    "PutObjectRetention",
    "PutObjectTagging",
    "PutPublicAccessBlock",
    "RestoreObject",
    "SelectObjectContent",
    "UploadPart",
    "UploadPartCopy",
    "WriteGetObjectResponse",
];

/// What the label says for a request refused before its S3 operation was
/// known (a bad signature, an unparsable request).
pub(crate) const UNKNOWN: &str = "unknown";
/// `/.hipobj-rc/*`: hipobj-rc-v2 control requests.
pub(crate) const RC_V2: &str = "RdmaV2Control";
/// `/.hipobj/metrics`.
pub(crate) const METRICS: &str = "Metrics";
/// `/.hipobj/health`.
pub(crate) const HEALTH: &str = "Health";
/// `OPTIONS`: a CORS preflight.
pub(crate) const PREFLIGHT: &str = "Preflight";

/// `name` as one of [`S3`], or [`UNKNOWN`].
pub(crate) fn lookup(name: &str) -> &'static str {
    S3.binary_search(&name).map_or(UNKNOWN, |i| S3[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_found_and_others_are_unknown() {
        assert!(S3.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(lookup("GetObject"), "GetObject");
        assert_eq!(lookup("ListObjectsV2"), "ListObjectsV2");
        assert_eq!(lookup("my-bucket"), UNKNOWN);
    }
}
