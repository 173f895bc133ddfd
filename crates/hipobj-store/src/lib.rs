//! `hipobj-store`: where hipobj-server's objects live. Every back end is an
//! [`s3s::S3`] implementation, so the gateway's RDMA layer and HTTP front
//! work the same over each, and nothing here knows of RDMA:
//!
//! * [`fs::FsStore`]: the embedded default, files under a data directory;
//! * [`remote`]: forwards every request to another S3 service (MinIO, Ceph,
//!   AWS, moto) through aws-sdk-s3.
//!
//! [`operations`] is the list of the S3 operations served, which every
//! wrapper of a store expands from. [`file_range`] is how a store hands a
//! GET's bytes to the RDMA mover as a range of a file. [`md5`] is the
//! ETag's MD5.

pub mod blocks;
pub mod damage;
pub mod disk;
pub mod file_range;
pub mod fs;
pub mod md5;
pub mod names;
pub mod operations;
pub mod owner_record;
#[cfg(feature = "s3-backend")]
pub mod remote;

/// Who a request comes from, as the gateway's access policy
/// found it, in the request's extensions: a store that serves ACLs lets a
/// requester other than the bucket's owner do what the ACLs grant, and
/// nothing else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requester {
    /// The bucket's owner (or a key it is shared with, or any request when
    /// anonymous access is on).
    Owner,
    /// Another signed key.
    Other,
    /// An unsigned request, with public access on.
    Anonymous,
}
