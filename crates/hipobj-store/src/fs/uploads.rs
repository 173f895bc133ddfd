//! Multipart uploads in the filesystem store: the record of an upload and
//! its parts, the checks a part and a CompleteMultipartUpload make, the
//! concatenation of the chosen parts and Complete's answer; listing
//! uploads (ListMultipartUploads) and their parts (ListParts), finding the
//! ones that keep a bucket from being deleted, and removing the ones
//! abandoned for longer than the configured age.

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::md5::Md5;
use s3s::dto::{self, ETag, Timestamp};
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};
use serde::{Deserialize, Serialize};

use super::canned::Canned;
use super::checksums::Sums;
use super::checksums::checksum_type;
use super::errors::{internal, io_kind};
use super::index::{UploadEntry, successor};
use super::layout::{Disk, Stored, TempFile, part_file};
use super::listing::{common_prefixes, encode_key, wants_url};
use super::object::{Attrs, Meta};
use super::sse::{Encryption, UploadMode};
use super::store::FsStore;
use super::text::{etag_of, hex, i64_of, now_ms, strip_quotes, timestamp, unhex};
use super::upload_sums::UploadChecksum;
use super::write::CopyErrors;
use crate::disk::nonblocking as ndisk;

/// Sweeps run at most this often (milliseconds), from CreateMultipartUpload.
const SWEEP_EVERY_MS: u64 = 60_000;

/// A multipart upload in progress.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Upload {
    pub(super) bucket: String,
    pub(super) key: String,
    pub(super) owner: Option<String>,
    pub(super) attrs: Attrs,
    pub(super) initiated_ms: u64,
    /// How the parts are encrypted (`None`: they are not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) encryption: Option<UploadMode>,
    /// The object's canned ACL (`None`: private).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) acl: Option<Canned>,
    /// The checksum algorithm and type CreateMultipartUpload chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) checksum: Option<UploadChecksum>,
}

/// Reads an upload's `upload.json` from memory as the store reads it from
/// disk: what is wrong, or the upload's bucket and key. A decoded upload
/// written out again decodes to the same bucket, key and owner. For the
/// fuzz target `store_files`, which feeds it what a damaged disk might hold.
pub fn parse_upload_file(bytes: &[u8]) -> Result<(String, String), String> {
    let up: Upload = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let again = serde_json::to_vec(&up).map_err(|e| e.to_string())?;
    let back: Upload =
        serde_json::from_slice(&again).map_err(|e| format!("written out, it reads back wrong: {e}"))?;
    if (&back.bucket, &back.key, &back.owner) != (&up.bucket, &up.key, &up.owner) {
        return Err("written out, it reads back as another upload".into());
    }
    Ok((up.bucket, up.key))
}

/// UploadPart's and UploadPartCopy's part number: 1 to 10000.
pub(super) fn check_part_number(n: i32) -> S3Result<()> {
    if !(1..=10_000).contains(&n) {
        return Err(s3_error!(InvalidArgument, "part numbers run from 1 to 10000"));
    }
    Ok(())
}

/// UploadPartCopy's `x-amz-copy-source-range`: exactly `bytes=FIRST-LAST`
/// (both given, FIRST <= LAST; `400 InvalidArgument` otherwise), inside an
/// object of `size` bytes (`416 InvalidRange` otherwise). Returns the start
/// and the length.
pub(super) fn copy_source_range(v: &str, size: u64) -> S3Result<(u64, u64)> {
    let bad = || {
        S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            "x-amz-copy-source-range must be bytes=FIRST-LAST",
        )
    };
    let (a, b) = v
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .ok_or_else(bad)?;
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit());
    if !digits(a) || !digits(b) {
        return Err(bad());
    }
    let (first, last): (u64, u64) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
    if first > last {
        return Err(bad());
    }
    if last >= size {
        return Err(S3Error::with_message(
            S3ErrorCode::InvalidRange,
            format!("the range ends past the source object's {size} bytes"),
        ));
    }
    Ok((first, last - first + 1))
}

/// The parts CompleteMultipartUpload makes an object of, each with its
/// number and record.
pub(super) type Chosen = Vec<(i32, Meta)>;

