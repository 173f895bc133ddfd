//! Where objects live. Every back end is an [`s3s::S3`] implementation, so
//! the RDMA layer (`crate::rdma`) and the HTTP front (`crate::s3`) work the
//! same over each:
//!
//! * [`fs::FsStore`]: the embedded default, files under a data directory;
//! * [`remote`]: forwards every request to another S3 service (MinIO, Ceph,
//!   AWS, moto) through aws-sdk-s3.
//!
//! [`operations`] is the list of the S3 operations served, which every
//! wrapper of a store expands from. [`file_range`] is how a store hands a
//! GET's bytes to the RDMA mover as a range of a file.

pub mod file_range;
pub mod fs;
pub mod names;
pub mod operations;
pub mod remote;

use std::sync::Arc;

/// Who a request comes from, as the access policy (`crate::s3::access`)
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

use crate::config::{Config, StorageConfig};

/// Opens the back end the configuration names.
pub fn open(config: &Config) -> Result<Arc<dyn s3s::S3>, crate::Error> {
    Ok(match &config.storage {
        StorageConfig::Fs { data_dir } => {
            let limits = fs::FsLimits {
                max_object_size: config.limits.max_object_size,
                min_part_size: config.limits.min_part_size,
                sync: config.limits.fsync,
                upload_expiry_ms: config.limits.multipart_expiry_secs.saturating_mul(1000),
                refuse_delete_with_uploads: config.limits.refuse_delete_with_uploads,
                region: config.region.clone(),
                sse_s3_key_file: config.encryption.sse_s3_key_file.clone(),
                // Every key's account: its configured one, or one named by
                // the key itself.
                accounts: config
                    .credentials
                    .iter()
                    .map(|c| (c.access_key.clone(), (c.access_key.clone(), c.access_key.clone())))
                    .chain(config.accounts.iter().map(|a| {
                        let name = a.display_name.clone().unwrap_or_else(|| a.user_id.clone());
                        (a.access_key.clone(), (a.user_id.clone(), name))
                    }))
                    .collect(),
            };
            let store = fs::FsStore::open(data_dir, limits)
                .map_err(|e| crate::Error::Storage(format!("{}: {e}", data_dir.display())))?;
            Arc::new(store)
        }
        StorageConfig::S3(remote) => Arc::new(remote::open(remote)),
    })
}
