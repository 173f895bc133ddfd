//! The life of multipart uploads in the filesystem store beyond one
//! upload's own operations: listing them (ListMultipartUploads), finding
//! the ones that keep a bucket from being deleted, and removing the ones
//! abandoned for longer than the configured age.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use s3s::dto;
use s3s::{S3Result, s3_error};

use super::{FsStore, Upload, encode_key, internal, now_ms, timestamp, wants_url};

/// Sweeps run at most this often (milliseconds), from CreateMultipartUpload.
const SWEEP_EVERY_MS: u64 = 60_000;

impl FsStore {
    /// Every upload in progress, with its directory, in no order.
    pub(super) async fn all_uploads(&self) -> S3Result<Vec<(String, PathBuf, Upload)>> {
        let mut out = Vec::new();
        let mut rd = tokio::fs::read_dir(self.root.join(".uploads"))
            .await
            .map_err(|e| internal("listing uploads", e))?;
        while let Some(ent) = rd
            .next_entry()
            .await
            .map_err(|e| internal("listing uploads", e))?
        {
            let Some(id) = ent.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let Ok(json) = tokio::fs::read(ent.path().join("upload.json")).await else {
                continue;
            };
            let Ok(up) = serde_json::from_slice::<Upload>(&json) else {
                continue;
            };
            out.push((id, ent.path(), up));
        }
        Ok(out)
    }

    /// Whether `bucket` has an upload in progress.
    pub(super) async fn has_uploads(&self, bucket: &str) -> S3Result<bool> {
        Ok(self
            .all_uploads()
            .await?
            .iter()
            .any(|(_, _, u)| u.bucket == bucket))
    }

    /// Aborts every upload of `bucket` (DeleteBucket).
    pub(super) async fn abort_uploads_of(&self, bucket: &str) -> S3Result<()> {
        for (_, dir, up) in self.all_uploads().await? {
            if up.bucket == bucket {
                tokio::fs::remove_dir_all(&dir)
                    .await
                    .map_err(|e| internal("aborting an upload of a deleted bucket", e))?;
            }
        }
        Ok(())
    }

    /// Whether the bucket directory `dir` holds anything.
    pub(super) async fn has_objects(&self, dir: &std::path::Path) -> S3Result<bool> {
        let mut rd = tokio::fs::read_dir(dir)
            .await
            .map_err(|e| internal("reading a bucket", e))?;
        Ok(rd
            .next_entry()
            .await
            .map_err(|e| internal("reading a bucket", e))?
            .is_some())
    }

    /// Removes uploads initiated longer ago than the configured age, with
    /// their parts. Runs at start and then at most once a minute.
    pub(super) async fn sweep_stale_uploads(&self) {
        let now = now_ms();
        let last = self.last_sweep_ms.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < SWEEP_EVERY_MS.min(self.limits.upload_expiry_ms.max(1)) {
            return;
        }
        self.last_sweep_ms.store(now, Ordering::Relaxed);
        let Ok(all) = self.all_uploads().await else { return };
        for (id, dir, up) in all {
            if now.saturating_sub(up.initiated_ms) > self.limits.upload_expiry_ms {
                match tokio::fs::remove_dir_all(&dir).await {
                    Ok(()) => tracing::info!(
                        upload = %id,
                        bucket = %up.bucket,
                        key = %up.key,
                        "removed a multipart upload abandoned for longer than the configured age"
                    ),
                    Err(e) => tracing::warn!("removing the stale upload {}: {e}", dir.display()),
                }
            }
        }
    }

