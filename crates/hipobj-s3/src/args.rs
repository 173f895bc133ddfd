//! What a GetObject or PutObject names besides its bucket and key: the
//! version to read, and the object's server-side encryption. Set once on a
//! client ([`RdmaS3Client::object_args`](crate::RdmaS3Client::object_args)),
//! they go with every request that client sends, by RDMA or plain HTTP.

use aws_sdk_s3::operation::get_object::builders::GetObjectFluentBuilder;
use aws_sdk_s3::operation::put_object::builders::PutObjectFluentBuilder;
use aws_sdk_s3::operation::upload_part::builders::UploadPartFluentBuilder;
use aws_sdk_s3::types::ServerSideEncryption;

/// A client's SSE-C key (32 bytes), sent with each request and never
/// stored by the server.
#[derive(Clone, PartialEq, Eq)]
pub struct CustomerKey([u8; 32]);

impl std::fmt::Debug for CustomerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CustomerKey(..)")
    }
}

impl CustomerKey {
    /// The key.
    pub fn new(key: [u8; 32]) -> Self {
        Self(key)
    }

    fn headers(&self) -> (String, String, String) {
        use md5::Digest as _;
        let b64 = base64_simd::STANDARD;
        let md5 = md5::Md5::digest(self.0);
        (
            "AES256".to_owned(),
            b64.encode_to_string(self.0),
            b64.encode_to_string(md5),
        )
    }
}

/// How the object is encrypted at rest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Encryption {
    /// As the bucket says (no header).
    #[default]
    Default,
    /// SSE-S3: under the server's key (PUT only; a GET needs nothing).
    S3,
    /// SSE-C: under this key, which every GET of the object must name too.
    Customer(CustomerKey),
}

/// The version and encryption of the object a transfer reads or writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectArgs {
    /// GET: the version to read (`None`: the latest). PUT ignores it.
    pub version_id: Option<String>,
    /// The object's encryption.
    pub encryption: Encryption,
}

impl ObjectArgs {
    /// Whether these name nothing beyond the bucket and key (what
    /// hipobj-rc-v2, which has no field for them, can carry).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    fn customer(&self) -> Option<(String, String, String)> {
        match &self.encryption {
            Encryption::Customer(k) => Some(k.headers()),
            _ => None,
        }
    }

    pub(crate) fn get(&self, b: GetObjectFluentBuilder) -> GetObjectFluentBuilder {
        let c = self.customer();
        b.set_version_id(self.version_id.clone())
            .set_sse_customer_algorithm(c.as_ref().map(|c| c.0.clone()))
            .set_sse_customer_key(c.as_ref().map(|c| c.1.clone()))
            .set_sse_customer_key_md5(c.map(|c| c.2))
    }

    pub(crate) fn put(&self, b: PutObjectFluentBuilder) -> PutObjectFluentBuilder {
        let c = self.customer();
        let s3 = (self.encryption == Encryption::S3).then_some(ServerSideEncryption::Aes256);
        b.set_server_side_encryption(s3)
            .set_sse_customer_algorithm(c.as_ref().map(|c| c.0.clone()))
            .set_sse_customer_key(c.as_ref().map(|c| c.1.clone()))
            .set_sse_customer_key_md5(c.map(|c| c.2))
    }

    /// UploadPart names the upload's SSE-C key (SSE-S3 was said when the
    /// upload was created).
    pub(crate) fn part(&self, b: UploadPartFluentBuilder) -> UploadPartFluentBuilder {
        let c = self.customer();
        b.set_sse_customer_algorithm(c.as_ref().map(|c| c.0.clone()))
            .set_sse_customer_key(c.as_ref().map(|c| c.1.clone()))
            .set_sse_customer_key_md5(c.map(|c| c.2))
    }
}
