//! The store on disk: where a bucket, an object or an upload lives, the
//! temporary files every write goes through, and the trailer that makes an
//! object file self-describing (sealing it on write, reading it back).

use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt as _;
use s3s::crypto::{Checksum as _, Sha256};
use s3s::{S3Result, s3_error};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt, BufWriter};

use super::errors::{internal, io_kind};
use super::object::Meta;
use super::sse::{MasterKey, Protection, Sealer, Unlocked};
use super::text::hex;
use crate::blocks::{BlockHasher, Checker};
use crate::disk::{Durability, nonblocking as ndisk};
use crate::file_range::{FileRange, WantsFileRange};
use crate::names::{check_bucket, check_key};

const MAGIC: &[u8; 4] = b"HOB1";
const TRAILER: u64 = 8;
/// Keys up to this many bytes are stored under their hex encoding.
const HEX_KEY_MAX: usize = 100;

/// The folder of a key's versions is its object file's name after this.
pub(super) const FOLDER: &str = "v-";

/// A file in `.tmp` that is removed unless it is committed.
pub(super) struct TempFile {
    path: PathBuf,
    out: BufWriter<tokio::fs::File>,
    done: bool,
    /// Encrypts what [`TempFile::put`] writes (an encrypted object).
    sealer: Option<Sealer>,
    /// Ciphertext on its way to `out`.
    sealed: Vec<u8>,
    /// The block sums of the data written so far (as stored).
    blocks: BlockHasher,
}

impl TempFile {
    /// Encrypts the data written from now on with `sealer`.
    pub(super) fn encrypt_with(&mut self, sealer: Option<Sealer>) {
        self.sealer = sealer;
    }

    /// Writes object data: as it is, or encrypted.
    pub(super) async fn put(&mut self, data: &[u8]) -> std::io::Result<()> {
        match &mut self.sealer {
            None => {
                self.blocks.update(data);
                self.out.write_all(data).await
            }
            Some(s) => {
                self.sealed.clear();
                s.push(data, &mut self.sealed)?;
                self.blocks.update(&self.sealed);
                self.out.write_all(&self.sealed).await
            }
        }
    }

    /// Ends the data: seals the last chunk of an encrypted object.
    async fn end_data(&mut self) -> std::io::Result<()> {
        if let Some(s) = self.sealer.take() {
            self.sealed.clear();
            s.finish(&mut self.sealed)?;
            self.blocks.update(&self.sealed);
            self.out.write_all(&self.sealed).await?;
        }
        Ok(())
    }

    /// Makes the file visible at `dest`, replacing what is there: data
    /// synced, renamed, then `dest`'s folder synced (`crate::disk`).
    pub(super) async fn commit(mut self, dest: &Path, sync: bool) -> std::io::Result<()> {
        self.out.flush().await?;
        if sync {
            self.out.get_ref().sync_data().await?;
        }
        ndisk::rename(&self.path, dest, Durability::from_sync(sync)).await?;
        self.done = true;
        Ok(())
    }

