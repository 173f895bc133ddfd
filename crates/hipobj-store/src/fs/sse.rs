//! Encryption at rest: SSE-S3 (under a key this server holds) and SSE-C
//! (under the client's key, which comes with every request and is never
//! stored; only its MD5 is, to tell the right key from a wrong one).
//!
//! Every object, and every part of a multipart upload, has a data key of
//! its own: 32 random bytes, kept in the object's record only wrapped
//! (AES-256-GCM) under a key-encryption key, the server's master key for
//! SSE-S3, the client's key for SSE-C. The data is AES-256-GCM in chunks of
//! [`CHUNK`] bytes, each followed by its 16-byte tag. A chunk's nonce is its
//! index: a data key seals one stream of chunks and no other, so no nonce
//! repeats under a key. Each chunk's additional data says whether it is
//! the last one, so a file cut at a chunk boundary fails to decrypt rather
//! than reading as a shorter object. A ranged read decrypts only the chunks
//! it touches.
//!
//! An object made by CompleteMultipartUpload keeps its parts' ciphertext
//! as it is: its record lists one segment (a wrapped key and a length) per
//! part. So Complete needs no key, as S3's Complete takes none.
//!
//! What this protects: the files of the data directory (and copies of
//! them) without the master key reveal no object bytes, and an SSE-C
//! object's bytes need the client's key whatever else is stolen. The
//! object's record (key name, size, metadata, checksums) is not encrypted,
//! as in S3; an SSE-S3 object's ETag is the MD5 of its bytes, as in S3, and
//! an SSE-C object's ETag is an HMAC of that MD5 under the client's key,
//! since an MD5 of the bytes would let whoever reads the record test
//! guesses of them.

use std::io::{self, Write as _};
use std::path::Path;
use std::sync::Arc;

use crate::md5::Md5;
use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::rand::{SecureRandom as _, SystemRandom};
use bytes::Bytes;
use futures::Stream;
use s3s::dto;
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

/// Plaintext bytes per chunk.
pub(super) const CHUNK: usize = 64 << 10;
const TAG: usize = 16;
const KEY: usize = 32;
/// Additional data of a wrapped data key and of a chunk (with one byte
/// more: 1 for the last chunk, else 0).
const KEY_AAD: &[u8] = b"hipobj sse data key v1";
const CHUNK_AAD: &[u8] = b"hipobj sse chunk v1";
/// The only algorithm S3 names for SSE-S3 and SSE-C.
const AES256: &str = "AES256";

fn random<const N: usize>() -> S3Result<[u8; N]> {
    let mut b = [0u8; N];
    SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| S3Error::with_message(S3ErrorCode::InternalError, "no random bytes"))?;
    Ok(b)
}

fn aead_key(bytes: &[u8; KEY]) -> S3Result<LessSafeKey> {
    UnboundKey::new(&AES_256_GCM, bytes)
        .map(LessSafeKey::new)
        .map_err(|_| S3Error::with_message(S3ErrorCode::InternalError, "an AES-256-GCM key was refused"))
}

/// The server's SSE-S3 key: the key-encryption key of every SSE-S3 object.
#[derive(Clone)]
pub(super) struct MasterKey(Arc<[u8; KEY]>);

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

