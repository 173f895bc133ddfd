//! The embedded store: objects as files under one data directory.
//!
//! Layout (docs/server.md has the full description):
//!
//! ```text
//! <root>/<bucket>/o-<hex of key>      one file per object (keys up to 100 bytes)
//! <root>/<bucket>/h-<sha256 of key>   one file per object (longer keys)
//! <root>/.format                      the data directory's format version (`format`)
//! <root>/.tmp/                        files being written
//! <root>/.uploads/<upload id>/        a multipart upload: upload.json, part-00001, ...
//! <root>/.keys/sse-s3.key             the SSE-S3 master key (unless configured elsewhere)
//! <root>/.encryption/<bucket>         a bucket's default encryption (PutBucketEncryption)
//! <root>/.acls/<bucket>               a bucket's canned ACL, unless private
//! <root>/.public-access/<bucket>      a bucket's PublicAccessBlock
//! <root>/.versioning/<bucket>         Enabled or Suspended (no file: never versioned)
//! <root>/<bucket>/v-<object file>/    the versions of a key (see `versions`)
//! ```
//!
//! An object file holds the data, then its metadata as JSON, then the
//! JSON's length (u32, little-endian) and the magic `HOB1`. A write goes to
//! a fresh file in `.tmp`, is verified (length, Content-MD5, checksums),
//! then renamed over the object's name: readers see the old object or the
//! new one, never a part of either. An encrypted object's data is
//! ciphertext (`sse`), and its metadata says how to decrypt it. Bucket
//! names cannot start with `.`, so the internal folders never clash with a
//! bucket, and object file names are derived from the key, never the key
//! itself, so no key can name a path outside its bucket.
//!
//! The store's files, one concern each, split by the values they work on
//! so that no file imports one that imports it back
//! (`tests/module_graph.rs`; docs/architecture.md, "Inside the fs store").
//! Values, which know nothing of [`FsStore`]:
//!
//! * `text`: hex, times and ETag text; `errors`: how failures are answered;
//! * `checksums`: every checksum type: what is stored, what a request says
//!   its body hashes to and the check, the algorithms, a part's sums;
//! * `canned`: a canned ACL, what it grants, and who it lets in;
//! * `object`: what is stored with an object (`Meta`, which owns its ACL
//!   and sums) and how a read describes it;
//! * `sse`: encryption at rest (SSE-S3, SSE-C): keys, chunks, ranges;
//! * `layout`: the disk layer (`Disk`): names on disk, temporary files and
//!   their commit, the trailer (sealing, reading);
//! * `settings`: a bucket's settings on disk (`Settings`: versioning,
//!   encryption, ACL, PublicAccessBlock), cached;
//! * `index`: the listings' ordered index of keys and uploads, in memory;
//! * `format`: the data directory's format version, checked at every open.
//!
//! `store` holds [`FsStore`]'s state (built of the values above). The
//! operations, each extending [`FsStore`]:
//!
//! * `write`: filling a temporary file from a request body or a stored file;
//! * `conditions`: conditional reads and writes (If-Match and friends);
//! * `acl`: a bucket's ACL setting, and an object's read and rewritten;
//! * `public_access`: a bucket's PublicAccessBlock and its ACL switches;
//! * `bucket_encryption`: a bucket's default encryption;
//! * `versions`: bucket versioning, the versions of a key on disk;
//! * `indexing`: keeping the index in step with the bucket folders;
//! * `listing`: ListObjects (both versions), ListObjectVersions, ListBuckets;
//! * `uploads`: multipart uploads and their parts;
//! * `upload_sums`: an upload's checksum and the object's checksum of its parts';
//! * `fsck`: the offline check and repair of a data directory (and `scrub`);
//! * `s3`: only `impl S3 for FsStore`, each operation in terms of the above.

pub use errors::{insufficient_storage, is_out_of_space};
pub use fsck::{Finding, FsckOptions, FsckReport, fsck};
pub use layout::parse_object_file;
pub use store::{FsLimits, FsStore};
pub use uploads::parse_upload_file;

mod acl;
mod bucket_encryption;
mod canned;
mod checksums;
mod conditions;
mod errors;
pub mod format;
mod fsck;
mod index;
mod indexing;
mod layout;
mod listing;
mod object;
mod public_access;
mod s3;
mod settings;
mod sse;
mod store;
mod text;
mod upload_sums;
mod uploads;
mod versions;
mod write;