    /// Commits only if nothing is at `dest` yet: a hard link fails
    /// atomically when the name exists, so two racing creators cannot both
    /// win.
    pub(super) async fn commit_new(mut self, dest: &Path, sync: bool) -> std::io::Result<()> {
        self.out.flush().await?;
        if sync {
            self.out.get_ref().sync_data().await?;
        }
        // Drop removes the temporary name; the object lives on at `dest`.
        ndisk::hard_link(&self.path, dest, Durability::from_sync(sync)).await
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
pub(super) struct Stored {
    pub(super) meta: Meta,
    pub(super) file: tokio::fs::File,
}

/// An object's plaintext, as a read streams it.
pub(super) type PlainStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = std::io::Result<bytes::Bytes>> + Send + Sync + 'static>>;

impl Stored {
    /// Whether a request naming `asked` may read the object, and its data
    /// keys if it is encrypted (`None`: it is not).
    pub(super) fn unlock(&self, asked: &Protection, master: &MasterKey) -> S3Result<Option<Unlocked>> {
        match &self.meta.encryption {
            None => asked.check_plain().map(|()| None),
            Some(e) => e.unlock(asked, master).map(Some),
        }
    }

    /// A GET's body and, for a plain object whose request asked for it
    /// with [`WantsFileRange`] (the RDMA mover), the same bytes as a
    /// [`FileRange`] of `file` instead, with an empty body: that reader
    /// takes every byte from the file, so nothing seeks or reads for a
    /// stream it would drop.
    pub(super) async fn body_of(
        file: tokio::fs::File,
        (unlocked, checker): (Option<Unlocked>, Option<Checker>),
        (start, len): (u64, u64),
        asked: &http::Extensions,
    ) -> S3Result<(PlainStream, Option<FileRange>)> {
        if unlocked.is_none() && asked.get::<WantsFileRange>().is_some() {
            let range = FileRange::new(file.into_std().await, start, len).checked(checker);
            return Ok((Box::pin(futures::stream::empty()), Some(range)));
        }
        let mut body = Self::plain(file, (unlocked, checker), start, len).await?;
        // The first chunk is read (and checked) before the answer, so that
        // rotten bytes at the start of a read, which is all of a small
        // object, are a clean 500 rather than a 200 cut short.
        let first = match body.next().await {
            None => return Ok((Box::pin(futures::stream::empty()), None)),
            Some(Ok(chunk)) => chunk,
            Some(Err(e)) => return Err(internal("reading an object", e)),
        };
        Ok((
            Box::pin(futures::stream::once(async { Ok(first) }).chain(body)),
            None,
        ))
    }

    /// The block checker of the object's stored bytes (`None`: written
    /// before block sums existed); sums that do not fit the file are
    /// damage, and an error.
    pub(super) fn checker(meta: &Meta) -> S3Result<Option<Checker>> {
        meta.blocks
            .as_ref()
            .map(|b| {
                b.checker(meta.stored_len())
                    .map(|c| c.labelled(&meta.key))
                    .map_err(|e| {
                        crate::damage::checksum_mismatch();
                        internal(&format!("reading the object {:?}", meta.key), e)
                    })
            })
            .transpose()
    }

    /// The `len` plaintext bytes at `start` of the object in `file`: the
    /// file's own bytes, each block checked with `checker` where the
    /// object has sums, or decrypted with `unlocked` (the cipher
    /// authenticates every chunk).
    pub(super) async fn plain(
        mut file: tokio::fs::File,
        (unlocked, checker): (Option<Unlocked>, Option<Checker>),
        start: u64,
        len: u64,
    ) -> S3Result<PlainStream> {
        Ok(match (unlocked, checker) {
            (Some(u), _) => Box::pin(u.stream(file, start, len)),
            (None, Some(c)) => checked_stream(file, c, start, len),
            (None, None) => {
                file.seek(SeekFrom::Start(start))
                    .await
                    .map_err(|e| internal("reading an object", e))?;
                Box::pin(tokio_util::io::ReaderStream::with_capacity(
                    file.take(len),
                    256 << 10,
                ))
            }
        })
    }
}

/// The store's disk layer: where each thing lives under the data
/// directory, and the temporary files that become objects, parts and
/// settings when they are committed.
#[derive(Debug)]
pub(super) struct Disk {
    /// The data directory.
    pub(super) root: PathBuf,
    /// Makes temporary file names unique within this process.
    counter: AtomicU64,
    /// Flush each file to disk before it becomes visible.
    pub(super) sync: bool,
}

impl Disk {
    pub(super) fn new(root: PathBuf, sync: bool) -> Self {
        Self {
            root,
            counter: AtomicU64::new(0),
            sync,
        }
    }

    /// Whether changes are synced before they are acknowledged.
    pub(super) fn durability(&self) -> Durability {
        Durability::from_sync(self.sync)
    }

    pub(super) fn bucket_dir(&self, bucket: &str) -> S3Result<PathBuf> {
        check_bucket(bucket)?;
        Ok(self.root.join(bucket))
    }

    pub(super) fn file_name(key: &str) -> String {
        if key.len() <= HEX_KEY_MAX {
            format!("o-{}", hex(key.as_bytes()))
        } else {
            format!("h-{}", hex(&Sha256::checksum(key.as_bytes())))
        }
    }

    pub(super) async fn existing_bucket(&self, bucket: &str) -> S3Result<PathBuf> {
        let dir = self.bucket_dir(bucket)?;
        match tokio::fs::metadata(&dir).await {
            Ok(m) if m.is_dir() => Ok(dir),
            Ok(_) => Err(s3_error!(NoSuchBucket)),
            Err(e) if io_kind(&e) == std::io::ErrorKind::NotFound => Err(s3_error!(NoSuchBucket)),
            Err(e) => Err(internal("bucket lookup", e)),
        }
    }

    pub(super) async fn object_path(&self, bucket: &str, key: &str) -> S3Result<PathBuf> {
        check_key(key)?;
        Ok(self.existing_bucket(bucket).await?.join(Self::file_name(key)))
    }

    pub(super) fn upload_dir(&self, upload_id: &str) -> S3Result<PathBuf> {
        if upload_id.len() != 32 || !upload_id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(s3_error!(NoSuchUpload));
        }
        Ok(self.root.join(".uploads").join(upload_id))
    }

    /// A name in `.tmp` that nothing else has.
    pub(super) fn temp_path(&self) -> PathBuf {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        self.root
            .join(".tmp")
            .join(format!("{}-{n}", uuid::Uuid::new_v4().simple()))
    }

    pub(super) async fn temp(&self) -> S3Result<TempFile> {
        let path = self.temp_path();
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
            sealer: None,
            sealed: Vec::new(),
            blocks: BlockHasher::default(),
        })
    }

    /// Reads an object file's metadata; `None` if there is no such file.
    pub(super) async fn read_stored(path: &Path) -> S3Result<Option<Stored>> {
        let mut file = match tokio::fs::File::open(path).await {
            Ok(f) => f,
            Err(e) if io_kind(&e) == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(internal("opening an object", e)),
        };
        let meta = Self::read_trailer(&mut file)
            .await
            .map_err(|e| internal(&format!("reading the object file {}", path.display()), e))?;
        Ok(Some(Stored { meta, file }))
    }

    /// Reads an object file for a listing: a file that does not read back
    /// is logged, counted (`crate::damage`) and left out, so that one
    /// damaged object fails only its own reads, never the bucket's
    /// listings.
    pub(super) async fn read_listed(path: &Path) -> Option<Stored> {
        match Self::read_stored(path).await {
            Ok(st) => st,
            Err(_) => {
                crate::damage::skipped_in_listing();
                None
            }
        }
    }

    /// The metadata of object files for a page of a listing, read in one
    /// blocking task rather than a hop to the blocking pool for each step
    /// of each file: `None` for a file that is gone or, logged and counted
    /// as [`Disk::read_listed`] does, does not read back.
    pub(super) async fn read_listed_metas(paths: Vec<PathBuf>) -> S3Result<Vec<Option<Meta>>> {
        tokio::task::spawn_blocking(move || {
            paths
                .iter()
                .map(|p| match read_meta_now(p) {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::error!("fs store: reading the object file {}: {e}", p.display());
                        crate::damage::skipped_in_listing();
                        None
                    }
                })
                .collect()
        })
        .await
        .map_err(|e| internal("reading a page of a listing", e))
    }

    async fn read_trailer(file: &mut tokio::fs::File) -> std::io::Result<Meta> {
        let len = file.metadata().await?.len();
        if len < TRAILER {
            return Err(bad_file("shorter than its trailer"));
        }
        file.seek(SeekFrom::Start(len - TRAILER)).await?;
        let mut t = [0u8; 8];
        file.read_exact(&mut t).await?;
        let (jlen, data_len) = trailer_fields(t, len)?;
        file.seek(SeekFrom::Start(data_len)).await?;
        let mut json = vec![0u8; usize::try_from(jlen).map_err(|_| bad_file("trailer too long"))?];
        file.read_exact(&mut json).await?;
        decode_meta(&json, data_len)
    }

    /// Appends the trailer (the file is then complete, not yet visible).
    pub(super) async fn seal(&self, mut tmp: TempFile, meta: &Meta) -> S3Result<TempFile> {
        tmp.end_data()
            .await
            .map_err(|e| internal("writing an object", e))?;
        let stored = Meta {
            blocks: Some(tmp.blocks.finish()),
            ..meta.clone()
        };
        let json = serde_json::to_vec(&stored).map_err(|e| internal("encoding metadata", e))?;
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
    pub(super) async fn finish(&self, tmp: TempFile, meta: &Meta, dest: &Path) -> S3Result<()> {
        self.seal(tmp, meta)
            .await?
            .commit(dest, self.sync)
            .await
            .map_err(|e| internal("committing an object", e))
    }
}