/// The object's checksums of the `chosen` parts, and each part's value, if
/// the upload chose an algorithm (`upload_sums`); CompleteMultipartUpload
/// `listed` the parts and `claimed` the object's checksum.
pub(super) fn object_sums(
    up: &Upload,
    chosen: &Chosen,
    listed: &[dto::CompletedPart],
    claimed: &Sums,
) -> S3Result<(Sums, Vec<String>)> {
    let Some(c) = up.checksum else {
        return Ok((Sums::default(), Vec::new()));
    };
    let parts: Vec<(i32, u64, &Sums)> = chosen.iter().map(|(n, m)| (*n, m.size, &m.sums)).collect();
    c.complete(&parts, listed, claimed)
}

/// CompleteMultipartUpload's answer for the object `bucket`/`key` it made,
/// described by `meta` (its ETag and checksums).
pub(super) fn completed(bucket: &str, key: &str, meta: Meta) -> dto::CompleteMultipartUploadOutput {
    dto::CompleteMultipartUploadOutput {
        bucket: Some(bucket.to_owned()),
        key: Some(key.to_owned()),
        location: Some(format!("/{bucket}/{key}")),
        e_tag: Some(ETag::Strong(meta.etag)),
        checksum_type: checksum_type(&meta.sums),
        checksum_crc32: meta.sums.crc32,
        checksum_crc32c: meta.sums.crc32c,
        checksum_sha1: meta.sums.sha1,
        checksum_sha256: meta.sums.sha256,
        checksum_crc64nvme: meta.sums.crc64nvme,
        ..Default::default()
    }
}

impl FsStore {
    /// Makes upload `id`'s folder with its record, whole: made in `.tmp`
    /// (which the next start empties), the record written and synced, then
    /// renamed into `.uploads`, so that a crash leaves the upload there with
    /// its record or not at all.
    pub(super) async fn create_upload(&self, id: &str, up: &Upload) -> S3Result<()> {
        let dir = self.disk.upload_dir(id)?;
        let json = serde_json::to_vec(up).map_err(|e| internal("encoding an upload", e))?;
        let staging = self.disk.temp_path();
        let d = self.durability();
        let made = async {
            ndisk::create_dir(&staging, d).await?;
            ndisk::write_atomic(&self.disk.temp_path(), &staging.join("upload.json"), json, d).await?;
            ndisk::rename(&staging, &dir, d).await
        };
        if let Err(e) = made.await {
            let _ = tokio::fs::remove_dir_all(&staging).await;
            return Err(internal("creating an upload", e));
        }
        self.index
            .upload_added(upload_entry(id, up), up.owner.clone())
            .await;
        Ok(())
    }

    /// Removes an upload (its folder `dir`, its `entry` in the listings'
    /// index) with its parts: the folder first, then the entry, so that an
    /// upload whose folder could not be removed stays listed.
    pub(super) async fn remove_upload(&self, dir: &Path, entry: UploadEntry) -> std::io::Result<()> {
        ndisk::remove_dir_all(dir, self.durability()).await?;
        self.index.upload_removed(&entry).await;
        Ok(())
    }

    pub(super) async fn load_upload(
        &self,
        upload_id: &str,
        bucket: &str,
        key: &str,
        owner: Option<&str>,
    ) -> S3Result<(PathBuf, Upload)> {
        let dir = self.disk.upload_dir(upload_id)?;
        let json = match tokio::fs::read(dir.join("upload.json")).await {
            Ok(j) => j,
            Err(e) if io_kind(&e) == std::io::ErrorKind::NotFound => return Err(s3_error!(NoSuchUpload)),
            Err(e) => return Err(internal("reading an upload", e)),
        };
        let up: Upload = serde_json::from_slice(&json).map_err(|e| internal("decoding an upload", e))?;
        if up.bucket != bucket || up.key != key {
            return Err(s3_error!(NoSuchUpload, "the upload belongs to another object"));
        }
        if up.owner.as_deref() != owner {
            return Err(s3_error!(AccessDenied, "the upload belongs to another user"));
        }
        Ok((dir, up))
    }

