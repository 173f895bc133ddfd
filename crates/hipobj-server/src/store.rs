//! Opens the store the configuration names (crate `hipobj-store`).

use std::sync::Arc;

use hipobj_store::{fs, remote};

use crate::config::{Config, StorageConfig};

/// Opens the back end the configuration names.
pub(crate) fn open(config: &Config) -> Result<Arc<dyn s3s::S3>, crate::Error> {
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
                owner_records: config.access.bucket_owners,
            };
            let store = fs::FsStore::open(data_dir, limits)
                .map_err(|e| crate::Error::Storage(format!("{}: {e}", data_dir.display())))?;
            Arc::new(store)
        }
        StorageConfig::S3(remote) => Arc::new(remote::open(remote)),
    })
}