    /// ListMultipartUploads: uploads of a bucket by key, then by start
    /// time, after the markers; a delimiter rolls keys up into prefixes.
    pub(super) async fn list_uploads(
        &self,
        input: dto::ListMultipartUploadsInput,
    ) -> S3Result<dto::ListMultipartUploadsOutput> {
        self.existing_bucket(&input.bucket).await?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let delimiter = input.delimiter.clone().filter(|d| !d.is_empty());
        let max = match input.max_uploads {
            None => 1000,
            Some(n) => usize::try_from(n)
                .map(|n| n.min(1000))
                .map_err(|_| s3_error!(InvalidArgument, "max-uploads must be 0 or more"))?,
        };
        let mut ups: Vec<_> = self
            .all_uploads()
            .await?
            .into_iter()
            .filter(|(_, _, u)| u.bucket == input.bucket && u.key.starts_with(&prefix))
            .collect();
        ups.sort_by(|a, b| (&a.2.key, a.2.initiated_ms, &a.0).cmp(&(&b.2.key, b.2.initiated_ms, &b.0)));
        let key_marker = input.key_marker.clone().filter(|m| !m.is_empty());
        let id_marker = input.upload_id_marker.clone().filter(|m| !m.is_empty());
        let url = wants_url(input.encoding_type.as_ref());
        let mut uploads = Vec::new();
        let mut prefixes: Vec<String> = Vec::new();
        let mut truncated = false;
        let mut next: Option<(String, String)> = None;
        let mut past_id_marker = id_marker.is_none();
        for (id, _, up) in ups {
            if let Some(km) = &key_marker {
                if up.key < *km {
                    continue;
                }
                if up.key == *km {
                    // With an upload-id marker, uploads of the marker key
                    // after that id; without one, none of the marker key.
                    if !past_id_marker {
                        past_id_marker = id_marker.as_deref() == Some(id.as_str());
                        continue;
                    }
                    if id_marker.is_none() {
                        continue;
                    }
                }
            }
            let common = delimiter.as_deref().and_then(|d| {
                up.key[prefix.len()..]
                    .find(d)
                    .map(|i| up.key[..prefix.len() + i + d.len()].to_owned())
            });
            if let Some(cp) = &common
                && (prefixes.last() == Some(cp) || key_marker.as_ref().is_some_and(|m| cp <= m))
            {
                continue;
            }
            if uploads.len() + prefixes.len() >= max {
                truncated = max > 0;
                break;
            }
            match common {
                Some(cp) => {
                    next = Some((cp.clone(), String::new()));
                    prefixes.push(cp);
                }
                None => {
                    next = Some((up.key.clone(), id.clone()));
                    let who = up.owner.clone().map(|o| dto::Owner {
                        display_name: Some(o.clone()),
                        id: Some(o),
                    });
                    uploads.push(dto::MultipartUpload {
                        key: Some(encode_key(&up.key, url)),
                        upload_id: Some(id),
                        initiated: Some(timestamp(up.initiated_ms)),
                        initiator: who.as_ref().map(|o| dto::Initiator {
                            display_name: o.display_name.clone(),
                            id: o.id.clone(),
                        }),
                        owner: who,
                        storage_class: Some(dto::StorageClass::from_static(dto::StorageClass::STANDARD)),
                        ..Default::default()
                    });
                }
            }
        }
        let (next_key, next_id) = if truncated { next.unzip() } else { (None, None) };
        Ok(dto::ListMultipartUploadsOutput {
            bucket: Some(input.bucket),
            prefix: Some(encode_key(&prefix, url)),
            delimiter: delimiter.map(|d| encode_key(&d, url)),
            key_marker: Some(key_marker.map(|k| encode_key(&k, url)).unwrap_or_default()),
            upload_id_marker: Some(id_marker.unwrap_or_default()),
            next_key_marker: next_key.map(|k| encode_key(&k, url)),
            next_upload_id_marker: next_id.filter(|i| !i.is_empty()),
            max_uploads: Some(i32::try_from(max).unwrap_or(1000)),
            is_truncated: Some(truncated),
            encoding_type: input.encoding_type,
            uploads: Some(uploads),
            common_prefixes: (!prefixes.is_empty()).then(|| {
                prefixes
                    .iter()
                    .map(|p| dto::CommonPrefix {
                        prefix: Some(encode_key(p, url)),
                    })
                    .collect()
            }),
            ..Default::default()
        })
    }
}