impl MasterKey {
    /// Reads the key file (32 bytes, or 64 hex digits and an optional line
    /// end), or creates it with a fresh random key, readable by its owner
    /// only, if there is no such file. Creating is atomic: two servers
    /// starting at once end up with the same key.
    pub(super) fn load_or_create(path: &Path) -> io::Result<Self> {
        match std::fs::read(path) {
            Ok(b) => Self::parse(&b).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{}: an SSE-S3 key file holds 32 bytes or 64 hex digits",
                        path.display()
                    ),
                )
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let key: [u8; KEY] =
                    random().map_err(|_| io::Error::other("no random bytes for the SSE-S3 key"))?;
                if let Some(dir) = path.parent() {
                    crate::disk::create_dir_all(dir, crate::disk::Durability::Synced)?;
                }
                let tmp = path.with_extension(format!("new-{}", std::process::id()));
                let mut f = std::fs::OpenOptions::new();
                f.write(true).create_new(true);
                #[cfg(unix)]
                std::os::unix::fs::OpenOptionsExt::mode(&mut f, 0o600);
                let mut file = f.open(&tmp)?;
                let written = file.write_all(&key).and_then(|()| file.sync_all());
                let linked = written
                    .and_then(|()| crate::disk::hard_link(&tmp, path, crate::disk::Durability::Synced));
                let _ = crate::disk::remove_file(&tmp, crate::disk::Durability::Synced);
                match linked {
                    Ok(()) => {
                        tracing::warn!(
                            path = %path.display(),
                            "created a new SSE-S3 master key; keep a copy apart from the data: without it no SSE-S3 object can be read"
                        );
                        Ok(Self(Arc::new(key)))
                    }
                    // Another server made it first: use that one.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Self::load_or_create(path),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    fn parse(b: &[u8]) -> Option<Self> {
        if let Ok(raw) = <[u8; KEY]>::try_from(b) {
            return Some(Self(Arc::new(raw)));
        }
        let text = std::str::from_utf8(b).ok()?.trim_end();
        let bytes = super::text::unhex(text)?;
        <[u8; KEY]>::try_from(bytes.as_slice())
            .ok()
            .map(|k| Self(Arc::new(k)))
    }
}

/// The SSE-C headers of a request (or its copy-source variants).
#[derive(Clone, Copy, Default)]
pub(super) struct CustomerHeaders<'a> {
    pub(super) algorithm: Option<&'a str>,
    pub(super) key: Option<&'a str>,
    pub(super) key_md5: Option<&'a str>,
}

/// The SSE-C headers of an input (`x-amz-server-side-encryption-customer-*`);
/// with `copy_source`, those naming a copy source's key.
macro_rules! customer_headers {
    ($input:ident) => {
        $crate::fs::sse::CustomerHeaders {
            algorithm: $input.sse_customer_algorithm.as_deref(),
            key: $input.sse_customer_key.as_deref(),
            key_md5: $input.sse_customer_key_md5.as_deref(),
        }
    };
    (copy_source $input:ident) => {
        $crate::fs::sse::CustomerHeaders {
            algorithm: $input.copy_source_sse_customer_algorithm.as_deref(),
            key: $input.copy_source_sse_customer_key.as_deref(),
            key_md5: $input.copy_source_sse_customer_key_md5.as_deref(),
        }
    };
}

pub(super) use customer_headers;

/// A client's SSE-C key, checked against the MD5 the client sent.
#[derive(Clone)]
pub(super) struct CustomerKey {
    key: [u8; KEY],
    /// Base64 of the key's MD5, as the headers carry it.
    md5: String,
}

/// What a request asks for.
#[derive(Clone, Default)]
pub(super) enum Protection {
    #[default]
    Plain,
    /// SSE-S3.
    Server,
    /// SSE-C.
    Customer(CustomerKey),
}

impl std::fmt::Debug for Protection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Plain => f.write_str("Plain"),
            Self::Server => f.write_str("Server"),
            Self::Customer(k) => write!(f, "Customer(md5 {})", k.md5),
        }
    }
}

fn invalid(message: &str) -> S3Error {
    S3Error::with_message(S3ErrorCode::InvalidArgument, message.to_owned())
}

impl Protection {
    /// What a write asks for: `x-amz-server-side-encryption` (SSE-S3; SSE-KMS
    /// is not implemented) or the SSE-C headers, at most one of them.
    pub(super) fn of_write(
        sse: Option<&dto::ServerSideEncryption>,
        c: CustomerHeaders<'_>,
    ) -> S3Result<Self> {
        let customer = Self::of_customer(c)?;
        match (sse.map(dto::ServerSideEncryption::as_str), &customer) {
            (None, _) => Ok(customer),
            (Some(_), Self::Customer(_)) => Err(invalid(
                "Server Side Encryption with Customer provided keys cannot be combined with x-amz-server-side-encryption",
            )),
            (Some(AES256), _) => Ok(Self::Server),
            (Some(kms), _) if kms.starts_with("aws:kms") => Err(S3Error::with_message(
                S3ErrorCode::NotImplemented,
                format!(
                    "server-side encryption with {kms} is not implemented by this server; nothing was stored"
                ),
            )),
            (Some(other), _) => Err(invalid(&format!(
                "The encryption method specified is not supported: {other}"
            ))),
        }
    }