    /// The numbers of the parts in the upload folder `dir`, in order, from
    /// the names alone (ListParts reads only its page's files).
    pub(super) async fn part_numbers(dir: &Path) -> S3Result<Vec<i32>> {
        let mut numbers = Vec::new();
        let mut rd = tokio::fs::read_dir(dir)
            .await
            .map_err(|e| internal("listing parts", e))?;
        while let Some(ent) = rd.next_entry().await.map_err(|e| internal("listing parts", e))? {
            let name = ent.file_name();
            if let Some(Ok(n)) = name
                .to_str()
                .and_then(|n| n.strip_prefix("part-"))
                .map(str::parse::<i32>)
            {
                numbers.push(n);
            }
        }
        numbers.sort_unstable();
        Ok(numbers)
    }

    pub(super) async fn list_parts_in(dir: &Path) -> S3Result<Vec<(i32, Meta, SystemTime)>> {
        let mut parts = Vec::new();
        let mut rd = tokio::fs::read_dir(dir)
            .await
            .map_err(|e| internal("listing parts", e))?;
        while let Some(ent) = rd.next_entry().await.map_err(|e| internal("listing parts", e))? {
            let name = ent.file_name();
            let Some(n) = name.to_str().and_then(|n| n.strip_prefix("part-")) else {
                continue;
            };
            let Ok(n) = n.parse::<i32>() else { continue };
            if let Some(mut st) = Disk::read_listed(&ent.path()).await {
                let modified = st
                    .file
                    .metadata()
                    .await
                    .and_then(|m| m.modified())
                    .unwrap_or(UNIX_EPOCH);
                st.meta.key.clear();
                parts.push((n, st.meta, modified));
            }
        }
        parts.sort_by_key(|p| p.0);
        Ok(parts)
    }

    /// Makes `meta`'s file the part `n` of the upload in `dir`. The upload
    /// may have been completed or aborted meanwhile: the rename then fails
    /// and nothing is left behind.
    pub(super) async fn store_part(&self, tmp: TempFile, meta: &Meta, dir: &Path, n: i32) -> S3Result<()> {
        self.disk
            .finish(tmp, meta, &part_file(dir, n))
            .await
            .map_err(|_| s3_error!(NoSuchUpload))
    }

    /// The record of the object at `dest` if CompleteMultipartUpload made
    /// it from `upload_id`: a retry whose first answer was lost finds the
    /// upload gone because it made the object that is there now.
    pub(super) async fn completed_by(dest: &Path, upload_id: &str) -> S3Result<Option<Meta>> {
        Ok(Disk::read_stored(dest)
            .await?
            .filter(|st| st.meta.upload_id.as_deref() == Some(upload_id))
            .map(|st| st.meta))
    }

    /// CompleteMultipartUpload's checks of the parts it lists against the
    /// parts uploaded to `dir`: numbered, in ascending order, uploaded,
    /// with the ETag given, and every part but the last at least the
    /// minimum part size.
    pub(super) async fn chosen_parts(&self, dir: &Path, wanted: &[dto::CompletedPart]) -> S3Result<Chosen> {
        let stored = Self::list_parts_in(dir).await?;
        let mut prev = 0;
        let mut chosen = Vec::with_capacity(wanted.len());
        for (i, w) in wanted.iter().enumerate() {
            let n = w
                .part_number
                .ok_or_else(|| s3_error!(InvalidPart, "a part has no number"))?;
            if n <= prev {
                return Err(s3_error!(InvalidPartOrder));
            }
            prev = n;
            let Some((_, meta, _)) = stored.iter().find(|p| p.0 == n) else {
                return Err(S3Error::with_message(
                    S3ErrorCode::InvalidPart,
                    format!("part {n} was not uploaded"),
                ));
            };
            if let Some(e) = &w.e_tag
                && strip_quotes(etag_of(e)) != meta.etag
            {
                return Err(S3Error::with_message(
                    S3ErrorCode::InvalidPart,
                    format!("part {n}: the ETag does not match"),
                ));
            }
            if i + 1 < wanted.len() && meta.size < self.limits.min_part_size {
                return Err(S3Error::with_message(
                    S3ErrorCode::EntityTooSmall,
                    format!(
                        "part {n} is {} bytes; every part but the last needs {}",
                        meta.size, self.limits.min_part_size
                    ),
                ));
            }
            chosen.push((n, meta.clone()));
        }
        Ok(chosen)
    }