/// The file of part `n` in the upload directory `dir`.
pub(super) fn part_file(dir: &Path, n: i32) -> PathBuf {
    dir.join(format!("part-{n:05}"))
}

/// Reads `len` stored bytes at `start` of `file` in runs of whole blocks,
/// checks each run against `checker` and yields the asked bytes of it; a
/// run that disagrees ends the stream with an error.
fn checked_stream(file: tokio::fs::File, checker: Checker, start: u64, len: u64) -> PlainStream {
    let end = start.saturating_add(len);
    let (first, _) = checker.covering(start, len);
    let run = 4 * checker.block();
    let state = (file, first, checker);
    Box::pin(futures::stream::try_unfold(
        state,
        move |(mut file, at, checker)| async move {
            if at >= end {
                return Ok(None);
            }
            let (from, n) = checker.covering(at, run.min(end - at));
            let mut buf = vec![0u8; usize::try_from(n).map_err(std::io::Error::other)?];
            file.seek(SeekFrom::Start(from)).await?;
            file.read_exact(&mut buf).await?;
            checker
                .check(from, &buf)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            let lo = usize::try_from(start.max(from) - from).map_err(std::io::Error::other)?;
            let hi = usize::try_from((from + n).min(end) - from).map_err(std::io::Error::other)?;
            let chunk = bytes::Bytes::from(buf).slice(lo..hi);
            Ok(Some((chunk, (file, from + n, checker))))
        },
    ))
}

