//! The listings' index: each bucket's keys in order, and the multipart
//! uploads in progress, in memory, so that a page of a listing costs
//! O(log n + page) rather than a read and a sort of the whole bucket
//! folder.
//!
//! The object files stay the truth; the index only says which keys to
//! look at. Its rule (docs/architecture.md, "The listings' index"):
//!
//! * it is never written to disk: a bucket's keys are read from its folder
//!   the first time the bucket is listed after the store opens (once), so
//!   a crash, a power cut, an older release's data directory or a file
//!   added or removed while the server was down can never leave it stale;
//! * it holds at least every key that has an object file or a version
//!   folder (it may hold more, for a moment): every change to a key's files
//!   is followed by [`KeyIndex::sync`], which looks at the key's files and
//!   sets its entry to what it finds, under the bucket's lock, so that
//!   whatever order two changes of one key come in, the last look wins;
//! * a listing reads each key's object file (as it always did for the
//!   object's size and ETag) and leaves out a key whose file is gone: an
//!   extra key costs a look, never a wrong answer.
//!
//! A process holds one index per data directory ([`KeyIndex::of`]), so
//! that two stores opened on one directory in one process see each
//! other's changes; each open starts it afresh (every bucket is read again
//! at its next listing). One server per data directory, as always: files
//! another process adds while this one runs are listed from its next start.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use s3s::S3Result;
use tokio::sync::{OnceCell, RwLock};

/// The keys of one bucket, in order.
#[derive(Debug, Default)]
struct Bucket {
    keys: RwLock<BTreeSet<Box<str>>>,
    /// Set once the bucket's folder has been read into `keys`.
    built: OnceCell<()>,
}

/// The listings' index of one data directory. See the module
/// documentation.
#[derive(Debug, Default)]
pub(super) struct KeyIndex {
    buckets: Mutex<HashMap<String, Arc<Bucket>>>,
    uploads: Mutex<Arc<Uploads>>,
}

/// The uploads in progress: (bucket, key, initiated, id) -> owner.
#[derive(Debug, Default)]
struct Uploads {
    map: RwLock<BTreeMap<UploadEntry, Option<String>>>,
    built: OnceCell<()>,
}

/// An upload as the index orders it: by bucket, key, start time and id,
/// the order of ListMultipartUploads.
pub(super) type UploadEntry = (String, String, u64, String);

/// The index of each data directory open in this process.
static OPEN: Mutex<Vec<(PathBuf, Weak<KeyIndex>)>> = Mutex::new(Vec::new());

/// One entry of a page being gathered: a key, or a common prefix that
/// stands for every key under it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Item {
    Key(String),
    Prefix(String),
}

/// Where a listing walks the index: keys starting with `prefix` from
/// `from` on, rolled up at `delimiter`; a common prefix not after `marker`
/// is one an earlier page gave.
#[derive(Clone, Debug)]
pub(super) struct Walk {
    prefix: String,
    delimiter: Option<String>,
    marker: Option<String>,
    /// The next place to look; `None`: past the end.
    from: Option<Bound<String>>,
}

impl Walk {
    /// A walk over the keys that start with `prefix`, after `marker`
    /// (from it, for `inclusive`, which ListObjectVersions' version-id
    /// marker asks).
    pub(super) fn new(prefix: &str, delimiter: Option<&str>, marker: Option<&str>, inclusive: bool) -> Self {
        let from = match marker {
            Some(m) if m >= prefix && inclusive => Bound::Included(m.to_owned()),
            Some(m) if m >= prefix => Bound::Excluded(m.to_owned()),
            _ => Bound::Included(prefix.to_owned()),
        };
        Self {
            prefix: prefix.to_owned(),
            delimiter: delimiter.filter(|d| !d.is_empty()).map(str::to_owned),
            marker: marker.map(str::to_owned),
            from: Some(from),
        }
    }