    /// What a read (or a copy source) names: the SSE-C headers or nothing.
    pub(super) fn of_customer(c: CustomerHeaders<'_>) -> S3Result<Self> {
        let (algorithm, key) = match (c.algorithm, c.key) {
            (None, None) if c.key_md5.is_none() => return Ok(Self::Plain),
            (Some(a), Some(k)) => (a, k),
            (Some(_), None) => {
                return Err(invalid(
                    "Requests specifying Server Side Encryption with Customer provided keys must provide an appropriate secret key.",
                ));
            }
            (None, _) => {
                return Err(invalid(
                    "Requests specifying Server Side Encryption with Customer provided keys must provide a valid encryption algorithm.",
                ));
            }
        };
        if algorithm != AES256 {
            return Err(S3Error::with_message(
                S3ErrorCode::InvalidEncryptionAlgorithmError,
                "The encryption algorithm specified is not valid: only AES256 is",
            ));
        }
        let raw = base64_simd::STANDARD
            .decode_to_vec(key.as_bytes())
            .ok()
            .and_then(|b| <[u8; KEY]>::try_from(b.as_slice()).ok())
            .ok_or_else(|| invalid("The secret key was invalid for the specified algorithm."))?;
        let md5 = base64_simd::STANDARD.encode_to_string(Md5::checksum(&raw));
        match c.key_md5 {
            None => Err(invalid(
                "Requests specifying Server Side Encryption with Customer provided keys must provide the client calculated MD5 of the secret key.",
            )),
            Some(given) if given.trim() != md5 => Err(invalid(
                "The calculated MD5 hash of the key did not match the hash that was provided.",
            )),
            Some(_) => Ok(Self::Customer(CustomerKey { key: raw, md5 })),
        }
    }

