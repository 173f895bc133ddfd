//! Listing: the keys of a bucket in order, the page of objects and common
//! prefixes that ListObjectsV2, ListObjects and ListObjectVersions share
//! (with one prologue for the arguments they share), and the pages of
//! ListBuckets.

use std::time::UNIX_EPOCH;

use s3s::dto::{self, ETag, Timestamp};
use s3s::{S3Result, s3_error};

use super::errors::internal;
use super::index::{Item, Walk};
use super::layout::Disk;
use super::object::Meta;
use super::settings::Status;
use super::store::FsStore;
use super::text::{i64_of, timestamp};
use crate::names::check_bucket;
use crate::owner_record::{self, Lookup};

/// What the three object listings ask alike: the prefix, the delimiter,
/// the page size and whether keys go back percent-encoded.
pub(super) struct ListArgs {
    pub(super) prefix: String,
    pub(super) delimiter: Option<String>,
    pub(super) max: usize,
    pub(super) url: bool,
}

impl ListArgs {
    /// The shared prologue of the object listings (an empty delimiter is
    /// none; max-keys is at most 1000, 1000 if not given).
    pub(super) fn of(
        prefix: Option<&str>,
        delimiter: Option<String>,
        max_keys: Option<i32>,
        encoding: Option<&dto::EncodingType>,
    ) -> S3Result<Self> {
        let prefix = prefix.unwrap_or_default().to_owned();
        let max = self::max_keys(max_keys)?;
        Ok(Self {
            prefix,
            delimiter: delimiter.filter(|d| !d.is_empty()),
            max,
            url: wants_url(encoding),
        })
    }

    /// The prefix as the answer echoes it.
    pub(super) fn prefix_out(&self) -> Option<String> {
        Some(encode_key(&self.prefix, self.url))
    }

    /// The delimiter as the answer echoes it.
    pub(super) fn delimiter_out(&self) -> Option<String> {
        self.delimiter.as_deref().map(|d| encode_key(d, self.url))
    }

    /// A marker as the answer echoes it: always, empty when none was given.
    pub(super) fn marker_out(&self, marker: Option<&str>) -> Option<String> {
        Some(marker.map(|m| encode_key(m, self.url)).unwrap_or_default())
    }

    /// MaxKeys as the answer gives it.
    pub(super) fn max_keys_out(&self) -> Option<i32> {
        Some(i32::try_from(self.max).unwrap_or(1000))
    }
}

impl FsStore {
    /// The page an object listing asks for: keys after `after`.
    pub(super) async fn list_page(
        &self,
        bucket: &str,
        args: &ListArgs,
        after: Option<&str>,
    ) -> S3Result<Listing> {
        self.list(ListQuery {
            bucket,
            prefix: &args.prefix,
            delimiter: args.delimiter.as_deref(),
            after,
            max: args.max,
        })
        .await
    }

