//! The bucket an RDMA transfer was allowed in, found again at each later
//! step (issue 37, finding 5: a freed bucket name leaked another tenant's
//! bytes).
//!
//! A transfer is allowed at one moment (PREPARE of `hipobj-rc-v2`, or the
//! access policy of a token request) and moves bytes later. Meanwhile the
//! bucket can be deleted and made again under the same name by another key,
//! with other objects in it. So each step that touches the store checks
//! again that the caller may still use the bucket and that it is the same
//! bucket: its generation ([`Owners::generation`], a random id written at
//! CreateBucket) is the one recorded when the transfer was allowed.
//!
//! The steps: before the transfer starts (rc-v2 READY); after the store
//! opened a GET's object, before any of its bytes is read (the open file
//! belongs to the bucket that was there from the first check to this one,
//! as a bucket made again never has the old generation); and for a PUT
//! when the store is opened and again before the last bytes go to it (the
//! store can commit as soon as it has them all). A mismatch is
//! `AccessDenied` and the transfer ends there.

use s3s::{S3Error, S3ErrorCode, S3Result};
use tokio::runtime::Handle;

use hipobj_target::{Selected, Sink, Source};

use crate::s3::owners::Owners;

/// A bucket as found when a transfer was allowed.
#[derive(Clone, Debug)]
pub(crate) struct SameBucket {
    owners: Owners,
    bucket: String,
    access_key: String,
    generation: Option<String>,
}

impl SameBucket {
    /// `bucket` as it is now for `access_key` (refused as
    /// [`Owners::check`] refuses).
    pub(crate) async fn now(owners: &Owners, bucket: &str, access_key: &str) -> S3Result<Self> {
        let generation = owners.generation(bucket, access_key).await?;
        Ok(Self::recorded(owners, bucket, access_key, generation))
    }

    /// `bucket` as recorded earlier, with `generation`.
    pub(crate) fn recorded(
        owners: &Owners,
        bucket: &str,
        access_key: &str,
        generation: Option<String>,
    ) -> Self {
        Self {
            owners: owners.clone(),
            bucket: bucket.to_owned(),
            access_key: access_key.to_owned(),
            generation,
        }
    }

    /// The generation recorded.
    pub(crate) fn generation(&self) -> Option<&str> {
        self.generation.as_deref()
    }

    /// Whether the caller may still use the bucket, and it is the same one.
    pub(crate) async fn check(&self) -> S3Result<()> {
        let now = self.owners.generation(&self.bucket, &self.access_key).await?;
        if now != self.generation {
            return Err(S3Error::with_message(
                S3ErrorCode::AccessDenied,
                format!(
                    "bucket {:?} was deleted or made again since this transfer was allowed; nothing was moved",
                    self.bucket
                ),
            ));
        }
        Ok(())
    }
}

/// A source or sink whose store is used only while [`SameBucket::check`]
/// holds (see the module documentation for when it is asked); with no
/// bucket recorded (a requester the owner model does not name: anonymous
/// access, or another key that a canned ACL lets in, which the store
/// checks at each call), it only passes through.
pub(crate) struct Guarded<T> {
    inner: T,
    same: Option<SameBucket>,
    rt: Handle,
    /// A PUT's length, once opened.
    len: u64,
}

impl<T> Guarded<T> {
    /// `inner` under `same`; the checks run on `rt` (the callers are on
    /// the blocking pool, as the store calls are).
    pub(crate) fn new(inner: T, same: Option<SameBucket>, rt: Handle) -> Self {
        Self {
            inner,
            same,
            rt,
            len: 0,
        }
    }

    /// The wrapped source or sink.
    pub(crate) fn inner_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    fn check(&self) -> S3Result<()> {
        match &self.same {
            Some(s) => self.rt.block_on(s.check()),
            None => Ok(()),
        }
    }
}

impl<T: Source<Error = S3Error>> Source for Guarded<T> {
    type Error = S3Error;

    fn open(&mut self) -> Result<Selected, S3Error> {
        let selected = self.inner.open()?;
        // After the store opened the object: the bytes read from now on
        // are those of the object opened in the same bucket.
        self.check()?;
        Ok(selected)
    }

    fn fill(&mut self, off: u64, buf: &mut [u8]) -> Result<(), S3Error> {
        self.inner.fill(off, buf)
    }
}

impl<T: Sink<Error = S3Error>> Sink for Guarded<T> {
    type Error = S3Error;

    fn open(&mut self, len: u64) -> Result<(), S3Error> {
        self.check()?;
        self.len = len;
        self.inner.open(len)
    }

    fn drain(&mut self, off: u64, chunk: &[u8]) -> Result<(), S3Error> {
        // The store may commit as soon as it has every byte: the last
        // chunk goes only to the same bucket.
        if off.saturating_add(chunk.len() as u64) >= self.len {
            self.check()?;
        }
        self.inner.drain(off, chunk)
    }