    /// Up to `want` more items from `keys`, in order.
    pub(super) fn take(&mut self, keys: &BTreeSet<Box<str>>, want: usize) -> Vec<Item> {
        let mut out = Vec::new();
        while out.len() < want {
            let Some(from) = &self.from else { break };
            let lower = match from {
                Bound::Included(s) => Bound::Included(s.as_str()),
                Bound::Excluded(s) => Bound::Excluded(s.as_str()),
                Bound::Unbounded => Bound::Unbounded,
            };
            let Some(key) = keys.range::<str, _>((lower, Bound::Unbounded)).next() else {
                self.from = None;
                break;
            };
            // Keys from the prefix on that do not start with it are past
            // every key that does.
            if !key.starts_with(self.prefix.as_str()) {
                self.from = None;
                break;
            }
            let common = self.delimiter.as_deref().and_then(|d| {
                key[self.prefix.len()..]
                    .find(d)
                    .map(|i| &key[..self.prefix.len() + i + d.len()])
            });
            match common {
                Some(cp) => {
                    // Every key under the prefix is rolled up into it: the
                    // walk goes on after the last of them.
                    self.from = successor(cp).map(Bound::Included);
                    if self.marker.as_deref().is_none_or(|m| cp > m) {
                        out.push(Item::Prefix(cp.to_owned()));
                    }
                }
                None => {
                    self.from = Some(Bound::Excluded(key.to_string()));
                    out.push(Item::Key(key.to_string()));
                }
            }
        }
        out
    }
}

