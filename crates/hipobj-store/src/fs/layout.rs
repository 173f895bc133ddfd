//! The store on disk: where a bucket, an object or an upload lives, the
//! temporary files every write goes through, and the trailer that makes an
//! object file self-describing (sealing it on write, reading it back).

use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use s3s::crypto::{Checksum as _, Sha256};
use s3s::{S3Result, s3_error};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt, BufWriter};

use super::object::Meta;
use super::sse::{MasterKey, Protection, Sealer, Unlocked};
use super::{FsStore, hex, internal, io_kind};
use crate::disk::{Durability, nonblocking as ndisk};
use crate::file_range::{FileRange, WantsFileRange};
use crate::names::{check_bucket, check_key};

const MAGIC: &[u8; 4] = b"HOB1";
const TRAILER: u64 = 8;
/// Keys up to this many bytes are stored under their hex encoding.
const HEX_KEY_MAX: usize = 100;

/// A file in `.tmp` that is removed unless it is committed.
pub(super) struct TempFile {
    path: PathBuf,
    out: BufWriter<tokio::fs::File>,
    done: bool,
    /// Encrypts what [`TempFile::put`] writes (an encrypted object).
    sealer: Option<Sealer>,
    /// Ciphertext on its way to `out`.
    sealed: Vec<u8>,
}

impl TempFile {
    /// Encrypts the data written from now on with `sealer`.
    pub(super) fn encrypt_with(&mut self, sealer: Option<Sealer>) {
        self.sealer = sealer;
    }

    /// Writes object data: as it is, or encrypted.
    pub(super) async fn put(&mut self, data: &[u8]) -> std::io::Result<()> {
        match &mut self.sealer {
            None => self.out.write_all(data).await,
            Some(s) => {
                self.sealed.clear();
                s.push(data, &mut self.sealed)?;
                self.out.write_all(&self.sealed).await
            }
        }
    }

    /// Ends the data: seals the last chunk of an encrypted object.
    async fn end_data(&mut self) -> std::io::Result<()> {
        if let Some(s) = self.sealer.take() {
            self.sealed.clear();
            s.finish(&mut self.sealed)?;
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
        tokio::fs::rename(&self.path, dest).await?;
        self.done = true;
        ndisk::sync_parent(dest, Durability::from_sync(sync)).await
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
        unlocked: Option<Unlocked>,
        (start, len): (u64, u64),
        asked: &http::Extensions,
    ) -> S3Result<(PlainStream, Option<FileRange>)> {
        if unlocked.is_none() && asked.get::<WantsFileRange>().is_some() {
            let range = FileRange::new(file.into_std().await, start, len);
            return Ok((Box::pin(futures::stream::empty()), Some(range)));
        }
        Ok((Self::plain(file, unlocked, start, len).await?, None))
    }

    /// The `len` plaintext bytes at `start` of the object in `file`: the
    /// file's own bytes, or decrypted with `unlocked`.
    pub(super) async fn plain(
        mut file: tokio::fs::File,
        unlocked: Option<Unlocked>,
        start: u64,
        len: u64,
    ) -> S3Result<PlainStream> {
        Ok(match unlocked {
            Some(u) => Box::pin(u.stream(file, start, len)),
            None => {
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

impl FsStore {
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
        if meta.stored_len() != data_len {
            return Err(bad("data length differs from the metadata"));
        }
        if meta
            .encryption
            .as_ref()
            .is_some_and(|e| e.plain_len() != meta.size)
        {
            return Err(bad("the encrypted segments do not add up to the object's size"));
        }
        Ok(meta)
    }

    /// Appends the trailer (the file is then complete, not yet visible).
    pub(super) async fn seal(&self, mut tmp: TempFile, meta: &Meta) -> S3Result<TempFile> {
        let json = serde_json::to_vec(meta).map_err(|e| internal("encoding metadata", e))?;
        let jlen = u32::try_from(json.len()).map_err(|e| internal("metadata too long", e))?;
        let mut trailer = json;
        trailer.extend_from_slice(&jlen.to_le_bytes());
        trailer.extend_from_slice(MAGIC);
        tmp.end_data()
            .await
            .map_err(|e| internal("writing an object", e))?;
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
            .commit(dest, self.limits.sync)
            .await
            .map_err(|e| internal("committing an object", e))
    }
}

/// The file of part `n` in the upload directory `dir`.
pub(super) fn part_file(dir: &Path, n: i32) -> PathBuf {
    dir.join(format!("part-{n:05}"))
}