    /// The ETag of an object (or part) written with this protection whose
    /// plaintext has `md5`: that MD5, or for SSE-C an HMAC of it under the
    /// client's key (see the module documentation): the same bytes under
    /// the same key get the same ETag, as a part sent twice must.
    pub(super) fn etag(&self, md5: &[u8; 16]) -> String {
        match self {
            Self::Customer(c) => {
                let tag = aws_lc_rs::hmac::sign(
                    &aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &c.key),
                    md5,
                );
                super::text::hex(&tag.as_ref()[..16])
            }
            _ => super::text::hex(md5),
        }
    }

    /// Whether anything is encrypted.
    pub(super) fn encrypts(&self) -> bool {
        !matches!(self, Self::Plain)
    }

    fn kek<'a>(&'a self, master: &'a MasterKey) -> Option<&'a [u8; KEY]> {
        match self {
            Self::Plain => None,
            Self::Server => Some(&master.0),
            Self::Customer(c) => Some(&c.key),
        }
    }

    /// A fresh data key for one stream of chunks: the sealer that encrypts
    /// it and the key wrapped for the record (`None`: nothing to encrypt).
    pub(super) fn sealer(&self, master: &MasterKey) -> S3Result<Option<(Sealer, String)>> {
        let Some(kek) = self.kek(master) else {
            return Ok(None);
        };
        let data: [u8; KEY] = random()?;
        let nonce: [u8; NONCE_LEN] = random()?;
        let mut wrapped = data.to_vec();
        aead_key(kek)?
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(KEY_AAD),
                &mut wrapped,
            )
            .map_err(|_| S3Error::with_message(S3ErrorCode::InternalError, "wrapping a data key"))?;
        let mut record = nonce.to_vec();
        record.extend_from_slice(&wrapped);
        let sealer = Sealer {
            key: aead_key(&data)?,
            buf: Vec::with_capacity(CHUNK + TAG),
            index: 0,
        };
        Ok(Some((sealer, base64_simd::STANDARD.encode_to_string(record))))
    }

    /// The record of what this protection encrypted, in `segments`.
    pub(super) fn record(&self, segments: Vec<Segment>) -> Option<Encryption> {
        let (mode, key_md5) = match self {
            Self::Plain => return None,
            Self::Server => (Mode::Server, None),
            Self::Customer(c) => (Mode::Customer, Some(c.md5.clone())),
        };
        Some(Encryption {
            mode,
            key_md5,
            segments,
        })
    }

    /// The mode of a multipart upload, for its record.
    pub(super) fn upload_mode(&self) -> Option<UploadMode> {
        self.record(Vec::new()).map(|e| UploadMode {
            mode: e.mode,
            key_md5: e.key_md5,
        })
    }

    /// Checks that an UploadPart names the upload's key (SSE-C) or none.
    pub(super) fn check_part(&self, upload: Option<&UploadMode>) -> S3Result<()> {
        match (self, upload) {
            (
                Self::Plain,
                None
                | Some(UploadMode {
                    mode: Mode::Server, ..
                }),
            ) => Ok(()),
            (
                Self::Customer(c),
                Some(UploadMode {
                    mode: Mode::Customer,
                    key_md5,
                }),
            ) if key_md5.as_deref() == Some(&c.md5) => Ok(()),
            (
                Self::Plain,
                Some(UploadMode {
                    mode: Mode::Customer, ..
                }),
            ) => Err(invalid(
                "The multipart upload was initiated with Server Side Encryption with Customer provided keys: each part must provide the same key",
            )),
            _ => Err(invalid(
                "The encryption parameters of the part differ from those the multipart upload was initiated with",
            )),
        }
    }

    /// What a part of an upload in `mode` is encrypted with: the upload's
    /// protection (SSE-S3 parts carry no header of their own).
    pub(super) fn for_part(self, mode: Option<&UploadMode>) -> Self {
        match (self, mode) {
            (
                Self::Plain,
                Some(UploadMode {
                    mode: Mode::Server, ..
                }),
            ) => Self::Server,
            (p, _) => p,
        }
    }

    /// Checks that a read of an unencrypted object names no key (S3 refuses
    /// SSE-C headers for an object they do not apply to).
    pub(super) fn check_plain(&self) -> S3Result<()> {
        match self {
            Self::Customer(_) => Err(s3_error!(
                InvalidRequest,
                "The encryption parameters are not applicable to this object."
            )),
            _ => Ok(()),
        }
    }
}

/// How an object is encrypted.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(super) enum Mode {
    #[serde(rename = "sse-s3")]
    Server,
    #[serde(rename = "sse-c")]
    Customer,
}

/// The encryption of a multipart upload (its parts follow it).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct UploadMode {
    pub(super) mode: Mode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) key_md5: Option<String>,
}

/// One stream of chunks under one data key.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Segment {
    /// Base64: the wrapping nonce, the wrapped data key, its tag.
    pub(super) key: String,
    /// Plaintext bytes.
    pub(super) size: u64,
}

/// Chunks in a segment of `size` plaintext bytes (an empty one has one,
/// holding only its tag, so that its end is authenticated too).
fn chunks(size: u64) -> u64 {
    size.div_ceil(CHUNK as u64).max(1)
}

fn stored_len(size: u64) -> u64 {
    size + chunks(size) * TAG as u64
}

/// What an object's record says of its encryption.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Encryption {
    pub(super) mode: Mode,
    /// SSE-C: base64 of the MD5 of the client's key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) key_md5: Option<String>,
    pub(super) segments: Vec<Segment>,
}

impl Encryption {
    /// Bytes the object's data takes in its file.
    pub(super) fn stored_len(&self) -> u64 {
        self.segments.iter().map(|s| stored_len(s.size)).sum()
    }

    /// Plaintext bytes.
    pub(super) fn plain_len(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum()
    }

