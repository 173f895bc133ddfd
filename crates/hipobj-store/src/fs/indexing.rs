//! Keeping the listings' index (`index`) in step with the bucket folders:
//! a key's entry after every change to its files, and a bucket's keys read
//! from its folder when the index first meets it.

use std::path::Path;

use s3s::S3Result;

use super::errors::internal;
use super::index::{Item, Walk};
use super::layout::Disk;
use super::layout::FOLDER;
use super::store::FsStore;

impl FsStore {
    /// Brings `key`'s entry in the index up to date with its files: after
    /// every change to them, failed or not.
    pub(super) async fn reindex(&self, bucket: &str, key: &str) {
        let Ok(dir) = self.disk.bucket_dir(bucket) else {
            return;
        };
        let name = Disk::file_name(key);
        let file = dir.join(&name);
        let folder = dir.join(format!("{FOLDER}{name}"));
        self.index
            .sync(bucket, key, || async {
                // A look that fails keeps the key: one too many is harmless.
                tokio::fs::try_exists(&file).await.unwrap_or(true)
                    || tokio::fs::try_exists(&folder).await.unwrap_or(true)
            })
            .await;
    }

    /// Up to `want` more items of `walk` in the bucket folder `dir`.
    pub(super) async fn index_page(
        &self,
        bucket: &str,
        dir: &Path,
        walk: &mut Walk,
        want: usize,
    ) -> S3Result<Vec<Item>> {
        self.index
            .page(bucket, || Self::folder_keys(dir), walk, want)
            .await
    }

    /// Every key of the bucket folder `dir` with an object file or
    /// versions: what the index of a bucket starts from.
    async fn folder_keys(dir: &Path) -> S3Result<Vec<String>> {
        let mut keys = Vec::new();
        let mut rd = tokio::fs::read_dir(dir)
            .await
            .map_err(|e| internal("indexing a bucket", e))?;
        while let Some(ent) = rd
            .next_entry()
            .await
            .map_err(|e| internal("indexing a bucket", e))?
        {
            let name = ent.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some((key, _)) = Self::key_of_name(dir, name).await? {
                keys.push(key);
            }
        }
        keys.sort_unstable();
        keys.dedup();
        Ok(keys)
    }
}