/// An object file's metadata, read with blocking calls (in a blocking
/// task); `None` if there is no such file.
fn read_meta_now(path: &Path) -> std::io::Result<Option<Meta>> {
    use std::os::unix::fs::FileExt as _;
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    if len < TRAILER {
        return Err(bad_file("shorter than its trailer"));
    }
    let mut t = [0u8; 8];
    file.read_exact_at(&mut t, len - TRAILER)?;
    let (jlen, data_len) = trailer_fields(t, len)?;
    let mut json = vec![0u8; usize::try_from(jlen).map_err(|_| bad_file("trailer too long"))?];
    file.read_exact_at(&mut json, data_len)?;
    decode_meta(&json, data_len).map(Some)
}

fn bad_file(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_owned())
}

/// The trailer's last 8 bytes `t` of a file of `len` bytes: the JSON's
/// length and the data's.
fn trailer_fields(t: [u8; 8], len: u64) -> std::io::Result<(u64, u64)> {
    if &t[4..] != MAGIC {
        return Err(bad_file("no object trailer"));
    }
    let jlen = u64::from(u32::from_le_bytes([t[0], t[1], t[2], t[3]]));
    let data_len = len
        .checked_sub(TRAILER + jlen)
        .ok_or_else(|| bad_file("trailer longer than the file"))?;
    Ok((jlen, data_len))
}

/// The metadata `json` of a file whose data is `data_len` bytes, checked
/// against it.
fn decode_meta(json: &[u8], data_len: u64) -> std::io::Result<Meta> {
    let meta: Meta = serde_json::from_slice(json).map_err(|e| bad_file(&e.to_string()))?;
    if meta.stored_len() != data_len {
        return Err(bad_file("data length differs from the metadata"));
    }
    if meta
        .encryption
        .as_ref()
        .is_some_and(|e| e.plain_len() != meta.size)
    {
        return Err(bad_file(
            "the encrypted segments do not add up to the object's size",
        ));
    }
    Ok(meta)
}

/// Reads a whole object file from memory as the store reads it from disk:
/// the trailer, the metadata, and (where it has them) the block checksums
/// checked against the data. What is wrong, or the object's key and size.
/// For the fuzz target `store_files`, which feeds it what a damaged disk
/// might hold.
pub fn parse_object_file(bytes: &[u8]) -> Result<(String, u64), String> {
    let len = bytes.len() as u64;
    let tail = len.checked_sub(TRAILER).ok_or("shorter than its trailer")?;
    let mut t = [0u8; 8];
    t.copy_from_slice(&bytes[tail as usize..]);
    let (jlen, data_len) = trailer_fields(t, len).map_err(|e| e.to_string())?;
    let json = &bytes[data_len as usize..(data_len + jlen) as usize];
    let meta = decode_meta(json, data_len).map_err(|e| e.to_string())?;
    if let Some(c) = Stored::checker(&meta).map_err(|e| e.to_string())? {
        c.check(0, &bytes[..data_len as usize])
            .map_err(|e| e.to_string())?;
    }
    Ok((meta.key, meta.size))
}
