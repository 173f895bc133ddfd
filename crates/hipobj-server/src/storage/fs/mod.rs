//! The embedded store: objects as files under one data directory.
//!
//! Layout (docs/server.md has the full description):
//!
//! ```text
//! <root>/<bucket>/o-<hex of key>      one file per object (keys up to 100 bytes)
//! <root>/<bucket>/h-<sha256 of key>   one file per object (longer keys)
//! <root>/.tmp/                        files being written
//! <root>/.uploads/<upload id>/        a multipart upload: upload.json, part-00001, ...
//! ```
//!
//! An object file holds the data, then its metadata as JSON, then the
//! JSON's length (u32, little-endian) and the magic `HOB1`. A write goes to
//! a fresh file in `.tmp`, is verified (length, Content-MD5, checksums),
//! then renamed over the object's name: readers see the old object or the
//! new one, never a part of either. Bucket names cannot start with `.`, so
//! the internal folders never clash with a bucket, and object file names
//! are derived from the key, never the key itself, so no key can name a
//! path outside its bucket.

use std::collections::BTreeMap;
use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::StreamExt;
use s3s::crypto::{Checksum as _, Md5, Sha256};
use s3s::dto::{self, ETag, StreamingBlob, Timestamp};
use s3s::{S3, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt, BufWriter};

use super::names::{check_bucket, check_key};

mod uploads;

const MAGIC: &[u8; 4] = b"HOB1";
const TRAILER: u64 = 8;
/// Keys up to this many bytes are stored under their hex encoding.
const HEX_KEY_MAX: usize = 100;

/// Limits of the filesystem store.
#[derive(Clone, Debug)]
pub struct FsLimits {
    /// Largest object or part accepted by PutObject or UploadPart.
    pub max_object_size: u64,
    /// Smallest part other than the last one in CompleteMultipartUpload.
    pub min_part_size: u64,
    /// Flush each file to disk before it becomes visible.
    pub sync: bool,
    /// Multipart uploads initiated longer ago than this (milliseconds) are
    /// removed with their parts.
    pub upload_expiry_ms: u64,
    /// DeleteBucket refuses while uploads are in progress (rather than
    /// aborting them, as AWS does).
    pub refuse_delete_with_uploads: bool,
    /// The region the buckets are in (GetBucketLocation; the only
    /// LocationConstraint CreateBucket accepts).
    pub region: String,
}

/// AWS's first region, whose GetBucketLocation answer is empty.
const US_EAST_1: &str = "us-east-1";

impl Default for FsLimits {
    fn default() -> Self {
        Self {
            max_object_size: 5 << 30,
            min_part_size: 5 << 20,
            sync: true,
            upload_expiry_ms: 7 * 24 * 3600 * 1000,
            refuse_delete_with_uploads: false,
            region: US_EAST_1.into(),
        }
    }
}

/// What is stored with each object (and each part of an upload).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Meta {
    key: String,
    size: u64,
    etag: String,
    modified_ms: u64,
    #[serde(default, skip_serializing_if = "Attrs::is_empty")]
    attrs: Attrs,
    #[serde(default, skip_serializing_if = "Sums::is_empty")]
    sums: Sums,
    /// Part sizes of an object made by CompleteMultipartUpload.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    parts: Vec<u64>,
    /// The upload CompleteMultipartUpload made this object from, so that a
    /// retried Complete (its first answer lost) gets the same answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    upload_id: Option<String>,
}

/// The headers an object keeps (Content-Type and friends, x-amz-meta-*).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
struct Attrs {
    content_type: Option<String>,
    content_encoding: Option<String>,
    content_disposition: Option<String>,
    content_language: Option<String>,
    cache_control: Option<String>,
    /// The `Expires` header to return (RFC 3339 in the trailer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires: Option<Timestamp>,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
}

impl Attrs {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    fn metadata(&self) -> Option<dto::Metadata> {
        (!self.metadata.is_empty()).then(|| self.metadata.clone().into_iter().collect())
    }
}

/// Checksums (base64, as S3 sends them) of an object's bytes.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
struct Sums {
    crc32: Option<String>,
    crc32c: Option<String>,
    sha1: Option<String>,
    sha256: Option<String>,
    crc64nvme: Option<String>,
}

impl Sums {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    fn from_dto(c: dto::Checksum) -> Self {
        Self {
            crc32: c.checksum_crc32,
            crc32c: c.checksum_crc32c,
            sha1: c.checksum_sha1,
            sha256: c.checksum_sha256,
            crc64nvme: c.checksum_crc64nvme,
        }
    }
}

/// What a PutObject or UploadPart request says its body must be: its
/// Content-MD5, its `x-amz-checksum-*` values, and the checksum algorithm
/// (the two inputs are different types with the same fields).
macro_rules! expected_of {
    ($input:ident, $req:ident) => {
        Expected {
            content_md5: $input.content_md5.clone(),
            sums: Sums {
                crc32: $input.checksum_crc32,
                crc32c: $input.checksum_crc32c,
                sha1: $input.checksum_sha1,
                sha256: $input.checksum_sha256,
                crc64nvme: $input.checksum_crc64nvme,
            },
            algorithm: $input.checksum_algorithm.or_else(|| sdk_algorithm(&$req.headers)),
        }
    };
}

/// What a request says the bytes must hash to.
#[derive(Debug, Default)]
struct Expected {
    content_md5: Option<String>,
    sums: Sums,
    algorithm: Option<dto::ChecksumAlgorithm>,
}

impl Expected {
    fn hasher(&self) -> S3Result<s3s::checksum::ChecksumHasher> {
        let mut h = s3s::checksum::ChecksumHasher::default();
        let s = &self.sums;
        if s.crc32.is_some() {
            h.crc32 = Some(Default::default());
        }
        if s.crc32c.is_some() {
            h.crc32c = Some(Default::default());
        }
        if s.sha1.is_some() {
            h.sha1 = Some(Default::default());
        }
        if s.sha256.is_some() {
            h.sha256 = Some(Default::default());
        }
        if s.crc64nvme.is_some() {
            h.crc64nvme = Some(Default::default());
        }
        if let Some(alg) = &self.algorithm {
            match alg.as_str() {
                dto::ChecksumAlgorithm::CRC32 => h.crc32 = Some(Default::default()),
                dto::ChecksumAlgorithm::CRC32C => h.crc32c = Some(Default::default()),
                dto::ChecksumAlgorithm::SHA1 => h.sha1 = Some(Default::default()),
                dto::ChecksumAlgorithm::SHA256 => h.sha256 = Some(Default::default()),
                dto::ChecksumAlgorithm::CRC64NVME => h.crc64nvme = Some(Default::default()),
                other => {
                    return Err(S3Error::with_message(
                        S3ErrorCode::InvalidArgument,
                        format!("unknown checksum algorithm {other:?}"),
                    ));
                }
            }
        }
        Ok(h)
    }

    /// Adds checksums that arrived as trailers of an aws-chunked body.
    fn add_trailers(&mut self, trailers: Option<s3s::TrailingHeaders>) -> S3Result<()> {
        let Some(map) = trailers.and_then(|t| t.take()) else {
            return Ok(());
        };
        let get = |name: &str| -> S3Result<Option<String>> {
            map.get(name)
                .map(|v| {
                    v.to_str()
                        .map(str::to_owned)
                        .map_err(|_| s3_error!(InvalidArgument, "trailer {name} is not text"))
                })
                .transpose()
        };
        let s = &mut self.sums;
        s.crc32 = get("x-amz-checksum-crc32")?.or(s.crc32.take());
        s.crc32c = get("x-amz-checksum-crc32c")?.or(s.crc32c.take());
        s.sha1 = get("x-amz-checksum-sha1")?.or(s.sha1.take());
        s.sha256 = get("x-amz-checksum-sha256")?.or(s.sha256.take());
        s.crc64nvme = get("x-amz-checksum-crc64nvme")?.or(s.crc64nvme.take());
        Ok(())
    }