    /// Concatenates the chosen parts of the upload in `dir` into a
    /// temporary file, and the record of the object they make (its ETag:
    /// the MD5 of the parts' MD5s, a dash, the number of parts). Encrypted
    /// parts are copied as they are stored: each stays a segment under its
    /// own data key (`sse`), so no key is needed here.
    pub(super) async fn assemble(
        &self,
        dir: &Path,
        chosen: &Chosen,
        up: Upload,
        (upload_id, sums, part_sums): (&str, Sums, Vec<String>),
    ) -> S3Result<(TempFile, Meta)> {
        let total: u64 = chosen.iter().map(|(_, m)| m.size).sum();
        if total > self.limits.max_object_size.saturating_mul(10_000) {
            return Err(s3_error!(EntityTooLarge));
        }
        let mut tmp = self.disk.temp().await?;
        let mut etag_md5 = Md5::new();
        let errors = CopyErrors {
            reading: "reading a part",
            writing: "writing an object",
        };
        let mut segments = Vec::new();
        for (n, meta) in chosen {
            let Some(st) = Disk::read_stored(&part_file(dir, *n)).await? else {
                return Err(S3Error::with_message(
                    S3ErrorCode::InvalidPart,
                    format!("part {n} vanished"),
                ));
            };
            if st.meta.etag != meta.etag {
                return Err(S3Error::with_message(
                    S3ErrorCode::InvalidPart,
                    format!("part {n} was uploaded again during the completion"),
                ));
            }
            match (&st.meta.encryption, &up.encryption) {
                (None, None) => {}
                (Some(e), Some(u)) if e.mode == u.mode && e.key_md5 == u.key_md5 => {
                    segments.extend(e.segments.iter().cloned());
                }
                _ => {
                    return Err(internal(
                        "completing an upload",
                        format!("part {n} is not encrypted as its upload"),
                    ));
                }
            }
            let md5 = unhex(&meta.etag).ok_or_else(|| internal("a part's ETag", "not hex"))?;
            etag_md5.update(&md5);
            let len = st.meta.stored_len();
            let checker = Stored::checker(&st.meta)?;
            if tmp
                .append_from((st.file, checker), 0, len, &errors, |_| {})
                .await?
                != len
            {
                return Err(internal(
                    "completing an upload",
                    format!("part {n} is shorter than its record"),
                ));
            }
        }
        let encryption = up.encryption.map(|u| Encryption {
            mode: u.mode,
            key_md5: u.key_md5,
            segments,
        });
        let meta = Meta {
            key: up.key,
            size: total,
            etag: format!("{}-{}", hex(&etag_md5.finalize()), chosen.len()),
            modified_ms: now_ms(),
            attrs: up.attrs,
            sums,
            parts: chosen.iter().map(|(_, m)| m.size).collect(),
            part_sums,
            upload_id: Some(upload_id.to_owned()),
            encryption,
            acl: up.acl,
            ..Default::default()
        };
        Ok((tmp, meta))
    }