    /// The data keys, if `asked` may read the object: nothing for SSE-S3,
    /// the object's own key for SSE-C (400 otherwise, as S3 answers).
    pub(super) fn unlock(&self, asked: &Protection, master: &MasterKey) -> S3Result<Unlocked> {
        let kek: &[u8; KEY] = match (self.mode, asked) {
            (Mode::Server, Protection::Plain) => &master.0,
            (Mode::Server, _) => {
                return Err(s3_error!(
                    InvalidRequest,
                    "The encryption parameters are not applicable to this object."
                ));
            }
            (Mode::Customer, Protection::Customer(c)) if self.key_md5.as_deref() == Some(&c.md5) => &c.key,
            (Mode::Customer, Protection::Customer(_)) => {
                return Err(s3_error!(
                    InvalidRequest,
                    "The provided encryption key does not match the key the object was stored with."
                ));
            }
            (Mode::Customer, _) => {
                return Err(s3_error!(
                    InvalidRequest,
                    "The object was stored using a form of Server Side Encryption. The correct parameters must be provided to retrieve the object."
                ));
            }
        };
        let kek = aead_key(kek)?;
        // Under a client's key, a key that does not unwrap is the wrong key
        // (its MD5 collided); under the master key, a damaged record.
        let bad = || match self.mode {
            Mode::Customer => s3_error!(
                InvalidRequest,
                "The provided encryption key does not match the key the object was stored with."
            ),
            Mode::Server => {
                S3Error::with_message(S3ErrorCode::InternalError, "an object's data key does not unwrap")
            }
        };
        let segments = self
            .segments
            .iter()
            .map(|s| {
                let mut rec = base64_simd::STANDARD
                    .decode_to_vec(s.key.as_bytes())
                    .map_err(|_| bad())?;
                if rec.len() != NONCE_LEN + KEY + TAG {
                    return Err(bad());
                }
                let mut wrapped = rec.split_off(NONCE_LEN);
                let nonce = Nonce::try_assume_unique_for_key(&rec).map_err(|_| bad())?;
                let data = kek
                    .open_in_place(nonce, Aad::from(KEY_AAD), &mut wrapped)
                    .map_err(|_| bad())?;
                let data = <[u8; KEY]>::try_from(&*data).map_err(|_| bad())?;
                Ok((Arc::new(aead_key(&data)?), s.size))
            })
            .collect::<S3Result<Vec<_>>>()?;
        Ok(Unlocked { segments })
    }

    /// The encryption headers of an answer about the object.
    pub(super) fn headers(&self) -> Described {
        match self.mode {
            Mode::Server => Described {
                server_side_encryption: Some(dto::ServerSideEncryption::from_static(
                    dto::ServerSideEncryption::AES256,
                )),
                ..Described::default()
            },
            Mode::Customer => Described {
                sse_customer_algorithm: Some(AES256.to_owned()),
                sse_customer_key_md5: self.key_md5.clone(),
                ..Described::default()
            },
        }
    }
}

/// The encryption fields of an answer (S3 repeats them in every answer
/// about an encrypted object).
#[derive(Clone, Debug, Default)]
pub(super) struct Described {
    pub(super) server_side_encryption: Option<dto::ServerSideEncryption>,
    pub(super) sse_customer_algorithm: Option<String>,
    pub(super) sse_customer_key_md5: Option<String>,
}

impl Described {
    /// The fields of an object that may or may not be encrypted.
    pub(super) fn of(e: Option<&Encryption>) -> Self {
        e.map(Encryption::headers).unwrap_or_default()
    }

    /// The fields for what `p` asked a write to do.
    pub(super) fn of_protection(p: &Protection) -> Self {
        Self::of(p.record(Vec::new()).as_ref())
    }
}