    /// Compares what was computed with what the request said.
    fn verify(&self, md5: &[u8; 16], computed: &Sums) -> S3Result<()> {
        if let Some(b64) = &self.content_md5 {
            let want = base64_simd::STANDARD
                .decode_to_vec(b64.as_bytes())
                .map_err(|_| s3_error!(InvalidDigest, "Content-MD5 is not base64"))?;
            if want.len() != 16 {
                return Err(s3_error!(InvalidDigest, "Content-MD5 is not 16 bytes of base64"));
            }
            if want.as_slice() != md5.as_slice() {
                return Err(s3_error!(
                    BadDigest,
                    "the Content-MD5 does not match the bytes received"
                ));
            }
        }
        let pairs = [
            ("crc32", &self.sums.crc32, &computed.crc32),
            ("crc32c", &self.sums.crc32c, &computed.crc32c),
            ("sha1", &self.sums.sha1, &computed.sha1),
            ("sha256", &self.sums.sha256, &computed.sha256),
            ("crc64nvme", &self.sums.crc64nvme, &computed.crc64nvme),
        ];
        for (name, want, got) in pairs {
            if let Some(want) = want
                && Some(want) != got.as_ref()
            {
                return Err(S3Error::with_message(
                    S3ErrorCode::BadDigest,
                    format!(
                        "x-amz-checksum-{name} {want} does not match the bytes received ({})",
                        got.as_deref().unwrap_or("none")
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A multipart upload in progress.
#[derive(Debug, Serialize, Deserialize)]
struct Upload {
    bucket: String,
    key: String,
    owner: Option<String>,
    attrs: Attrs,
    initiated_ms: u64,
}

/// The checksum algorithm an SDK names in `x-amz-sdk-checksum-algorithm`
/// (s3s does not map that header to the input).
fn sdk_algorithm(headers: &http::HeaderMap) -> Option<dto::ChecksumAlgorithm> {
    headers
        .get("x-amz-sdk-checksum-algorithm")
        .and_then(|v| v.to_str().ok())
        .map(|v| dto::ChecksumAlgorithm::from(v.to_ascii_uppercase()))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn timestamp(ms: u64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms))
}

fn internal(what: &str, e: impl std::fmt::Display) -> S3Error {
    tracing::error!("fs store: {what}: {e}");
    S3Error::with_message(S3ErrorCode::InternalError, format!("{what}: {e}"))
}

fn io_kind(e: &std::io::Error) -> std::io::ErrorKind {
    e.kind()
}

fn strip_quotes(s: &str) -> &str {
    s.trim_start_matches("W/").trim_matches('"')
}

fn etag_of(e: &ETag) -> &str {
    match e {
        ETag::Strong(s) | ETag::Weak(s) => s,
    }
}

fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Seconds since the epoch of an S3 timestamp (HTTP dates have whole
/// seconds, so conditions compare at that resolution).
fn epoch_secs(t: &Timestamp) -> Option<i64> {
    let mut out = Vec::new();
    t.format(dto::TimestampFormat::EpochSeconds, &mut out).ok()?;
    let text = String::from_utf8(out).ok()?;
    text.split('.').next()?.parse().ok()
}

fn etag_matches(cond: &dto::ETagCondition, etag: &str) -> bool {
    match cond {
        dto::ETagCondition::Any => true,
        dto::ETagCondition::ETag(e) => strip_quotes(etag_of(e)) == etag,
    }
}

/// The read conditions of a GetObject or HeadObject input (two types
/// with the same four fields).
/// With `copy_source`, the `x-amz-copy-source-if-*` conditions of a
/// CopyObject or UploadPartCopy input.
macro_rules! read_conditions {
    ($input:ident) => {
        ReadConditions {
            if_match: $input.if_match.as_ref(),
            if_none_match: $input.if_none_match.as_ref(),
            if_modified_since: $input.if_modified_since.as_ref(),
            if_unmodified_since: $input.if_unmodified_since.as_ref(),
        }
    };
    (copy_source $input:ident) => {
        ReadConditions {
            if_match: $input.copy_source_if_match.as_ref(),
            if_none_match: $input.copy_source_if_none_match.as_ref(),
            if_modified_since: $input.copy_source_if_modified_since.as_ref(),
            if_unmodified_since: $input.copy_source_if_unmodified_since.as_ref(),
        }
    };
}

/// A GetObject or HeadObject output (two types with the same fields)
/// describing the object `$meta`, with its stored checksums if `$sums`
/// (as S3, only for `x-amz-checksum-mode: ENABLED`: a client that did not
/// ask may not expect to validate them), and the fields given.
macro_rules! described {
    ($ty:path, $meta:expr, $sums:expr, { $($field:ident $(: $value:expr)?),* $(,)? }) => {{
        let meta: Meta = $meta;
        let a = meta.attrs;
        let sums = if $sums { meta.sums } else { Sums::default() };
        $ty {
            $($field $(: $value)?,)*
            accept_ranges: Some("bytes".into()),
            e_tag: Some(ETag::Strong(meta.etag)),
            last_modified: Some(timestamp(meta.modified_ms)),
            metadata: a.metadata(),
            content_type: a.content_type.and_then(|c| c.parse().ok()),
            content_encoding: a.content_encoding,
            content_disposition: a.content_disposition,
            content_language: a.content_language,
            cache_control: a.cache_control,
            expires: a.expires,
            checksum_crc32: sums.crc32,
            checksum_crc32c: sums.crc32c,
            checksum_sha1: sums.sha1,
            checksum_sha256: sums.sha256,
            checksum_crc64nvme: sums.crc64nvme,
            ..Default::default()
        }
    }};
}

/// The conditions of a read (GET, HEAD) or of a copy source.
#[derive(Default)]
struct ReadConditions<'a> {
    if_match: Option<&'a dto::ETagCondition>,
    if_none_match: Option<&'a dto::ETagCondition>,
    if_modified_since: Option<&'a Timestamp>,
    if_unmodified_since: Option<&'a Timestamp>,
}

impl ReadConditions<'_> {
    /// RFC 9110 section 13.2.2 as S3 applies it: If-Match, else
    /// If-Unmodified-Since (412); then If-None-Match, else
    /// If-Modified-Since (304 for a read; `copy` turns that into 412, as
    /// S3 answers a copy whose source condition fails).
    fn check(&self, meta: &Meta, copy: bool) -> S3Result<()> {
        let modified = i64::try_from(meta.modified_ms / 1000).unwrap_or(i64::MAX);
        let failed = |what: &str| {
            S3Error::with_message(
                S3ErrorCode::PreconditionFailed,
                format!("At least one of the pre-conditions you specified did not hold ({what})"),
            )
        };
        let not_modified = |what: &str| {
            if copy {
                failed(what)
            } else {
                // A 304 names the version the client already has (RFC 9110
                // section 15.4.5; S3 sends its ETag).
                let mut e = S3Error::with_message(S3ErrorCode::NotModified, format!("Not Modified ({what})"));
                let mut h = http::HeaderMap::new();
                if let Ok(v) = http::HeaderValue::from_str(&format!("\"{}\"", meta.etag)) {
                    h.insert(http::header::ETAG, v);
                }
                e.set_headers(h);
                e
            }
        };
        match (self.if_match, self.if_unmodified_since) {
            (Some(m), _) if !etag_matches(m, &meta.etag) => return Err(failed("If-Match")),
            (None, Some(t)) if epoch_secs(t).is_some_and(|t| modified > t) => {
                return Err(failed("If-Unmodified-Since"));
            }
            _ => {}
        }
        match (self.if_none_match, self.if_modified_since) {
            (Some(m), _) if etag_matches(m, &meta.etag) => Err(not_modified("If-None-Match")),
            (None, Some(t)) if epoch_secs(t).is_some_and(|t| modified <= t) => {
                Err(not_modified("If-Modified-Since"))
            }
            _ => Ok(()),
        }
    }
}

/// What a write says about the object it replaces.
enum WriteCondition {
    /// Overwrite whatever is there.
    None,
    /// `If-None-Match: *`: only if no object has the key.
    Absent,
    /// `If-Match`: only if the object exists with this ETag (or any, `*`).
    Matches(dto::ETagCondition),
    /// `If-None-Match: <etag>`: unless the object exists with this ETag.
    NoneMatch(dto::ETagCondition),
}

impl WriteCondition {
    fn of(if_match: Option<dto::ETagCondition>, if_none_match: Option<dto::ETagCondition>) -> S3Result<Self> {
        match (if_match, if_none_match) {
            (Some(_), Some(_)) => Err(s3_error!(
                NotImplemented,
                "If-Match and If-None-Match together are not supported"
            )),
            (Some(m), None) => Ok(Self::Matches(m)),
            (None, Some(dto::ETagCondition::Any)) => Ok(Self::Absent),
            (None, Some(e)) => Ok(Self::NoneMatch(e)),
            (None, None) => Ok(Self::None),
        }
    }
}

/// A file in `.tmp` that is removed unless it is committed.
struct TempFile {
    path: PathBuf,
    out: BufWriter<tokio::fs::File>,
    done: bool,
}

impl TempFile {
    async fn commit(mut self, dest: &Path, sync: bool) -> std::io::Result<()> {
        self.out.flush().await?;
        if sync {
            self.out.get_ref().sync_data().await?;
        }
        tokio::fs::rename(&self.path, dest).await?;
        self.done = true;
        Ok(())
    }
}

impl TempFile {
    /// Commits only if nothing is at `dest` yet: a hard link fails
    /// atomically when the name exists, so two racing creators cannot both
    /// win.
    async fn commit_new(mut self, dest: &Path, sync: bool) -> std::io::Result<()> {
        self.out.flush().await?;
        if sync {
            self.out.get_ref().sync_data().await?;
        }
        tokio::fs::hard_link(&self.path, dest).await?;
        // Drop removes the temporary name; the object lives on at `dest`.
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// What reading an object file found.
struct Stored {
    meta: Meta,
    file: tokio::fs::File,
}

/// The filesystem store. See the module documentation.
#[derive(Debug)]
pub struct FsStore {
    root: PathBuf,
    limits: FsLimits,
    counter: AtomicU64,
    /// Held between the check and the commit of an If-Match write.
    cond_lock: tokio::sync::Mutex<()>,
    /// When stale uploads were last swept (`now_ms`), 0: never.
    last_sweep_ms: AtomicU64,
}

impl FsStore {
    /// Opens (creating it if needed) the store in `root`, and removes
    /// files left in `.tmp` by an earlier run.
    pub fn open(root: impl AsRef<Path>, limits: FsLimits) -> std::io::Result<Self> {
        let root = root.as_ref();
        std::fs::create_dir_all(root)?;
        let root = root.canonicalize()?;
        let tmp = root.join(".tmp");
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)?;
        }
        std::fs::create_dir_all(&tmp)?;
        std::fs::create_dir_all(root.join(".uploads"))?;
        Ok(Self {
            root,
            limits,
            counter: AtomicU64::new(0),
            cond_lock: tokio::sync::Mutex::new(()),
            last_sweep_ms: AtomicU64::new(0),
        })
    }

    /// The data directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The owner of a bucket's objects: the key that created the bucket
    /// (the record s3::owners keeps in `.owners/`; objects belong to their
    /// bucket's owner, as with S3's default object ownership), else the
    /// key asking, else this server.
    async fn bucket_owner(&self, bucket: &str, asking: &Option<s3s::auth::Credentials>) -> dto::Owner {
        let recorded = tokio::fs::read_to_string(self.root.join(".owners").join(bucket))
            .await
            .ok()
            .map(|o| o.trim().to_owned())
            .filter(|o| !o.is_empty());
        let id = recorded
            .or_else(|| asking.as_ref().map(|c| c.access_key.clone()))
            .unwrap_or_else(|| "hipobj".into());
        dto::Owner {
            display_name: Some(id.clone()),
            id: Some(id),
        }
    }

    /// The object stored at `path`, if it exists and the conditions hold
    /// (`copy`: those of a copy source, see [`ReadConditions::check`]).
    async fn read_if(path: &Path, cond: ReadConditions<'_>, copy: bool) -> S3Result<Stored> {
        let Some(st) = Self::read_stored(path).await? else {
            return Err(if copy {
                s3_error!(NoSuchKey, "the copy source does not exist")
            } else {
                s3_error!(NoSuchKey)
            });
        };
        cond.check(&st.meta, copy)?;
        Ok(st)
    }

    fn bucket_dir(&self, bucket: &str) -> S3Result<PathBuf> {
        check_bucket(bucket)?;
        Ok(self.root.join(bucket))
    }

    fn file_name(key: &str) -> String {
        if key.len() <= HEX_KEY_MAX {
            format!("o-{}", hex(key.as_bytes()))
        } else {
            format!("h-{}", hex(&Sha256::checksum(key.as_bytes())))
        }
    }

    async fn existing_bucket(&self, bucket: &str) -> S3Result<PathBuf> {
        let dir = self.bucket_dir(bucket)?;
        match tokio::fs::metadata(&dir).await {
            Ok(m) if m.is_dir() => Ok(dir),
            Ok(_) => Err(s3_error!(NoSuchBucket)),
            Err(e) if io_kind(&e) == std::io::ErrorKind::NotFound => Err(s3_error!(NoSuchBucket)),
            Err(e) => Err(internal("bucket lookup", e)),
        }
    }

    async fn object_path(&self, bucket: &str, key: &str) -> S3Result<PathBuf> {
        check_key(key)?;
        Ok(self.existing_bucket(bucket).await?.join(Self::file_name(key)))
    }

    fn upload_dir(&self, upload_id: &str) -> S3Result<PathBuf> {
        if upload_id.len() != 32 || !upload_id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(s3_error!(NoSuchUpload));
        }
        Ok(self.root.join(".uploads").join(upload_id))
    }

    async fn temp(&self) -> S3Result<TempFile> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let path = self
            .root
            .join(".tmp")
            .join(format!("{}-{n}", uuid::Uuid::new_v4().simple()));
        let file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .await
            .map_err(|e| internal("creating a temporary file", e))?;
        Ok(TempFile {
            path,
            out: BufWriter::with_capacity(1 << 20, file),
            done: false,
        })
    }

    /// Reads an object file's metadata; `None` if there is no such file.
    async fn read_stored(path: &Path) -> S3Result<Option<Stored>> {
        let mut file = match tokio::fs::File::open(path).await {
            Ok(f) => f,
            Err(e) if io_kind(&e) == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(internal("opening an object", e)),
        };
        let meta = Self::read_trailer(&mut file)
            .await
            .map_err(|e| internal(&format!("reading {}", path.display()), e))?;
        Ok(Some(Stored { meta, file }))
    }

    async fn read_trailer(file: &mut tokio::fs::File) -> std::io::Result<Meta> {
        let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_owned());
        let len = file.metadata().await?.len();
        if len < TRAILER {
            return Err(bad("shorter than its trailer"));
        }
        file.seek(SeekFrom::Start(len - TRAILER)).await?;
        let mut t = [0u8; 8];
        file.read_exact(&mut t).await?;
        if &t[4..] != MAGIC {
            return Err(bad("no object trailer"));
        }
        let jlen = u64::from(u32::from_le_bytes([t[0], t[1], t[2], t[3]]));
        let data_len = len
            .checked_sub(TRAILER + jlen)
            .ok_or_else(|| bad("trailer longer than the file"))?;
        file.seek(SeekFrom::Start(data_len)).await?;
        let mut json = vec![0u8; usize::try_from(jlen).map_err(|_| bad("trailer too long"))?];
        file.read_exact(&mut json).await?;
        let meta: Meta = serde_json::from_slice(&json).map_err(|e| bad(&e.to_string()))?;
        if meta.size != data_len {
            return Err(bad("data length differs from the metadata"));
        }
        Ok(meta)
    }

    /// Streams `body` into a temporary file, hashing it, and checks the
    /// length and digests before anything becomes visible.
    async fn receive(
        &self,
        body: Option<StreamingBlob>,
        content_length: Option<i64>,
        expected: &mut Expected,
        trailers: Option<s3s::TrailingHeaders>,
    ) -> S3Result<(TempFile, u64, [u8; 16], Sums)> {
        let max = self.limits.max_object_size;
        if let Some(n) = content_length
            && u64::try_from(n).unwrap_or(u64::MAX) > max
        {
            return Err(S3Error::with_message(
                S3ErrorCode::EntityTooLarge,
                format!("{n} bytes is over this server's limit of {max}"),
            ));
        }
        let mut tmp = self.temp().await?;
        let mut md5 = Md5::new();
        let mut sums = expected.hasher()?;
        let mut size = 0u64;
        if let Some(mut body) = body {
            while let Some(chunk) = body.next().await {
                let chunk: Bytes = chunk.map_err(|e| {
                    S3Error::with_message(
                        S3ErrorCode::IncompleteBody,
                        format!("reading the body failed: {e}"),
                    )
                })?;
                size += chunk.len() as u64;
                if size > max {
                    return Err(S3Error::with_message(
                        S3ErrorCode::EntityTooLarge,
                        format!("the body is over this server's limit of {max} bytes"),
                    ));
                }
                md5.update(&chunk);
                sums.update(&chunk);
                tmp.out
                    .write_all(&chunk)
                    .await
                    .map_err(|e| internal("writing an object", e))?;
            }
        }
        if let Some(n) = content_length
            && u64::try_from(n).ok() != Some(size)
        {
            return Err(S3Error::with_message(
                S3ErrorCode::IncompleteBody,
                format!("received {size} bytes, Content-Length said {n}"),
            ));
        }
        let md5 = md5.finalize();
        let computed = Sums::from_dto(sums.finalize());
        // Trailers arrive after the body; the hasher was set up from the
        // algorithm header that announced them.
        expected.add_trailers(trailers)?;
        expected.verify(&md5, &computed)?;
        Ok((tmp, size, md5, computed))
    }

    /// As [`FsStore::finish`], if `cond` holds for what is at `dest`
    /// (`412 PreconditionFailed` otherwise; `404` for If-Match on no object).
    async fn finish_if(&self, tmp: TempFile, meta: &Meta, dest: &Path, cond: WriteCondition) -> S3Result<()> {
        match cond {
            WriteCondition::None => self.finish(tmp, meta, dest).await,
            WriteCondition::Absent => {
                let tmp = self.seal(tmp, meta).await?;
                match tmp.commit_new(dest, self.limits.sync).await {
                    Ok(()) => Ok(()),
                    Err(e) if io_kind(&e) == std::io::ErrorKind::AlreadyExists => Err(s3_error!(
                        PreconditionFailed,
                        "At least one of the pre-conditions you specified did not hold (If-None-Match: * and the object exists)"
                    )),
                    Err(e) => Err(internal("committing an object", e)),
                }
            }
            WriteCondition::NoneMatch(not) => {
                let _turn = self.cond_lock.lock().await;
                if let Some(st) = Self::read_stored(dest).await?
                    && etag_matches(&not, &st.meta.etag)
                {
                    return Err(s3_error!(
                        PreconditionFailed,
                        "At least one of the pre-conditions you specified did not hold (If-None-Match)"
                    ));
                }
                self.finish(tmp, meta, dest).await
            }
            WriteCondition::Matches(want) => {
                // Conditional writers of this store take turns between the
                // check and the rename.
                let _turn = self.cond_lock.lock().await;
                let Some(st) = Self::read_stored(dest).await? else {
                    return Err(s3_error!(NoSuchKey, "If-Match: the object does not exist"));
                };
                if !etag_matches(&want, &st.meta.etag) {
                    return Err(s3_error!(
                        PreconditionFailed,
                        "At least one of the pre-conditions you specified did not hold (If-Match)"
                    ));
                }
                self.finish(tmp, meta, dest).await
            }
        }
    }

    /// Appends the trailer (the file is then complete, not yet visible).
    async fn seal(&self, mut tmp: TempFile, meta: &Meta) -> S3Result<TempFile> {
        let json = serde_json::to_vec(meta).map_err(|e| internal("encoding metadata", e))?;
        let jlen = u32::try_from(json.len()).map_err(|e| internal("metadata too long", e))?;
        let mut trailer = json;
        trailer.extend_from_slice(&jlen.to_le_bytes());
        trailer.extend_from_slice(MAGIC);
        tmp.out
            .write_all(&trailer)
            .await
            .map_err(|e| internal("writing metadata", e))?;
        Ok(tmp)
    }

    /// Appends the trailer and renames the file into place.
    async fn finish(&self, mut tmp: TempFile, meta: &Meta, dest: &Path) -> S3Result<()> {
        let json = serde_json::to_vec(meta).map_err(|e| internal("encoding metadata", e))?;
        let jlen = u32::try_from(json.len()).map_err(|e| internal("metadata too long", e))?;
        let mut trailer = json;
        trailer.extend_from_slice(&jlen.to_le_bytes());
        trailer.extend_from_slice(MAGIC);
        tmp.out
            .write_all(&trailer)
            .await
            .map_err(|e| internal("writing metadata", e))?;
        tmp.commit(dest, self.limits.sync)
            .await
            .map_err(|e| internal("committing an object", e))
    }

    async fn load_upload(
        &self,
        upload_id: &str,
        bucket: &str,
        key: &str,
        owner: Option<&str>,
    ) -> S3Result<(PathBuf, Upload)> {
        let dir = self.upload_dir(upload_id)?;
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

    async fn list_parts_in(dir: &Path) -> S3Result<Vec<(i32, Meta, SystemTime)>> {
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
            if let Some(mut st) = Self::read_stored(&ent.path()).await? {
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

    /// The keys of a bucket, sorted, with the file holding each.
    async fn keys(&self, dir: &Path, prefix: &str) -> S3Result<Vec<(String, PathBuf)>> {
        let mut out = Vec::new();
        let mut rd = tokio::fs::read_dir(dir)
            .await
            .map_err(|e| internal("listing a bucket", e))?;
        while let Some(ent) = rd
            .next_entry()
            .await
            .map_err(|e| internal("listing a bucket", e))?
        {
            let name = ent.file_name();
            let Some(name) = name.to_str() else { continue };
            let key = if let Some(h) = name.strip_prefix("o-") {
                match unhex(h).and_then(|b| String::from_utf8(b).ok()) {
                    Some(k) => k,
                    None => continue,
                }
            } else if name.starts_with("h-") {
                match Self::read_stored(&ent.path()).await? {
                    Some(st) => st.meta.key,
                    None => continue,
                }
            } else {
                continue;
            };
            if key.starts_with(prefix) {
                out.push((key, ent.path()));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// The core of both ListObjects versions: keys after `after`, grouped
    /// by `delimiter`, at most `max` entries.
    async fn list(&self, q: ListQuery<'_>) -> S3Result<Listing> {
        let dir = self.existing_bucket(q.bucket).await?;
        let mut listing = Listing::default();
        if q.max == 0 {
            // Nothing asked for: an empty page that is not truncated.
            return Ok(listing);
        }
        let keys = self.keys(&dir, q.prefix).await?;
        let mut last_prefix: Option<String> = None;
        for (key, path) in keys {
            if q.after.is_some_and(|a| key.as_str() <= a) {
                continue;
            }
            let common = q.delimiter.filter(|d| !d.is_empty()).and_then(|d| {
                key[q.prefix.len()..]
                    .find(d)
                    .map(|i| key[..q.prefix.len() + i + d.len()].to_owned())
            });
            if let Some(cp) = &common
                && (last_prefix.as_ref() == Some(cp) || q.after.is_some_and(|a| cp.as_str() <= a))
            {
                // Rolled up already: on this page, or (a marker or token
                // that is this prefix) on an earlier one.
                continue;
            }
            if listing.objects.len() + listing.prefixes.len() >= q.max {
                listing.truncated = true;
                break;
            }
            match common {
                Some(cp) => {
                    listing.next = Some(cp.clone());
                    last_prefix = Some(cp.clone());
                    listing.prefixes.push(cp);
                }
                None => {
                    let Some(mut st) = Self::read_stored(&path).await? else {
                        continue;
                    };
                    let modified = st.file.metadata().await.and_then(|m| m.modified()).ok();
                    listing.next = Some(key.clone());
                    st.meta.key = key;
                    listing.objects.push((st.meta, modified));
                }
            }
        }
        if !listing.truncated {
            listing.next = None;
        }
        Ok(listing)
    }
}

struct ListQuery<'a> {
    bucket: &'a str,
    prefix: &'a str,
    delimiter: Option<&'a str>,
    after: Option<&'a str>,
    max: usize,
}

#[derive(Default)]
struct Listing {
    objects: Vec<(Meta, Option<SystemTime>)>,
    prefixes: Vec<String>,
    truncated: bool,
    /// The last key or common prefix returned, when truncated.
    next: Option<String>,
}

impl Listing {
    /// The objects, each with `owner` if given.
    fn contents(&self, url: bool, owner: Option<&dto::Owner>) -> Vec<dto::Object> {
        self.objects
            .iter()
            .map(|(m, modified)| dto::Object {
                owner: owner.cloned(),
                key: Some(encode_key(&m.key, url)),
                size: Some(i64_of(m.size)),
                e_tag: Some(ETag::Strong(m.etag.clone())),
                last_modified: Some(modified.map_or_else(|| timestamp(m.modified_ms), Timestamp::from)),
                storage_class: Some(dto::ObjectStorageClass::from_static(
                    dto::ObjectStorageClass::STANDARD,
                )),
                ..Default::default()
            })
            .collect()
    }

    fn common_prefixes(&self, url: bool) -> Vec<dto::CommonPrefix> {
        self.prefixes
            .iter()
            .map(|p| dto::CommonPrefix {
                prefix: Some(encode_key(p, url)),
            })
            .collect()
    }
}

/// Percent-encodes a key for `encoding-type=url` (everything but
/// unreserved characters and `/`).
fn encode_key(key: &str, url: bool) -> String {
    if !url {
        return key.to_owned();
    }
    let mut s = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            s.push(char::from(b));
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

fn max_keys(n: Option<i32>) -> S3Result<usize> {
    match n {
        None => Ok(1000),
        Some(n) => usize::try_from(n)
            .map(|n| n.min(1000))
            .map_err(|_| s3_error!(InvalidArgument, "max-keys must be 0 or more")),
    }
}

fn checksum_enabled(m: Option<&dto::ChecksumMode>) -> bool {
    m.is_some_and(|m| m.as_str().eq_ignore_ascii_case(dto::ChecksumMode::ENABLED))
}

/// Content-Encoding as stored: without `aws-chunked`, which describes how
/// the request body travelled, not the object.
fn stored_encoding(e: Option<String>) -> Option<String> {
    let e = e?;
    let kept: Vec<&str> = e
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty() && !t.eq_ignore_ascii_case("aws-chunked"))
        .collect();
    (!kept.is_empty()).then(|| kept.join(", "))
}

fn wants_url(e: Option<&dto::EncodingType>) -> bool {
    e.is_some_and(|e| e.as_str() == dto::EncodingType::URL)
}

/// The attributes a PutObject, CopyObject (REPLACE) or
/// CreateMultipartUpload input gives its object (three types with the same
/// fields).
macro_rules! attrs_of {
    ($input:ident) => {
        Attrs {
            content_type: $input.content_type.map(|c| c.to_string()),
            content_encoding: stored_encoding($input.content_encoding),
            content_disposition: $input.content_disposition,
            content_language: $input.content_language,
            cache_control: $input.cache_control,
            expires: $input.expires,
            metadata: $input.metadata.unwrap_or_default().into_iter().collect(),
        }
    };
}

/// One page of ListBuckets: the names after the continuation token that
/// start with the prefix, at most `max` of them.
struct BucketPage<'a> {
    after: Option<String>,
    prefix: &'a str,
    max: usize,
}

impl<'a> BucketPage<'a> {
    /// AWS's page when MaxBuckets is not given.
    const DEFAULT_MAX: usize = 10_000;

    fn of(input: &'a dto::ListBucketsInput) -> S3Result<Self> {
        let max = match input.max_buckets {
            None => Self::DEFAULT_MAX,
            Some(n) => usize::try_from(n)
                .ok()
                .filter(|n| (1..=Self::DEFAULT_MAX).contains(n))
                .ok_or_else(|| s3_error!(InvalidArgument, "max-buckets must be between 1 and 10000"))?,
        };
        // The token is the last name of the previous page, in base64 (a
        // client must treat it as opaque).
        let after = match input.continuation_token.as_deref() {
            None | Some("") => None,
            Some(t) => Some(
                base64_simd::URL_SAFE_NO_PAD
                    .decode_to_vec(t.as_bytes())
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| {
                        s3_error!(InvalidArgument, "The continuation token provided is incorrect")
                    })?,
            ),
        };
        Ok(Self {
            after,
            prefix: input.prefix.as_deref().unwrap_or(""),
            max,
        })
    }

    fn wants(&self, name: &str) -> bool {
        name.starts_with(self.prefix) && self.after.as_deref().is_none_or(|a| name > a)
    }

    /// Keeps the first `max` of the sorted names; the token for the rest.
    fn cut(&self, buckets: &mut Vec<dto::Bucket>) -> Option<String> {
        if buckets.len() <= self.max {
            return None;
        }
        buckets.truncate(self.max);
        let last = buckets.last()?.name.as_deref()?;
        Some(base64_simd::URL_SAFE_NO_PAD.encode_to_string(last.as_bytes()))
    }
}

#[async_trait::async_trait]
impl S3 for FsStore {
    async fn create_bucket(
        &self,
        req: S3Request<dto::CreateBucketInput>,
    ) -> S3Result<S3Response<dto::CreateBucketOutput>> {
        let dir = self.bucket_dir(&req.input.bucket)?;
        let asked = req
            .input
            .create_bucket_configuration
            .as_ref()
            .and_then(|c| c.location_constraint.as_ref())
            .map(|l| l.as_str())
            .filter(|l| !l.is_empty());
        if let Some(asked) = asked
            && asked != self.limits.region
        {
            // As AWS: a bucket is made in the endpoint's region, never
            // silently somewhere other than where the client asked.
            return Err(S3Error::with_message(
                S3ErrorCode::IllegalLocationConstraintException,
                format!(
                    "The {asked} location constraint is incompatible with the region of this server ({})",
                    self.limits.region
                ),
            ));
        }
        match tokio::fs::create_dir(&dir).await {
            Ok(()) => Ok(S3Response::new(dto::CreateBucketOutput {
                location: Some(format!("/{}", req.input.bucket)),
            })),
            // The key that asks owns the bucket (s3::owners refused any
            // other): as AWS in us-east-1, creating it again succeeds and
            // changes nothing; in any other region it is
            // BucketAlreadyOwnedByYou.
            Err(e) if io_kind(&e) == std::io::ErrorKind::AlreadyExists && self.limits.region != US_EAST_1 => {
                Err(s3_error!(BucketAlreadyOwnedByYou))
            }
            Err(e) if io_kind(&e) == std::io::ErrorKind::AlreadyExists => {
                Ok(S3Response::new(dto::CreateBucketOutput {
                    location: Some(format!("/{}", req.input.bucket)),
                }))
            }
            Err(e) => Err(internal("creating a bucket", e)),
        }
    }

    async fn delete_bucket(
        &self,
        req: S3Request<dto::DeleteBucketInput>,
    ) -> S3Result<S3Response<dto::DeleteBucketOutput>> {
        let dir = self.existing_bucket(&req.input.bucket).await?;
        self.sweep_stale_uploads().await;
        if self.has_objects(&dir).await? {
            return Err(s3_error!(BucketNotEmpty));
        }
        if self.limits.refuse_delete_with_uploads && self.has_uploads(&req.input.bucket).await? {
            return Err(s3_error!(
                BucketNotEmpty,
                "The bucket you tried to delete has multipart uploads in progress: complete or abort them first"
            ));
        }
        // As AWS: uploads in progress go with their bucket (and their parts
        // with them), never left behind unlistable.
        self.abort_uploads_of(&req.input.bucket).await?;
        match tokio::fs::remove_dir(&dir).await {
            Ok(()) => Ok(S3Response::new(dto::DeleteBucketOutput {})),
            Err(e) if io_kind(&e) == std::io::ErrorKind::DirectoryNotEmpty => Err(s3_error!(BucketNotEmpty)),
            Err(e) if io_kind(&e) == std::io::ErrorKind::NotFound => Err(s3_error!(NoSuchBucket)),
            Err(e) => Err(internal("deleting a bucket", e)),
        }
    }

    async fn head_bucket(
        &self,
        req: S3Request<dto::HeadBucketInput>,
    ) -> S3Result<S3Response<dto::HeadBucketOutput>> {
        self.existing_bucket(&req.input.bucket).await?;
        Ok(S3Response::new(dto::HeadBucketOutput::default()))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<dto::GetBucketLocationInput>,
    ) -> S3Result<S3Response<dto::GetBucketLocationOutput>> {
        self.existing_bucket(&req.input.bucket).await?;
        // AWS answers an empty LocationConstraint for us-east-1.
        let region = &self.limits.region;
        Ok(S3Response::new(dto::GetBucketLocationOutput {
            location_constraint: (region != US_EAST_1).then(|| region.clone().into()),
        }))
    }

    async fn list_buckets(
        &self,
        req: S3Request<dto::ListBucketsInput>,
    ) -> S3Result<S3Response<dto::ListBucketsOutput>> {
        let who = req.credentials.as_ref().map(|c| c.access_key.as_str());
        let input = req.input;
        let page = BucketPage::of(&input)?;
        let mut buckets = Vec::new();
        let mut rd = tokio::fs::read_dir(&self.root)
            .await
            .map_err(|e| internal("listing buckets", e))?;
        while let Some(ent) = rd
            .next_entry()
            .await
            .map_err(|e| internal("listing buckets", e))?
        {
            let name = ent.file_name();
            let Some(name) = name.to_str() else { continue };
            if check_bucket(name).is_err() || !page.wants(name) {
                continue;
            }
            let Ok(md) = ent.metadata().await else { continue };
            if !md.is_dir() {
                continue;
            }
            // Another key's bucket (the owner records that s3::owners
            // keeps in `.owners/`) is not listed, as in S3.
            if let Some(who) = who
                && let Ok(owner) = tokio::fs::read_to_string(self.root.join(".owners").join(name)).await
                && owner.trim() != who
            {
                continue;
            }
            let created = md.created().or_else(|_| md.modified()).unwrap_or(UNIX_EPOCH);
            buckets.push(dto::Bucket {
                name: Some(name.to_owned()),
                creation_date: Some(Timestamp::from(created)),
                ..Default::default()
            });
        }
        buckets.sort_by(|a, b| a.name.cmp(&b.name));
        let continuation_token = page.cut(&mut buckets);
        Ok(S3Response::new(dto::ListBucketsOutput {
            buckets: Some(buckets),
            continuation_token,
            prefix: input.prefix,
            owner: Some(dto::Owner {
                display_name: Some("hipobj".into()),
                id: Some("hipobj".into()),
            }),
        }))
    }

    async fn put_object(
        &self,
        req: S3Request<dto::PutObjectInput>,
    ) -> S3Result<S3Response<dto::PutObjectOutput>> {
        let input = req.input;
        let dest = self.object_path(&input.bucket, &input.key).await?;
        let cond = WriteCondition::of(input.if_match.clone(), input.if_none_match.clone())?;
        let mut expected = expected_of!(input, req);
        let (tmp, size, md5, computed) = self
            .receive(
                input.body,
                input.content_length,
                &mut expected,
                req.trailing_headers,
            )
            .await?;
        let meta = Meta {
            key: input.key,
            size,
            etag: hex(&md5),
            modified_ms: now_ms(),
            attrs: attrs_of!(input),
            sums: computed,
            parts: Vec::new(),
            upload_id: None,
        };
        self.finish_if(tmp, &meta, &dest, cond).await?;
        tracing::debug!(bucket = %input.bucket, key = %meta.key, size, etag = %meta.etag, "stored");
        Ok(S3Response::new(dto::PutObjectOutput {
            e_tag: Some(ETag::Strong(meta.etag)),
            size: Some(i64_of(size)),
            checksum_crc32: meta.sums.crc32,
            checksum_crc32c: meta.sums.crc32c,
            checksum_sha1: meta.sums.sha1,
            checksum_sha256: meta.sums.sha256,
            checksum_crc64nvme: meta.sums.crc64nvme,
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: S3Request<dto::GetObjectInput>,
    ) -> S3Result<S3Response<dto::GetObjectOutput>> {
        let input = req.input;
        let path = self.object_path(&input.bucket, &input.key).await?;
        let Stored { meta, mut file } = Self::read_if(&path, read_conditions!(input), false).await?;
        let size = meta.size;
        let (range, parts_count) = match (&input.range, input.part_number) {
            (Some(_), Some(_)) => {
                return Err(s3_error!(
                    InvalidRequest,
                    "Range and partNumber cannot be used together"
                ));
            }
            (Some(r), None) => (
                Some(r.check(size).map_err(|_| {
                    S3Error::with_message(S3ErrorCode::InvalidRange, format!("the object is {size} bytes"))
                })?),
                None,
            ),
            (None, Some(n)) => {
                let parts: Vec<u64> = if meta.parts.is_empty() {
                    vec![size]
                } else {
                    meta.parts.clone()
                };
                let idx = usize::try_from(n)
                    .ok()
                    .and_then(|n| n.checked_sub(1))
                    .filter(|i| *i < parts.len())
                    .ok_or_else(|| {
                        let mut e = S3Error::with_message(
                            S3ErrorCode::Custom("InvalidPartNumber".into()),
                            format!("the object has {} part(s)", parts.len()),
                        );
                        e.set_status_code(http::StatusCode::RANGE_NOT_SATISFIABLE);
                        e
                    })?;
                let start: u64 = parts[..idx].iter().sum();
                let count = i32::try_from(parts.len()).unwrap_or(i32::MAX);
                (Some(start..start + parts[idx]), Some(count))
            }
            (None, None) => (None, None),
        };
        let (start, len) = range.as_ref().map_or((0, size), |r| (r.start, r.end - r.start));
        file.seek(SeekFrom::Start(start))
            .await
            .map_err(|e| internal("reading an object", e))?;
        let body = tokio_util::io::ReaderStream::with_capacity(file.take(len), 256 << 10);
        let whole = len == size;
        // A Range or a partNumber selects bytes: 206 with Content-Range.
        let content_range = range.map(|r| format!("bytes {}-{}/{size}", r.start, r.end.saturating_sub(1)));
        // The whole object's checksums, only for the whole object.
        let sums = whole && checksum_enabled(input.checksum_mode.as_ref());
        Ok(S3Response::new(described!(dto::GetObjectOutput, meta, sums, {
            body: Some(StreamingBlob::wrap(body)),
            content_length: Some(i64_of(len)),
            content_range,
            parts_count,
        })))
    }

    async fn head_object(
        &self,
        req: S3Request<dto::HeadObjectInput>,
    ) -> S3Result<S3Response<dto::HeadObjectOutput>> {
        let input = req.input;
        let path = self.object_path(&input.bucket, &input.key).await?;
        let Stored { meta, .. } = Self::read_if(&path, read_conditions!(input), false).await?;
        let sums = checksum_enabled(input.checksum_mode.as_ref());
        let parts_count = input
            .part_number
            .map(|_| i32::try_from(meta.parts.len().max(1)).unwrap_or(i32::MAX));
        let size = meta.size;
        Ok(S3Response::new(described!(dto::HeadObjectOutput, meta, sums, {
            content_length: Some(i64_of(size)),
            parts_count,
        })))
    }

    async fn get_object_attributes(
        &self,
        req: S3Request<dto::GetObjectAttributesInput>,
    ) -> S3Result<S3Response<dto::GetObjectAttributesOutput>> {
        let input = req.input;
        let path = self.object_path(&input.bucket, &input.key).await?;
        let Stored { meta, .. } = Self::read_if(&path, ReadConditions::default(), false).await?;
        // SDKs send the list as one header, "ETag, Checksum, ...".
        let wants = |a: &str| {
            input
                .object_attributes
                .iter()
                .flat_map(|x| x.as_str().split(','))
                .any(|x| x.trim() == a)
        };
        // The parts of a multipart object, a page at a time (a single
        // PutObject has none, as in S3).
        let object_parts = if wants(dto::ObjectAttributes::OBJECT_PARTS) && !meta.parts.is_empty() {
            let marker = input.part_number_marker.unwrap_or(0);
            let max = input.max_parts.unwrap_or(1000);
            let (Ok(after), Ok(take)) = (usize::try_from(marker), usize::try_from(max)) else {
                return Err(s3_error!(
                    InvalidArgument,
                    "max-parts and part-number-marker must not be negative"
                ));
            };
            let page: Vec<dto::ObjectPart> = meta
                .parts
                .iter()
                .enumerate()
                .skip(after)
                .take(take)
                .map(|(i, size)| dto::ObjectPart {
                    part_number: i32::try_from(i + 1).ok(),
                    size: Some(i64_of(*size)),
                    ..Default::default()
                })
                .collect();
            let last = page.last().and_then(|p| p.part_number);
            Some(dto::GetObjectAttributesParts {
                total_parts_count: i32::try_from(meta.parts.len()).ok(),
                part_number_marker: Some(marker),
                next_part_number_marker: last,
                max_parts: Some(max),
                is_truncated: Some(after.saturating_add(page.len()) < meta.parts.len()),
                parts: Some(page),
            })
        } else {
            None
        };
        let sums = &meta.sums;
        let checksum =
            (wants(dto::ObjectAttributes::CHECKSUM) && *sums != Sums::default()).then(|| dto::Checksum {
                checksum_crc32: sums.crc32.clone(),
                checksum_crc32c: sums.crc32c.clone(),
                checksum_sha1: sums.sha1.clone(),
                checksum_sha256: sums.sha256.clone(),
                checksum_crc64nvme: sums.crc64nvme.clone(),
                ..Default::default()
            });
        Ok(S3Response::new(dto::GetObjectAttributesOutput {
            e_tag: wants(dto::ObjectAttributes::ETAG).then(|| ETag::Strong(meta.etag.clone())),
            object_size: wants(dto::ObjectAttributes::OBJECT_SIZE).then(|| i64_of(meta.size)),
            storage_class: wants(dto::ObjectAttributes::STORAGE_CLASS)
                .then(|| dto::StorageClass::from_static(dto::StorageClass::STANDARD)),
            last_modified: Some(timestamp(meta.modified_ms)),
            object_parts,
            checksum,
            ..Default::default()
        }))
    }

    async fn delete_object(
        &self,
        req: S3Request<dto::DeleteObjectInput>,
    ) -> S3Result<S3Response<dto::DeleteObjectOutput>> {
        let path = self.object_path(&req.input.bucket, &req.input.key).await?;
        match tokio::fs::remove_file(&path).await {
            Ok(()) => {}
            Err(e) if io_kind(&e) == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(internal("deleting an object", e)),
        }
        Ok(S3Response::new(dto::DeleteObjectOutput::default()))
    }

    async fn delete_objects(
        &self,
        req: S3Request<dto::DeleteObjectsInput>,
    ) -> S3Result<S3Response<dto::DeleteObjectsOutput>> {
        let input = req.input;
        let dir = self.existing_bucket(&input.bucket).await?;
        if input.delete.objects.len() > 1000 {
            return Err(s3_error!(
                MalformedXML,
                "DeleteObjects takes at most 1000 keys per request"
            ));
        }
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for obj in input.delete.objects {
            let r = match check_key(&obj.key) {
                Err(e) => Err(e),
                Ok(()) => match tokio::fs::remove_file(dir.join(Self::file_name(&obj.key))).await {
                    Ok(()) => Ok(()),
                    Err(e) if io_kind(&e) == std::io::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(internal("deleting an object", e)),
                },
            };
            match r {
                Ok(()) => deleted.push(dto::DeletedObject {
                    key: Some(obj.key),
                    ..Default::default()
                }),
                Err(e) => errors.push(dto::Error {
                    key: Some(obj.key),
                    code: Some(e.code().as_str().to_owned()),
                    message: e.message().map(str::to_owned),
                    ..Default::default()
                }),
            }
        }
        Ok(S3Response::new(dto::DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: (!errors.is_empty()).then_some(errors),
            ..Default::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<dto::ListObjectsV2Input>,
    ) -> S3Result<S3Response<dto::ListObjectsV2Output>> {
        let input = req.input;
        let after_token = match &input.continuation_token {
            Some(t) => Some(
                unhex(t)
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| s3_error!(InvalidArgument, "the continuation token is not valid"))?,
            ),
            None => None,
        };
        let prefix = input.prefix.clone().unwrap_or_default();
        let after = after_token.as_deref().or(input.start_after.as_deref());
        let max = max_keys(input.max_keys)?;
        let delimiter = input.delimiter.filter(|d| !d.is_empty());
        let listing = self
            .list(ListQuery {
                bucket: &input.bucket,
                prefix: &prefix,
                delimiter: delimiter.as_deref(),
                after,
                max,
            })
            .await?;
        let url = wants_url(input.encoding_type.as_ref());
        // The owner only when asked for (fetch-owner=true), as S3 does in v2.
        let owner = match input.fetch_owner {
            Some(true) => Some(self.bucket_owner(&input.bucket, &req.credentials).await),
            _ => None,
        };
        let contents = listing.contents(url, owner.as_ref());
        let common = listing.common_prefixes(url);
        let count = contents.len() + common.len();
        Ok(S3Response::new(dto::ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: Some(encode_key(&prefix, url)),
            delimiter: delimiter.map(|d| encode_key(&d, url)),
            max_keys: Some(i32::try_from(max).unwrap_or(1000)),
            key_count: Some(i32::try_from(count).unwrap_or(i32::MAX)),
            is_truncated: Some(listing.truncated),
            continuation_token: input.continuation_token,
            next_continuation_token: listing.next.as_deref().map(|k| hex(k.as_bytes())),
            start_after: input.start_after,
            encoding_type: input.encoding_type,
            contents: Some(contents),
            common_prefixes: (!common.is_empty()).then_some(common),
            ..Default::default()
        }))
    }

    async fn list_objects(
        &self,
        req: S3Request<dto::ListObjectsInput>,
    ) -> S3Result<S3Response<dto::ListObjectsOutput>> {
        let input = req.input;
        let prefix = input.prefix.clone().unwrap_or_default();
        let max = max_keys(input.max_keys)?;
        let delimiter = input.delimiter.filter(|d| !d.is_empty());
        let marker = input.marker.filter(|m| !m.is_empty());
        let listing = self
            .list(ListQuery {
                bucket: &input.bucket,
                prefix: &prefix,
                delimiter: delimiter.as_deref(),
                after: marker.as_deref(),
                max,
            })
            .await?;
        let url = wants_url(input.encoding_type.as_ref());
        let common = listing.common_prefixes(url);
        // v1 always names each object's owner, as S3 does.
        let owner = self.bucket_owner(&input.bucket, &req.credentials).await;
        Ok(S3Response::new(dto::ListObjectsOutput {
            name: Some(input.bucket),
            prefix: Some(encode_key(&prefix, url)),
            delimiter: delimiter.as_deref().map(|d| encode_key(d, url)),
            // S3 always echoes the marker, empty when none was given.
            marker: Some(marker.as_deref().map(|m| encode_key(m, url)).unwrap_or_default()),
            max_keys: Some(i32::try_from(max).unwrap_or(1000)),
            is_truncated: Some(listing.truncated),
            // S3 sends NextMarker only with a delimiter; without one the
            // client continues from the last key.
            next_marker: listing
                .next
                .as_deref()
                .filter(|_| delimiter.is_some())
                .map(|k| encode_key(k, url)),
            encoding_type: input.encoding_type,
            contents: Some(listing.contents(url, Some(&owner))),
            common_prefixes: (!common.is_empty()).then_some(common),
            ..Default::default()
        }))
    }

    async fn copy_object(
        &self,
        req: S3Request<dto::CopyObjectInput>,
    ) -> S3Result<S3Response<dto::CopyObjectOutput>> {
        let input = req.input;
        let dto::CopySource::Bucket {
            bucket: src_bucket,
            key: src_key,
            ..
        } = &input.copy_source
        else {
            return Err(s3_error!(
                NotImplemented,
                "only bucket/key copy sources are supported"
            ));
        };
        let src = self.object_path(src_bucket, src_key).await?;
        let dest = self.object_path(&input.bucket, &input.key).await?;
        let replace = input
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == dto::MetadataDirective::REPLACE);
        if src == dest && !replace {
            return Err(s3_error!(
                InvalidRequest,
                "copying an object onto itself needs the REPLACE metadata directive"
            ));
        }
        let Stored { meta, file } = Self::read_if(&src, read_conditions!(copy_source input), true).await?;
        if meta.size > self.limits.max_object_size {
            return Err(s3_error!(EntityTooLarge));
        }
        let mut tmp = self.temp().await?;
        let mut reader = file;
        reader
            .seek(SeekFrom::Start(0))
            .await
            .map_err(|e| internal("reading the copy source", e))?;
        let mut data = reader.take(meta.size);
        let mut md5 = Md5::new();
        let mut buf = vec![0u8; 256 << 10];
        let mut copied = 0u64;
        loop {
            let n = data
                .read(&mut buf)
                .await
                .map_err(|e| internal("reading the copy source", e))?;
            if n == 0 {
                break;
            }
            md5.update(&buf[..n]);
            tmp.out
                .write_all(&buf[..n])
                .await
                .map_err(|e| internal("writing the copy", e))?;
            copied += n as u64;
        }
        if copied != meta.size {
            return Err(internal("copying", "the source changed during the copy"));
        }
        let attrs = if replace { attrs_of!(input) } else { meta.attrs };
        let new = Meta {
            key: input.key,
            size: copied,
            etag: if meta.parts.is_empty() {
                meta.etag
            } else {
                hex(&md5.finalize())
            },
            modified_ms: now_ms(),
            attrs,
            sums: meta.sums,
            parts: Vec::new(),
            upload_id: None,
        };
        self.finish(tmp, &new, &dest).await?;
        Ok(S3Response::new(dto::CopyObjectOutput {
            copy_object_result: Some(dto::CopyObjectResult {
                e_tag: Some(ETag::Strong(new.etag)),
                last_modified: Some(timestamp(new.modified_ms)),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<dto::CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::CreateMultipartUploadOutput>> {
        let input = req.input;
        check_key(&input.key)?;
        self.existing_bucket(&input.bucket).await?;
        self.sweep_stale_uploads().await;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let dir = self.upload_dir(&id)?;
        tokio::fs::create_dir(&dir)
            .await
            .map_err(|e| internal("creating an upload", e))?;
        let up = Upload {
            bucket: input.bucket.clone(),
            key: input.key.clone(),
            owner: req.credentials.map(|c| c.access_key),
            attrs: attrs_of!(input),
            initiated_ms: now_ms(),
        };
        let json = serde_json::to_vec(&up).map_err(|e| internal("encoding an upload", e))?;
        tokio::fs::write(dir.join("upload.json"), json)
            .await
            .map_err(|e| internal("writing an upload", e))?;
        Ok(S3Response::new(dto::CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(id),
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<dto::UploadPartInput>,
    ) -> S3Result<S3Response<dto::UploadPartOutput>> {
        let input = req.input;
        check_key(&input.key)?;
        if !(1..=10_000).contains(&input.part_number) {
            return Err(s3_error!(InvalidArgument, "part numbers run from 1 to 10000"));
        }
        let owner = req.credentials.as_ref().map(|c| c.access_key.as_str());
        let (dir, _) = self
            .load_upload(&input.upload_id, &input.bucket, &input.key, owner)
            .await?;
        let mut expected = expected_of!(input, req);
        let (tmp, size, md5, computed) = self
            .receive(
                input.body,
                input.content_length,
                &mut expected,
                req.trailing_headers,
            )
            .await?;
        let meta = Meta {
            key: String::new(),
            size,
            etag: hex(&md5),
            modified_ms: now_ms(),
            attrs: Attrs::default(),
            sums: computed,
            parts: Vec::new(),
            upload_id: None,
        };
        // The upload may have been completed or aborted meanwhile: the
        // rename then fails and nothing is left behind.
        self.finish(tmp, &meta, &dir.join(format!("part-{:05}", input.part_number)))
            .await
            .map_err(|_| s3_error!(NoSuchUpload))?;
        Ok(S3Response::new(dto::UploadPartOutput {
            e_tag: Some(ETag::Strong(meta.etag)),
            checksum_crc32: meta.sums.crc32,
            checksum_crc32c: meta.sums.crc32c,
            checksum_sha1: meta.sums.sha1,
            checksum_sha256: meta.sums.sha256,
            checksum_crc64nvme: meta.sums.crc64nvme,
            ..Default::default()
        }))
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<dto::UploadPartCopyInput>,
    ) -> S3Result<S3Response<dto::UploadPartCopyOutput>> {
        let input = req.input;
        check_key(&input.key)?;
        if !(1..=10_000).contains(&input.part_number) {
            return Err(s3_error!(InvalidArgument, "part numbers run from 1 to 10000"));
        }
        let dto::CopySource::Bucket {
            bucket: src_bucket,
            key: src_key,
            ..
        } = &input.copy_source
        else {
            return Err(s3_error!(
                NotImplemented,
                "only bucket/key copy sources are supported"
            ));
        };
        let owner = req.credentials.as_ref().map(|c| c.access_key.as_str());
        let (dir, _) = self
            .load_upload(&input.upload_id, &input.bucket, &input.key, owner)
            .await?;
        let src = self.object_path(src_bucket, src_key).await?;
        let Stored { meta, file } = Self::read_if(&src, read_conditions!(copy_source input), true).await?;
        let (start, len) = match input.copy_source_range.as_deref() {
            None => (0, meta.size),
            Some(r) => copy_source_range(r, meta.size)?,
        };
        if len > self.limits.max_object_size {
            return Err(s3_error!(EntityTooLarge));
        }
        let mut tmp = self.temp().await?;
        let mut reader = file;
        reader
            .seek(SeekFrom::Start(start))
            .await
            .map_err(|e| internal("reading the copy source", e))?;
        let mut data = reader.take(len);
        let mut md5 = Md5::new();
        let mut buf = vec![0u8; 256 << 10];
        let mut copied = 0u64;
        loop {
            let n = data
                .read(&mut buf)
                .await
                .map_err(|e| internal("reading the copy source", e))?;
            if n == 0 {
                break;
            }
            md5.update(&buf[..n]);
            tmp.out
                .write_all(&buf[..n])
                .await
                .map_err(|e| internal("writing the part", e))?;
            copied += n as u64;
        }
        if copied != len {
            return Err(internal("copying a part", "the source changed during the copy"));
        }
        let part = Meta {
            key: String::new(),
            size: copied,
            etag: hex(&md5.finalize()),
            modified_ms: now_ms(),
            attrs: Attrs::default(),
            sums: Sums::default(),
            parts: Vec::new(),
            upload_id: None,
        };
        // As for UploadPart: an upload completed or aborted meanwhile makes
        // the rename fail, and nothing is left behind.
        self.finish(tmp, &part, &dir.join(format!("part-{:05}", input.part_number)))
            .await
            .map_err(|_| s3_error!(NoSuchUpload))?;
        Ok(S3Response::new(dto::UploadPartCopyOutput {
            copy_part_result: Some(dto::CopyPartResult {
                e_tag: Some(ETag::Strong(part.etag)),
                last_modified: Some(timestamp(part.modified_ms)),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn list_parts(
        &self,
        req: S3Request<dto::ListPartsInput>,
    ) -> S3Result<S3Response<dto::ListPartsOutput>> {
        let input = req.input;
        let owner = req.credentials.as_ref().map(|c| c.access_key.as_str());
        let (dir, _) = self
            .load_upload(&input.upload_id, &input.bucket, &input.key, owner)
            .await?;
        let marker = input.part_number_marker.unwrap_or(0);
        let max = input
            .max_parts
            .map_or(1000, |m| usize::try_from(m).unwrap_or(0).min(1000));
        let all: Vec<_> = Self::list_parts_in(&dir)
            .await?
            .into_iter()
            .filter(|p| p.0 > marker)
            .collect();
        let truncated = all.len() > max;
        let parts: Vec<dto::Part> = all
            .into_iter()
            .take(max)
            .map(|(n, m, modified)| dto::Part {
                part_number: Some(n),
                size: Some(i64_of(m.size)),
                e_tag: Some(ETag::Strong(m.etag)),
                last_modified: Some(Timestamp::from(modified)),
                checksum_crc32: m.sums.crc32,
                checksum_crc32c: m.sums.crc32c,
                checksum_sha1: m.sums.sha1,
                checksum_sha256: m.sums.sha256,
                checksum_crc64nvme: m.sums.crc64nvme,
            })
            .collect();
        Ok(S3Response::new(dto::ListPartsOutput {
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
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<dto::CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::CompleteMultipartUploadOutput>> {
        let input = req.input;
        let owner = req.credentials.as_ref().map(|c| c.access_key.as_str());
        let dest = self.object_path(&input.bucket, &input.key).await?;
        let (dir, up) = match self
            .load_upload(&input.upload_id, &input.bucket, &input.key, owner)
            .await
        {
            Ok(u) => u,
            Err(e) if *e.code() == S3ErrorCode::NoSuchUpload => {
                // A retry whose first answer was lost: the upload is gone
                // because it made the object that is there now.
                if let Some(st) = Self::read_stored(&dest).await?
                    && st.meta.upload_id.as_deref() == Some(input.upload_id.as_str())
                {
                    return Ok(S3Response::new(dto::CompleteMultipartUploadOutput {
                        bucket: Some(input.bucket.clone()),
                        key: Some(input.key.clone()),
                        location: Some(format!("/{}/{}", input.bucket, input.key)),
                        e_tag: Some(ETag::Strong(st.meta.etag)),
                        ..Default::default()
                    }));
                }
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let cond = WriteCondition::of(input.if_match.clone(), input.if_none_match.clone())?;
        let wanted = input
            .multipart_upload
            .and_then(|m| m.parts)
            .filter(|p| !p.is_empty())
            .ok_or_else(|| s3_error!(MalformedXML, "the request lists no parts"))?;
        let stored = Self::list_parts_in(&dir).await?;
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
        let total: u64 = chosen.iter().map(|(_, m)| m.size).sum();
        if total > self.limits.max_object_size.saturating_mul(10_000) {
            return Err(s3_error!(EntityTooLarge));
        }
        let mut tmp = self.temp().await?;
        let mut etag_md5 = Md5::new();
        let mut buf = vec![0u8; 256 << 10];
        for (n, meta) in &chosen {
            let Some(st) = Self::read_stored(&dir.join(format!("part-{n:05}"))).await? else {
                return Err(S3Error::with_message(
                    S3ErrorCode::InvalidPart,
                    format!("part {n} vanished"),
                ));
            };
            let md5 = unhex(&meta.etag).ok_or_else(|| internal("a part's ETag", "not hex"))?;
            etag_md5.update(&md5);
            let mut file = st.file;
            file.seek(SeekFrom::Start(0))
                .await
                .map_err(|e| internal("reading a part", e))?;
            let mut data = file.take(meta.size);
            loop {
                let k = data
                    .read(&mut buf)
                    .await
                    .map_err(|e| internal("reading a part", e))?;
                if k == 0 {
                    break;
                }
                tmp.out
                    .write_all(&buf[..k])
                    .await
                    .map_err(|e| internal("writing an object", e))?;
            }
        }
        let meta = Meta {
            key: input.key.clone(),
            size: total,
            etag: format!("{}-{}", hex(&etag_md5.finalize()), chosen.len()),
            modified_ms: now_ms(),
            attrs: up.attrs,
            sums: Sums::default(),
            parts: chosen.iter().map(|(_, m)| m.size).collect(),
            upload_id: Some(input.upload_id.clone()),
        };
        self.finish_if(tmp, &meta, &dest, cond).await?;
        if let Err(e) = tokio::fs::remove_dir_all(&dir).await {
            tracing::warn!("removing the finished upload {}: {e}", dir.display());
        }
        Ok(S3Response::new(dto::CompleteMultipartUploadOutput {
            bucket: Some(input.bucket.clone()),
            key: Some(input.key.clone()),
            location: Some(format!("/{}/{}", input.bucket, input.key)),
            e_tag: Some(ETag::Strong(meta.etag)),
            ..Default::default()
        }))
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<dto::ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<dto::ListMultipartUploadsOutput>> {
        self.sweep_stale_uploads().await;
        Ok(S3Response::new(self.list_uploads(req.input).await?))
    }

    async fn list_object_versions(
        &self,
        req: S3Request<dto::ListObjectVersionsInput>,
    ) -> S3Result<S3Response<dto::ListObjectVersionsOutput>> {
        // Buckets are not versioned: every object is its only version, the
        // null version, and there are no delete markers.
        let input = req.input;
        let prefix = input.prefix.clone().unwrap_or_default();
        let max = max_keys(input.max_keys)?;
        let delimiter = input.delimiter.filter(|d| !d.is_empty());
        let marker = input.key_marker.filter(|m| !m.is_empty());
        let listing = self
            .list(ListQuery {
                bucket: &input.bucket,
                prefix: &prefix,
                delimiter: delimiter.as_deref(),
                after: marker.as_deref(),
                max,
            })
            .await?;
        let url = wants_url(input.encoding_type.as_ref());
        let versions = listing
            .contents(url, None)
            .into_iter()
            .map(|o| dto::ObjectVersion {
                key: o.key,
                size: o.size,
                e_tag: o.e_tag,
                last_modified: o.last_modified,
                is_latest: Some(true),
                version_id: Some("null".into()),
                storage_class: Some(dto::ObjectVersionStorageClass::from_static(
                    dto::ObjectVersionStorageClass::STANDARD,
                )),
                ..Default::default()
            })
            .collect();
        let common = listing.common_prefixes(url);
        Ok(S3Response::new(dto::ListObjectVersionsOutput {
            name: Some(input.bucket),
            prefix: Some(encode_key(&prefix, url)),
            delimiter: delimiter.map(|d| encode_key(&d, url)),
            key_marker: Some(marker.map(|m| encode_key(&m, url)).unwrap_or_default()),
            version_id_marker: Some(input.version_id_marker.unwrap_or_default()),
            max_keys: Some(i32::try_from(max).unwrap_or(1000)),
            is_truncated: Some(listing.truncated),
            next_key_marker: listing.next.as_deref().map(|k| encode_key(k, url)),
            next_version_id_marker: listing.truncated.then(|| "null".to_owned()),
            encoding_type: input.encoding_type,
            versions: Some(versions),
            common_prefixes: (!common.is_empty()).then_some(common),
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<dto::AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::AbortMultipartUploadOutput>> {
        let input = req.input;
        let owner = req.credentials.as_ref().map(|c| c.access_key.as_str());
        let (dir, _) = self
            .load_upload(&input.upload_id, &input.bucket, &input.key, owner)
            .await?;
        tokio::fs::remove_dir_all(&dir)
            .await
            .map_err(|e| internal("aborting an upload", e))?;
        Ok(S3Response::new(dto::AbortMultipartUploadOutput::default()))
    }
}

/// UploadPartCopy's `x-amz-copy-source-range`: exactly `bytes=FIRST-LAST`
/// (both given, FIRST <= LAST; `400 InvalidArgument` otherwise), inside an
/// object of `size` bytes (`416 InvalidRange` otherwise). Returns the start
/// and the length.
fn copy_source_range(v: &str, size: u64) -> S3Result<(u64, u64)> {
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