    /// ListParts: the parts of the upload `input` names (started by the
    /// key `owner`), a page at a time after the marker.
    pub(super) async fn parts_page(
        &self,
        input: dto::ListPartsInput,
        owner: Option<&str>,
    ) -> S3Result<dto::ListPartsOutput> {
        let (dir, up) = self
            .load_upload(&input.upload_id, &input.bucket, &input.key, owner)
            .await?;
        let marker = input.part_number_marker.unwrap_or(0);
        let max = input
            .max_parts
            .map_or(1000, |m| usize::try_from(m).unwrap_or(0).min(1000));
        // The numbers from the folder's names; only the page's files are read.
        let numbers: Vec<i32> = Self::part_numbers(&dir)
            .await?
            .into_iter()
            .filter(|n| *n > marker)
            .collect();
        let mut parts: Vec<dto::Part> = Vec::new();
        let mut truncated = false;
        for (i, n) in numbers.iter().enumerate() {
            if parts.len() >= max {
                truncated = numbers.len() > i;
                break;
            }
            let Some(st) = Disk::read_listed(&part_file(&dir, *n)).await else {
                continue;
            };
            let modified = st
                .file
                .metadata()
                .await
                .and_then(|m| m.modified())
                .unwrap_or(UNIX_EPOCH);
            let m = st.meta;
            parts.push(dto::Part {
                part_number: Some(*n),
                size: Some(i64_of(m.size)),
                e_tag: Some(ETag::Strong(m.etag)),
                last_modified: Some(Timestamp::from(modified)),
                checksum_crc32: m.sums.crc32,
                checksum_crc32c: m.sums.crc32c,
                checksum_sha1: m.sums.sha1,
                checksum_sha256: m.sums.sha256,
                checksum_crc64nvme: m.sums.crc64nvme,
            });
        }
        Ok(dto::ListPartsOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(input.upload_id),
            part_number_marker: input.part_number_marker,
            next_part_number_marker: if truncated {
                parts.last().and_then(|p| p.part_number)
            } else {
                None
            },
            max_parts: Some(i32::try_from(max).unwrap_or(1000)),
            is_truncated: Some(truncated),
            parts: Some(parts),
            checksum_algorithm: up.checksum.map(|c| c.algorithm.to_dto()),
            checksum_type: up.checksum.map(|c| c.kind.to_dto()),
            ..Default::default()
        })
    }

    /// Every upload in progress, with its directory, in no order.
    pub(super) async fn all_uploads(&self) -> S3Result<Vec<(String, PathBuf, Upload)>> {
        let mut out = Vec::new();
        let mut rd = tokio::fs::read_dir(self.disk.root.join(".uploads"))
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
        Ok(!self
            .indexed_uploads(bucket, "", Bound::Unbounded, 1)
            .await?
            .is_empty())
    }

    /// Aborts every upload of `bucket` (DeleteBucket).
    pub(super) async fn abort_uploads_of(&self, bucket: &str) -> S3Result<()> {
        for (id, dir, up) in self.all_uploads().await? {
            if up.bucket == bucket {
                self.remove_upload(&dir, upload_entry(&id, &up))
                    .await
                    .map_err(|e| internal("aborting an upload of a deleted bucket", e))?;
            }
        }
        Ok(())
    }

    /// The uploads of `bucket` in progress whose keys start with `prefix`,
    /// from `from` on, in ListMultipartUploads' order, at most `want`:
    /// from the index, each checked against its folder.
    pub(super) async fn indexed_uploads(
        &self,
        bucket: &str,
        prefix: &str,
        mut from: Bound<UploadEntry>,
        want: usize,
    ) -> S3Result<Vec<(UploadEntry, Option<String>)>> {
        let mut out = Vec::new();
        while out.len() < want {
            let batch = self
                .index
                .uploads(
                    || self.upload_entries(),
                    bucket,
                    prefix,
                    from.clone(),
                    want - out.len(),
                )
                .await?;
            let Some(last) = batch.last() else { break };
            from = Bound::Excluded(last.0.clone());
            for (e, owner) in batch {
                let Ok(dir) = self.disk.upload_dir(&e.3) else {
                    continue;
                };
                if tokio::fs::try_exists(dir.join("upload.json"))
                    .await
                    .unwrap_or(true)
                {
                    out.push((e, owner));
                }
            }
        }
        Ok(out)
    }

    /// Every upload in `.uploads`, as the index keeps them.
    async fn upload_entries(&self) -> S3Result<Vec<(UploadEntry, Option<String>)>> {
        Ok(self
            .all_uploads()
            .await?
            .into_iter()
            .map(|(id, _, up)| (upload_entry(&id, &up), up.owner))
            .collect())
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
                match self.remove_upload(&dir, upload_entry(&id, &up)).await {
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
        self.disk.existing_bucket(&input.bucket).await?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let delimiter = input.delimiter.clone().filter(|d| !d.is_empty());
        let max = match input.max_uploads {
            None => 1000,
            Some(n) => usize::try_from(n)
                .map(|n| n.min(1000))
                .map_err(|_| s3_error!(InvalidArgument, "max-uploads must be 0 or more"))?,
        };
        let key_marker = input.key_marker.clone().filter(|m| !m.is_empty());
        let id_marker = input.upload_id_marker.clone().filter(|m| !m.is_empty());
        let url = wants_url(input.encoding_type.as_ref());
        let mut uploads = Vec::new();
        let mut prefixes: Vec<String> = Vec::new();
        let mut truncated = false;
        let mut next: Option<(String, String)> = None;
        let mut past_id_marker = id_marker.is_none();
        // From the marker key's first upload (those of the marker key are
        // skipped below as they always were).
        let mut from = match &key_marker {
            Some(km) => Bound::Included((input.bucket.clone(), km.clone(), 0, String::new())),
            None => Bound::Unbounded,
        };
        'page: loop {
            if max == 0 {
                break;
            }
            let batch = self
                .indexed_uploads(&input.bucket, &prefix, from.clone(), max + 1)
                .await?;
            let Some(last) = batch.last() else { break };
            from = Bound::Excluded(last.0.clone());
            for ((_, key, initiated_ms, id), owner) in batch {
                if let Some(km) = &key_marker
                    && key == *km
                {
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
                let common = delimiter.as_deref().and_then(|d| {
                    key[prefix.len()..]
                        .find(d)
                        .map(|i| key[..prefix.len() + i + d.len()].to_owned())
                });
                if let Some(cp) = &common {
                    // Every upload under the prefix is rolled up into it:
                    // the next batch starts after the last of them.
                    match successor(cp) {
                        Some(s) => from = Bound::Included((input.bucket.clone(), s, 0, String::new())),
                        None => break 'page,
                    }
                    if key_marker.as_ref().is_some_and(|m| cp <= m) {
                        continue 'page;
                    }
                }
                if uploads.len() + prefixes.len() >= max {
                    truncated = true;
                    break 'page;
                }
                match common {
                    Some(cp) => {
                        next = Some((cp.clone(), String::new()));
                        prefixes.push(cp);
                        continue 'page;
                    }
                    None => {
                        next = Some((key.clone(), id.clone()));
                        uploads.push(self.upload_listed(key, id, initiated_ms, owner, url));
                    }
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
            common_prefixes: common_prefixes(&prefixes, url),
            ..Default::default()
        })
    }
}

/// An upload as the listings' index keeps it.
pub(super) fn upload_entry(id: &str, up: &Upload) -> UploadEntry {
    (up.bucket.clone(), up.key.clone(), up.initiated_ms, id.to_owned())
}

impl FsStore {
    /// One upload of ListMultipartUploads' answer.
    fn upload_listed(
        &self,
        key: String,
        id: String,
        initiated_ms: u64,
        owner: Option<String>,
        url: bool,
    ) -> dto::MultipartUpload {
        // The account of the key that started it.
        let who = owner.map(|key| {
            let (id, name) = self
                .limits
                .accounts
                .get(&key)
                .cloned()
                .unwrap_or((key.clone(), key));
            dto::Owner {
                display_name: Some(name),
                id: Some(id),
            }
        });
        dto::MultipartUpload {
            key: Some(encode_key(&key, url)),
            upload_id: Some(id),
            initiated: Some(timestamp(initiated_ms)),
            initiator: who.as_ref().map(|o| dto::Initiator {
                display_name: o.display_name.clone(),
                id: o.id.clone(),
            }),
            owner: who,
            storage_class: Some(dto::StorageClass::from_static(dto::StorageClass::STANDARD)),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fuzz target's seed (fuzz/seeds.py) is an upload the store reads;
    /// what is not one is refused, never half-read.
    #[test]
    fn an_upload_file_reads_back_or_is_refused() {
        let good = br#"{"bucket":"b","key":"k/part","owner":"AKIAEXAMPLE","attrs":{"content_type":"text/plain","content_encoding":null,"content_disposition":null,"content_language":null,"cache_control":null,"metadata":{"a":"1"}},"initiated_ms":1,"acl":"public-read","checksum":{"algorithm":"crc32c","kind":"full_object"}}"#;
        assert_eq!(parse_upload_file(good), Ok(("b".to_owned(), "k/part".to_owned())));
        assert!(parse_upload_file(&good[..good.len() - 1]).is_err());
        assert!(parse_upload_file(b"").is_err());
        assert!(parse_upload_file(br#"{"bucket":"b"}"#).is_err());
    }
}