fn chunk_nonce(index: u64) -> Nonce {
    let mut n = [0u8; NONCE_LEN];
    n[NONCE_LEN - 8..].copy_from_slice(&index.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

fn chunk_aad(last: bool) -> Aad<[u8; CHUNK_AAD.len() + 1]> {
    let mut a = [0u8; CHUNK_AAD.len() + 1];
    a[..CHUNK_AAD.len()].copy_from_slice(CHUNK_AAD);
    a[CHUNK_AAD.len()] = u8::from(last);
    Aad::from(a)
}

/// Encrypts one stream of plaintext into chunks.
pub(super) struct Sealer {
    key: LessSafeKey,
    /// Plaintext not yet sealed: at most one chunk, held back until it is
    /// known whether it is the last.
    buf: Vec<u8>,
    index: u64,
}

impl Sealer {
    fn seal_chunk(&mut self, plain: &[u8], last: bool, out: &mut Vec<u8>) -> io::Result<()> {
        let start = out.len();
        out.extend_from_slice(plain);
        let mut body = out.split_off(start);
        self.key
            .seal_in_place_append_tag(chunk_nonce(self.index), chunk_aad(last), &mut body)
            .map_err(|_| io::Error::other("sealing a chunk"))?;
        out.extend_from_slice(&body);
        self.index += 1;
        Ok(())
    }

    /// Takes plaintext; appends to `out` the ciphertext of every chunk now
    /// known not to be the last.
    pub(super) fn push(&mut self, mut data: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        while !data.is_empty() {
            if self.buf.len() == CHUNK {
                let full = std::mem::take(&mut self.buf);
                self.seal_chunk(&full, false, out)?;
                self.buf = full;
                self.buf.clear();
            }
            let n = (CHUNK - self.buf.len()).min(data.len());
            self.buf.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        Ok(())
    }

    /// Seals what is left as the last chunk.
    pub(super) fn finish(mut self, out: &mut Vec<u8>) -> io::Result<()> {
        let rest = std::mem::take(&mut self.buf);
        self.seal_chunk(&rest, true, out)
    }
}

/// An encrypted object's data keys, unwrapped: what a read decrypts with.
pub(super) struct Unlocked {
    segments: Vec<(Arc<LessSafeKey>, u64)>,
}

/// Where the chunk holding a plaintext offset is.
struct ChunkAt {
    key: Arc<LessSafeKey>,
    index: u64,
    last: bool,
    /// Offset of its ciphertext in the file, and its plaintext length.
    file_offset: u64,
    plain_len: usize,
    /// Offset in the object of its first plaintext byte.
    plain_start: u64,
}

impl Unlocked {
    fn chunk_at(&self, pos: u64) -> Option<ChunkAt> {
        let (mut plain_base, mut file_base) = (0u64, 0u64);
        for (key, size) in &self.segments {
            if pos < plain_base + size {
                let index = (pos - plain_base) / CHUNK as u64;
                let chunk_start = index * CHUNK as u64;
                let plain_len = usize::try_from((size - chunk_start).min(CHUNK as u64)).ok()?;
                return Some(ChunkAt {
                    key: key.clone(),
                    index,
                    last: index + 1 == chunks(*size),
                    file_offset: file_base + index * (CHUNK + TAG) as u64,
                    plain_len,
                    plain_start: plain_base + chunk_start,
                });
            }
            plain_base += size;
            file_base += stored_len(*size);
        }
        None
    }

    /// The `len` plaintext bytes from `start` of the object in `file`, as
    /// a stream of chunks. A chunk that does not decrypt (the file was
    /// changed or damaged) ends the stream with an error.
    pub(super) fn stream(
        self,
        file: tokio::fs::File,
        start: u64,
        len: u64,
    ) -> impl Stream<Item = io::Result<Bytes>> + Send + Sync + 'static {
        let end = start.saturating_add(len);
        futures::stream::try_unfold((self, file, start), move |(this, mut file, pos)| async move {
            if pos >= end {
                return Ok(None);
            }
            let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_owned());
            let at = this
                .chunk_at(pos)
                .ok_or_else(|| bad("a read past the object's end"))?;
            file.seek(io::SeekFrom::Start(at.file_offset)).await?;
            let mut buf = vec![0u8; at.plain_len + TAG];
            file.read_exact(&mut buf).await?;
            let plain = at
                .key
                .open_in_place(chunk_nonce(at.index), chunk_aad(at.last), &mut buf)
                .map_err(|_| bad("an encrypted chunk does not decrypt: the object file was changed"))?;
            let from = usize::try_from(pos - at.plain_start).map_err(|_| bad("offset"))?;
            let to = usize::try_from((end - at.plain_start).min(at.plain_len as u64))
                .map_err(|_| bad("offset"))?;
            let out = Bytes::copy_from_slice(&plain[from..to]);
            let next = at.plain_start + to as u64;
            Ok(Some((out, (this, file, next))))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn master() -> MasterKey {
        MasterKey(Arc::new([7u8; KEY]))
    }

    fn seal_all(p: &Protection, data: &[u8], pieces: usize) -> (Vec<u8>, Segment) {
        let Ok(Some((mut sealer, key))) = p.sealer(&master()) else {
            panic!("no sealer");
        };
        let mut out = Vec::new();
        for piece in data.chunks(pieces.max(1)) {
            sealer.push(piece, &mut out).unwrap_or_else(|e| panic!("{e}"));
        }
        sealer.finish(&mut out).unwrap_or_else(|e| panic!("{e}"));
        (
            out,
            Segment {
                key,
                size: data.len() as u64,
            },
        )
    }

    async fn read(
        file_bytes: &[u8],
        enc: &Encryption,
        asked: &Protection,
        start: u64,
        len: u64,
    ) -> io::Result<Vec<u8>> {
        use futures::TryStreamExt as _;
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("obj");
        std::fs::write(&path, file_bytes)?;
        let file = tokio::fs::File::open(&path).await?;
        let unlocked = enc
            .unlock(asked, &master())
            .map_err(|e| io::Error::other(format!("{e:?}")))?;
        let parts: Vec<Bytes> = unlocked.stream(file, start, len).try_collect().await?;
        Ok(parts.concat())
    }

    fn customer(key: [u8; KEY]) -> Protection {
        let k = base64_simd::STANDARD.encode_to_string(key);
        let m = base64_simd::STANDARD.encode_to_string(Md5::checksum(&key));
        Protection::of_customer(CustomerHeaders {
            algorithm: Some("AES256"),
            key: Some(&k),
            key_md5: Some(&m),
        })
        .unwrap_or_default()
    }

    #[tokio::test]
    async fn every_range_of_a_sealed_object_reads_back_exactly() {
        let data: Vec<u8> = (0..(3 * CHUNK + 123)).map(|i| (i * 31 % 251) as u8).collect();
        let (file, seg) = seal_all(&Protection::Server, &data, 10_000);
        assert_eq!(file.len() as u64, stored_len(data.len() as u64));
        assert!(!file.windows(32).any(|w| w == &data[..32]), "plaintext on disk");
        let enc = Protection::Server
            .record(vec![seg])
            .unwrap_or_else(|| panic!("no record"));
        let n = data.len() as u64;
        for (start, len) in [
            (0, n),
            (0, 1),
            (1, CHUNK as u64),
            (CHUNK as u64 - 1, 2),
            (n - 1, 1),
            (2 * CHUNK as u64, 5000),
        ] {
            let got = read(&file, &enc, &Protection::Plain, start, len)
                .await
                .unwrap_or_default();
            assert_eq!(
                got,
                &data[start as usize..(start + len) as usize],
                "{start}+{len}"
            );
        }
    }

    #[tokio::test]
    async fn segments_of_parts_read_as_one_object() {
        let a: Vec<u8> = vec![1; CHUNK + 5];
        let b: Vec<u8> = Vec::new();
        let c: Vec<u8> = vec![3; 77];
        let key = customer([9; KEY]);
        let mut file = Vec::new();
        let mut segs = Vec::new();
        for d in [&a, &b, &c] {
            let (f, s) = seal_all(&key, d, 1000);
            file.extend_from_slice(&f);
            segs.push(s);
        }
        let enc = key.record(segs).unwrap_or_else(|| panic!("no record"));
        let all = [a.clone(), b, c].concat();
        let got = read(&file, &enc, &key, 0, all.len() as u64)
            .await
            .unwrap_or_default();
        assert_eq!(got, all);
        let got = read(&file, &enc, &key, CHUNK as u64, 10)
            .await
            .unwrap_or_default();
        assert_eq!(got, &all[CHUNK..CHUNK + 10]);
    }

    #[tokio::test]
    async fn a_wrong_or_missing_customer_key_reads_nothing() {
        let key = customer([9; KEY]);
        let (_, seg) = seal_all(&key, b"secret", 3);
        let enc = key.record(vec![seg]).unwrap_or_else(|| panic!("no record"));
        assert!(enc.unlock(&customer([8; KEY]), &master()).is_err());
        assert!(enc.unlock(&Protection::Plain, &master()).is_err());
        assert!(enc.unlock(&Protection::Server, &master()).is_err());
        // Same MD5 claimed, another key: the record's MD5 matches, the
        // unwrap does not.
        let Protection::Customer(mut forged) = customer([8; KEY]) else {
            panic!("not a customer key")
        };
        forged
            .md5
            .clone_from(enc.key_md5.as_ref().unwrap_or(&String::new()));
        assert!(enc.unlock(&Protection::Customer(forged), &master()).is_err());
    }

    #[tokio::test]
    async fn a_cut_or_changed_file_fails_to_decrypt() {
        let data = vec![5u8; 2 * CHUNK];
        let (file, seg) = seal_all(&Protection::Server, &data, 4096);
        let enc = Protection::Server
            .record(vec![seg])
            .unwrap_or_else(|| panic!("no record"));
        let mut flipped = file.clone();
        flipped[CHUNK + TAG + 3] ^= 1;
        assert!(
            read(&flipped, &enc, &Protection::Plain, 0, data.len() as u64)
                .await
                .is_err()
        );
        // The first chunk alone, presented as the whole object: its tag
        // says it is not the last.
        let short = Encryption {
            segments: vec![Segment {
                key: enc.segments[0].key.clone(),
                size: CHUNK as u64,
            }],
            ..enc.clone()
        };
        assert!(
            read(&file[..CHUNK + TAG], &short, &Protection::Plain, 0, CHUNK as u64)
                .await
                .is_err()
        );
    }

    #[test]
    fn customer_headers_are_checked_as_s3_does() {
        let k = base64_simd::STANDARD.encode_to_string([1u8; KEY]);
        let m = base64_simd::STANDARD.encode_to_string(Md5::checksum(&[1u8; KEY]));
        let h = |a, k, m| CustomerHeaders {
            algorithm: a,
            key: k,
            key_md5: m,
        };
        assert!(matches!(
            Protection::of_customer(h(None, None, None)),
            Ok(Protection::Plain)
        ));
        assert!(matches!(
            Protection::of_customer(h(Some("AES256"), Some(&k), Some(&m))),
            Ok(Protection::Customer(_))
        ));
        for bad in [
            h(Some("AES256"), None, None),
            h(None, Some(&k), Some(&m)),
            h(Some("AES256"), Some(&k), None),
            h(Some("AES256"), Some(&k), Some("AAAAAAAAAAAAAAAAAAAAAA==")),
            h(Some("AES128"), Some(&k), Some(&m)),
            h(Some("AES256"), Some("c2hvcnQ="), Some(&m)),
        ] {
            assert!(Protection::of_customer(bad).is_err());
        }
        let s3 = dto::ServerSideEncryption::from_static(dto::ServerSideEncryption::AES256);
        let kms = dto::ServerSideEncryption::from_static(dto::ServerSideEncryption::AWS_KMS);
        assert!(matches!(
            Protection::of_write(Some(&s3), h(None, None, None)),
            Ok(Protection::Server)
        ));
        assert!(Protection::of_write(Some(&s3), h(Some("AES256"), Some(&k), Some(&m))).is_err());
        let e = Protection::of_write(Some(&kms), h(None, None, None)).err();
        assert_eq!(e.map(|e| e.code().clone()), Some(S3ErrorCode::NotImplemented));
    }
}