/// The least string greater than every string that starts with `s`;
/// `None` if there is none.
pub(super) fn successor(s: &str) -> Option<String> {
    let mut chars: Vec<char> = s.chars().collect();
    while let Some(last) = chars.pop() {
        let mut next = u32::from(last) + 1;
        if (0xD800..0xE000).contains(&next) {
            next = 0xE000;
        }
        if let Some(c) = char::from_u32(next) {
            chars.push(c);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

impl KeyIndex {
    /// The index of the data directory `root` (canonical), shared with any
    /// other store of this process open on it. Opening a store starts it
    /// afresh: every bucket is read from its folder again at its next
    /// listing.
    pub(super) fn of(root: &Path) -> Arc<Self> {
        let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|(_, w)| w.strong_count() > 0);
        if let Some(i) = open
            .iter()
            .find(|(r, _)| r == root)
            .and_then(|(_, w)| w.upgrade())
        {
            i.buckets.lock().unwrap_or_else(PoisonError::into_inner).clear();
            *i.uploads.lock().unwrap_or_else(PoisonError::into_inner) = Arc::default();
            return i;
        }
        let i = Arc::new(Self::default());
        open.push((root.to_path_buf(), Arc::downgrade(&i)));
        i
    }

    fn bucket(&self, bucket: &str) -> Arc<Bucket> {
        let mut map = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(map.entry(bucket.to_owned()).or_default())
    }

    /// Forgets a bucket (deleted or created): its next listing reads its
    /// folder again.
    pub(super) fn forget(&self, bucket: &str) {
        let mut map = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        map.remove(bucket);
    }

    /// Sets `key`'s entry to whether `present` finds files for it. The
    /// look happens under the bucket's lock (see the module
    /// documentation).
    pub(super) async fn sync<F, Fut>(&self, bucket: &str, key: &str, present: F)
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let b = self.bucket(bucket);
        let mut keys = b.keys.write().await;
        if present().await {
            if !keys.contains(key) {
                keys.insert(key.into());
            }
        } else {
            keys.remove(key);
        }
    }

    /// Up to `want` more items of `walk` in `bucket`, whose keys `build`
    /// reads from its folder if this is the bucket's first listing.
    pub(super) async fn page<F, Fut>(
        &self,
        bucket: &str,
        build: F,
        walk: &mut Walk,
        want: usize,
    ) -> S3Result<Vec<Item>>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = S3Result<Vec<String>>>,
    {
        let b = self.bucket(bucket);
        b.built
            .get_or_try_init::<s3s::S3Error, _, _>(|| async {
                let found = build().await?;
                let mut keys = b.keys.write().await;
                keys.extend(found.into_iter().map(String::into_boxed_str));
                S3Result::Ok(())
            })
            .await?;
        let keys = b.keys.read().await;
        Ok(walk.take(&keys, want))
    }

    fn upload_state(&self) -> Arc<Uploads> {
        Arc::clone(&self.uploads.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Records an upload made (after its folder is in place).
    pub(super) async fn upload_added(&self, entry: UploadEntry, owner: Option<String>) {
        self.upload_state().map.write().await.insert(entry, owner);
    }

    /// Records an upload gone (after its folder is removed).
    pub(super) async fn upload_removed(&self, entry: &UploadEntry) {
        self.upload_state().map.write().await.remove(entry);
    }

    /// The uploads of `bucket` whose keys start with `prefix`, from the
    /// entry `from` on, at most `want`; `build` reads them all from
    /// `.uploads` the first time.
    pub(super) async fn uploads<F, Fut>(
        &self,
        build: F,
        bucket: &str,
        prefix: &str,
        from: Bound<UploadEntry>,
        want: usize,
    ) -> S3Result<Vec<(UploadEntry, Option<String>)>>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = S3Result<Vec<(UploadEntry, Option<String>)>>>,
    {
        let state = self.upload_state();
        state
            .built
            .get_or_try_init::<s3s::S3Error, _, _>(|| async {
                let found = build().await?;
                state.map.write().await.extend(found);
                S3Result::Ok(())
            })
            .await?;
        let start = (bucket.to_owned(), prefix.to_owned(), 0, String::new());
        let from = match from {
            Bound::Included(f) if f > start => Bound::Included(f),
            Bound::Excluded(f) if f >= start => Bound::Excluded(f),
            _ => Bound::Included(start),
        };
        let ups = state.map.read().await;
        Ok(ups
            .range((from, Bound::Unbounded))
            .take_while(|(e, _)| e.0 == bucket && e.1.starts_with(prefix))
            .take(want)
            .map(|(e, o)| (e.clone(), o.clone()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn set(keys: &[&str]) -> BTreeSet<Box<str>> {
        keys.iter().map(|k| Box::<str>::from(*k)).collect()
    }

    #[test]
    fn the_successor_is_past_every_string_with_the_prefix() {
        assert_eq!(successor("a/").as_deref(), Some("a0"));
        assert_eq!(successor("").as_deref(), None);
        assert_eq!(successor("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(successor("a\u{D7FF}").as_deref(), Some("a\u{E000}"));
        assert!(successor("a/\u{10FFFF}\u{10FFFF}").unwrap().as_str() > "a/\u{10FFFF}\u{10FFFF}zzz");
    }

    #[test]
    fn a_walk_rolls_up_and_resumes() {
        let keys = set(&["a/1", "a/2", "b", "c/x/1", "c/y", "d"]);
        let mut w = Walk::new("", Some("/"), None, false);
        assert_eq!(
            w.take(&keys, 2),
            vec![Item::Prefix("a/".into()), Item::Key("b".into())]
        );
        assert_eq!(
            w.take(&keys, 10),
            vec![Item::Prefix("c/".into()), Item::Key("d".into())]
        );
        assert!(w.take(&keys, 10).is_empty());
        // A marker that is a common prefix: that prefix was on an earlier page.
        let mut w = Walk::new("", Some("/"), Some("a/"), false);
        assert_eq!(w.take(&keys, 1), vec![Item::Key("b".into())]);
        let mut w = Walk::new("c/", Some("/"), None, false);
        assert_eq!(
            w.take(&keys, 10),
            vec![Item::Prefix("c/x/".into()), Item::Key("c/y".into())]
        );
    }
}