    /// The core of both ListObjects versions: keys after `after`, grouped
    /// by `delimiter`, at most `max` entries. The keys come from the index
    /// (`index`), a page at a time; each is read from its file, and one
    /// whose file is gone is left out.
    async fn list(&self, q: ListQuery<'_>) -> S3Result<Listing> {
        let dir = self.disk.existing_bucket(q.bucket).await?;
        let mut listing = Listing::default();
        if q.max == 0 {
            // Nothing asked for: an empty page that is not truncated.
            return Ok(listing);
        }
        let versioned = self.versioning(q.bucket).await? != Status::Off;
        let mut walk = Walk::new(q.prefix, q.delimiter, q.after, false);
        'page: loop {
            let want = q.max + 1 - (listing.objects.len() + listing.prefixes.len());
            let items = self.index_page(q.bucket, &dir, &mut walk, want).await?;
            if items.is_empty() {
                break;
            }
            // Unversioned, the object files of the items that fit on the
            // page are read in one go (the one after them only tells
            // whether the page is truncated, unless one of them is gone).
            let room = q.max - (listing.objects.len() + listing.prefixes.len());
            let mut metas = if versioned {
                Vec::new().into_iter()
            } else {
                let paths = items
                    .iter()
                    .take(room)
                    .filter_map(|i| match i {
                        Item::Key(k) => Some(dir.join(Disk::file_name(k))),
                        Item::Prefix(_) => None,
                    })
                    .collect();
                Disk::read_listed_metas(paths).await?.into_iter()
            };
            for (i, item) in items.into_iter().enumerate() {
                if listing.objects.len() + listing.prefixes.len() >= q.max {
                    listing.truncated = true;
                    break 'page;
                }
                match item {
                    Item::Prefix(cp) => {
                        listing.next = Some(cp.clone());
                        listing.prefixes.push(cp);
                    }
                    Item::Key(key) => {
                        let meta = if versioned || i >= room {
                            self.current_of(&dir, &key, versioned).await?.map(|st| st.meta)
                        } else {
                            metas.next().flatten()
                        };
                        let Some(mut meta) = meta else { continue };
                        listing.next = Some(key.clone());
                        meta.key = key;
                        listing.objects.push(meta);
                    }
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
pub(super) struct Listing {
    pub(super) objects: Vec<Meta>,
    pub(super) prefixes: Vec<String>,
    pub(super) truncated: bool,
    /// The last key or common prefix returned, when truncated.
    pub(super) next: Option<String>,
}

impl Listing {
    /// The objects, each with `owner` if given.
    pub(super) fn contents(&self, url: bool, owner: Option<&dto::Owner>) -> Vec<dto::Object> {
        self.objects
            .iter()
            .map(|m| dto::Object {
                owner: owner.cloned(),
                key: Some(encode_key(&m.key, url)),
                size: Some(i64_of(m.size)),
                e_tag: Some(ETag::Strong(m.etag.clone())),
                // As HEAD and GET give it: when the object was written (an
                // ACL change rewrites the file, not the object).
                last_modified: Some(timestamp(m.modified_ms)),
                storage_class: Some(dto::ObjectStorageClass::from_static(
                    dto::ObjectStorageClass::STANDARD,
                )),
                ..Default::default()
            })
            .collect()
    }

    /// The common prefixes, `None` if there are none (S3 then sends no
    /// element).
    pub(super) fn common_prefixes(&self, url: bool) -> Option<Vec<dto::CommonPrefix>> {
        common_prefixes(&self.prefixes, url)
    }
}

/// A listing's common prefixes as S3 answers them (none: no element),
/// percent-encoded for `encoding-type=url`.
pub(super) fn common_prefixes(prefixes: &[String], url: bool) -> Option<Vec<dto::CommonPrefix>> {
    (!prefixes.is_empty()).then(|| {
        prefixes
            .iter()
            .map(|p| dto::CommonPrefix {
                prefix: Some(encode_key(p, url)),
            })
            .collect()
    })
}

/// Percent-encodes a key for `encoding-type=url` (everything but
/// unreserved characters and `/`).
pub(super) fn encode_key(key: &str, url: bool) -> String {
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

pub(super) fn wants_url(e: Option<&dto::EncodingType>) -> bool {
    e.is_some_and(|e| e.as_str() == dto::EncodingType::URL)
}

/// One page of ListBuckets: the names after the continuation token that
/// start with the prefix, at most `max` of them.
pub(super) struct BucketPage<'a> {
    after: Option<String>,
    prefix: &'a str,
    max: usize,
}

impl<'a> BucketPage<'a> {
    /// AWS's page when MaxBuckets is not given.
    const DEFAULT_MAX: usize = 10_000;

    pub(super) fn of(input: &'a dto::ListBucketsInput) -> S3Result<Self> {
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

impl FsStore {
    /// One page of ListBuckets: the buckets of `who` (all of them for no
    /// key) that `page` wants, sorted, and the token for the rest.
    pub(super) async fn bucket_page(
        &self,
        page: &BucketPage<'_>,
        who: Option<&str>,
    ) -> S3Result<(Vec<dto::Bucket>, Option<String>)> {
        let mut buckets = Vec::new();
        let mut rd = tokio::fs::read_dir(&self.disk.root)
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
            // Another key's bucket (`crate::owner_record`) is not listed,
            // as in S3; nor is one whose record is missing or damaged,
            // since whose it is cannot be known.
            if let Some(who) = who
                && self.limits.owner_records
                && !matches!(owner_record::read(&self.disk.root, name).await,
                    Lookup::Found(r) if r.key == who)
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
        let token = page.cut(&mut buckets);
        Ok((buckets, token))
    }
}
