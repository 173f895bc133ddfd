//! The HTTP face of the server: s3s parses and signs-checks requests,
//! [`access::Policy`] decides who may do what, and `crate::front::service::Front` adds
//! the server's own endpoints (`/.hipobj/...`) in front of the S3 service.

pub(crate) mod access;
pub(crate) mod bucket_use;
pub(crate) mod errors;
pub(crate) mod owners;
