//! The S3 operations this server serves: the one list that every wrapper
//! of a store (the gateway's RDMA layer, [`crate::remote::Remote`]) expands from, so
//! that an operation is named once. A method of [`s3s::S3`] that is not
//! here is answered `501 NotImplemented` by every store, since the front
//! passes nothing else down.
//!
//! [`s3_operations!`] calls the macro it is given with two groups:
//! `metadata`, the operations whose request and answer are small, and
//! `bytes`, the three whose body is an object's or a part's bytes and which
//! may therefore carry an RDMA token (docs/protocol.md §4). A wrapper that
//! treats the second group apart names its three operations in its own
//! pattern, so a change to that group fails to compile there.

/// Calls `$then! { metadata { name: Input => Output, ... } bytes { ... } }`
/// with the operations the server serves (`Input` and `Output` name types
/// of `s3s::dto`).
#[macro_export]
macro_rules! s3_operations {
    ($then:ident) => {
        $then! {
            metadata {
                create_bucket: CreateBucketInput => CreateBucketOutput,
                delete_bucket: DeleteBucketInput => DeleteBucketOutput,
                head_bucket: HeadBucketInput => HeadBucketOutput,
                list_buckets: ListBucketsInput => ListBucketsOutput,
                get_bucket_location: GetBucketLocationInput => GetBucketLocationOutput,
                put_bucket_encryption: PutBucketEncryptionInput => PutBucketEncryptionOutput,
                get_bucket_encryption: GetBucketEncryptionInput => GetBucketEncryptionOutput,
                delete_bucket_encryption: DeleteBucketEncryptionInput => DeleteBucketEncryptionOutput,
                get_bucket_acl: GetBucketAclInput => GetBucketAclOutput,
                put_bucket_acl: PutBucketAclInput => PutBucketAclOutput,
                get_object_acl: GetObjectAclInput => GetObjectAclOutput,
                put_object_acl: PutObjectAclInput => PutObjectAclOutput,
                head_object: HeadObjectInput => HeadObjectOutput,
                get_object_attributes: GetObjectAttributesInput => GetObjectAttributesOutput,
                delete_object: DeleteObjectInput => DeleteObjectOutput,
                delete_objects: DeleteObjectsInput => DeleteObjectsOutput,
                list_objects: ListObjectsInput => ListObjectsOutput,
                list_objects_v2: ListObjectsV2Input => ListObjectsV2Output,
                list_object_versions: ListObjectVersionsInput => ListObjectVersionsOutput,
                copy_object: CopyObjectInput => CopyObjectOutput,
                create_multipart_upload: CreateMultipartUploadInput => CreateMultipartUploadOutput,
                upload_part_copy: UploadPartCopyInput => UploadPartCopyOutput,
                list_parts: ListPartsInput => ListPartsOutput,
                complete_multipart_upload: CompleteMultipartUploadInput => CompleteMultipartUploadOutput,
                abort_multipart_upload: AbortMultipartUploadInput => AbortMultipartUploadOutput,
                list_multipart_uploads: ListMultipartUploadsInput => ListMultipartUploadsOutput,
                put_bucket_versioning: PutBucketVersioningInput => PutBucketVersioningOutput,
                get_bucket_versioning: GetBucketVersioningInput => GetBucketVersioningOutput,
                put_public_access_block: PutPublicAccessBlockInput => PutPublicAccessBlockOutput,
                get_public_access_block: GetPublicAccessBlockInput => GetPublicAccessBlockOutput,
                delete_public_access_block: DeletePublicAccessBlockInput => DeletePublicAccessBlockOutput,
            }
            bytes {
                get_object: GetObjectInput => GetObjectOutput,
                put_object: PutObjectInput => PutObjectOutput,
                upload_part: UploadPartInput => UploadPartOutput,
            }
        }
    };
}

macro_rules! names {
    (
        metadata { $($m:ident: $mi:ident => $mo:ident,)* }
        bytes { $($b:ident: $bi:ident => $bo:ident,)* }
    ) => {
        /// The operations the server serves, as the `s3s::S3` methods are
        /// named (`get_object`, `list_objects_v2`, ...).
        pub const OPERATIONS: &[&str] = &[$(stringify!($m),)* $(stringify!($b),)*];
    };
}
s3_operations!(names);

#[cfg(test)]
mod tests {
    #[test]
    fn each_operation_is_named_once() {
        let mut seen = std::collections::BTreeSet::new();
        for op in super::OPERATIONS {
            assert!(seen.insert(op), "{op} is in the list twice");
        }
        assert!(seen.contains(&"get_object_attributes"));
    }
}