    fn commit(&mut self) -> Result<(), S3Error> {
        self.inner.commit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, StorageConfig};

    /// A GET's bytes and a PUT's, counted.
    #[derive(Default)]
    struct Store {
        opened: bool,
        filled: usize,
        drained: Vec<u8>,
    }

    impl Source for Store {
        type Error = S3Error;
        fn open(&mut self) -> Result<Selected, S3Error> {
            self.opened = true;
            Ok(Selected {
                len: 8,
                partial: false,
            })
        }
        fn fill(&mut self, _off: u64, buf: &mut [u8]) -> Result<(), S3Error> {
            self.filled += buf.len();
            Ok(())
        }
    }

    impl Sink for Store {
        type Error = S3Error;
        fn open(&mut self, _len: u64) -> Result<(), S3Error> {
            self.opened = true;
            Ok(())
        }
        fn drain(&mut self, _off: u64, chunk: &[u8]) -> Result<(), S3Error> {
            self.drained.extend_from_slice(chunk);
            Ok(())
        }
        fn commit(&mut self) -> Result<(), S3Error> {
            Ok(())
        }
    }

    async fn make(owners: &Owners, dir: &std::path::Path, bucket: &str, key: &str) {
        owners.claim(bucket, key).await.expect("claim");
        std::fs::create_dir(dir.join(bucket)).expect("mkdir");
    }

    /// The bucket freed and made again by `key` between the steps.
    async fn remake(owners: &Owners, dir: &std::path::Path, bucket: &str, key: &str) {
        std::fs::remove_dir(dir.join(bucket)).expect("rmdir");
        make(owners, dir, bucket, key).await;
    }

    fn owners(dir: &std::path::Path) -> Owners {
        let mut c = Config {
            storage: StorageConfig::Fs {
                data_dir: dir.to_path_buf(),
            },
            ..Config::default()
        };
        c.limits.fsync = false;
        Owners::new(&c).expect("owners")
    }

    /// The steps during a transfer (after READY's check): a GET's source
    /// gives no byte once the bucket changed after the store opened it, a
    /// PUT's sink takes nothing when it changed before the store opened,
    /// and not the last chunk when it changed during the transfer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_transfer_stops_at_the_first_step_after_its_bucket_changed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let o = owners(dir.path());
        make(&o, dir.path(), "bkt", "u1").await;
        let rt = Handle::current();
        let same = || async { SameBucket::now(&o, "bkt", "u1").await.expect("allowed") };

        // Unchanged: everything passes.
        let mut src = Guarded::new(Store::default(), Some(same().await), rt.clone());
        let src = tokio::task::spawn_blocking(move || {
            assert!(Source::open(&mut src).is_ok());
            assert!(src.fill(0, &mut [0u8; 8]).is_ok());
            src
        })
        .await
        .expect("join");
        drop(src);

        // GET: changed hands before the store opened.
        let mut src = Guarded::new(Store::default(), Some(same().await), rt.clone());
        remake(&o, dir.path(), "bkt", "u2").await;
        let mut src = tokio::task::spawn_blocking(move || {
            let Err(e) = Source::open(&mut src) else {
                panic!("the GET was not refused");
            };
            assert_eq!(*e.code(), S3ErrorCode::AccessDenied);
            src
        })
        .await
        .expect("join");
        assert_eq!(src.inner_mut().filled, 0);

        // PUT: made again by its own owner before the store opened.
        remake(&o, dir.path(), "bkt", "u1").await;
        let mut sink = Guarded::new(Store::default(), Some(same().await), rt.clone());
        remake(&o, dir.path(), "bkt", "u1").await;
        let mut sink = tokio::task::spawn_blocking(move || {
            assert!(Sink::open(&mut sink, 8).is_err());
            sink
        })
        .await
        .expect("join");
        assert!(!sink.inner_mut().opened);

        // PUT: changed during the transfer: the last chunk is kept back.
        let mut sink = Guarded::new(Store::default(), Some(same().await), rt.clone());
        let mut sink = tokio::task::spawn_blocking(move || {
            assert!(Sink::open(&mut sink, 8).is_ok());
            assert!(sink.drain(0, &[1u8; 4]).is_ok());
            sink
        })
        .await
        .expect("join");
        remake(&o, dir.path(), "bkt", "u2").await;
        let mut sink = tokio::task::spawn_blocking(move || {
            assert!(sink.drain(4, &[2u8; 4]).is_err());
            sink
        })
        .await
        .expect("join");
        assert_eq!(sink.inner_mut().drained, vec![1u8; 4]);

        // No bucket recorded (a requester the owner model does not name):
        // passes through.
        let mut src = Guarded::new(Store::default(), None, rt);
        tokio::task::spawn_blocking(move || assert!(Source::open(&mut src).is_ok()))
            .await
            .expect("join");
    }
}
