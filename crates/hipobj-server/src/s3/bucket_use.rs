//! Buckets in use: a bucket is never deleted, or made again under its
//! name, while a request or a transfer is using it (issue 37, finding 5,
//! for every path: a freed bucket name leaked another tenant's bytes).
//!
//! Each request that names a bucket holds it *shared* from before its
//! access check until the store has answered (for an RDMA transfer, until
//! the last byte is committed); CreateBucket and DeleteBucket hold it
//! *exclusively*. So the bucket a request was allowed in is the bucket its
//! bytes are read from and committed to: without this, a PUT allowed in
//! one tenant's bucket could commit into the bucket another tenant made
//! under the same name in between, a GET or a CopyObject source could read
//! from it, and a DeleteObject could delete from it. Two CreateBuckets of
//! the same name are also ordered, so that the one answered 200 is the one
//! recorded as the owner.
//!
//! An exclusive use waits at most [`EXCLUSIVE_WAIT`] for the shared ones to
//! end, and is then refused with `409 OperationAborted` (as S3 answers an
//! operation that conflicts with one in progress): DeleteBucket during a
//! long upload into the bucket is refused, not left waiting. Shared uses
//! that arrive while an exclusive one waits queue behind it (the lock is
//! fair), so a stream of requests cannot starve a DeleteBucket.
//!
//! Uses live in memory: one process owns a data directory. A bucket no one
//! uses has no entry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use s3s::{S3Error, S3ErrorCode, S3Result};
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

/// How long CreateBucket or DeleteBucket waits for the requests using the
/// bucket to end.
pub(crate) const EXCLUSIVE_WAIT: Duration = Duration::from_secs(2);

type Lock = Arc<RwLock<()>>;

/// The buckets in use, by name.
#[derive(Debug, Default, Clone)]
pub struct BucketUses {
    locks: Arc<Mutex<HashMap<String, Lock>>>,
}

/// A use of one bucket; the bucket is free again when every clone is
/// dropped. Cloneable so that it can ride in a request's extensions.
#[derive(Debug, Clone)]
pub struct BucketUse(#[expect(dead_code, reason = "held for its drop")] Arc<Held>);

#[derive(Debug)]
struct Held {
    guard: Option<Guard>,
    bucket: String,
    uses: BucketUses,
}

#[derive(Debug)]
enum Guard {
    #[expect(dead_code, reason = "held for its drop")]
    Shared(OwnedRwLockReadGuard<()>),
    #[expect(dead_code, reason = "held for its drop")]
    Exclusive(OwnedRwLockWriteGuard<()>),
}

impl Drop for Held {
    fn drop(&mut self) {
        // The lock first, then the entry if nobody else uses it.
        self.guard = None;
        self.uses.forget_if_unused(&self.bucket);
    }
}

impl BucketUses {
    fn lock_of(&self, bucket: &str) -> S3Result<Lock> {
        let mut locks = self.locks.lock().map_err(|_| {
            S3Error::with_message(S3ErrorCode::InternalError, "the bucket use table is unusable")
        })?;
        Ok(locks.entry(bucket.to_owned()).or_default().clone())
    }

    fn held(&self, bucket: &str, guard: Guard) -> BucketUse {
        BucketUse(Arc::new(Held {
            guard: Some(guard),
            bucket: bucket.to_owned(),
            uses: self.clone(),
        }))
    }

    /// Uses `bucket` alongside other requests; waits while CreateBucket or
    /// DeleteBucket has it.
    pub async fn shared(&self, bucket: &str) -> S3Result<BucketUse> {
        let lock = self.lock_of(bucket)?;
        let guard = lock.read_owned().await;
        Ok(self.held(bucket, Guard::Shared(guard)))
    }

    /// Uses `bucket` alone (CreateBucket, DeleteBucket), once the requests
    /// using it have ended; `409 OperationAborted` if they have not within
    /// [`EXCLUSIVE_WAIT`].
    pub async fn exclusive(&self, bucket: &str) -> S3Result<BucketUse> {
        self.exclusive_within(bucket, EXCLUSIVE_WAIT).await
    }

    async fn exclusive_within(&self, bucket: &str, wait: Duration) -> S3Result<BucketUse> {
        let lock = self.lock_of(bucket)?;
        let acquired = tokio::time::timeout(wait, lock.write_owned()).await;
        // `lock` (this waiter's `Arc`) is dropped before the refusal, so the
        // entry goes with the last user.
        match acquired {
            Ok(guard) => Ok(self.held(bucket, Guard::Exclusive(guard))),
            Err(_) => {
                self.forget_if_unused(bucket);
                Err(S3Error::with_message(
                    S3ErrorCode::OperationAborted,
                    format!(
                        "requests are still using bucket {bucket:?} (an upload or a transfer in progress); \
                         nothing was done: try again when they have ended"
                    ),
                ))
            }
        }
    }

    /// Drops `bucket`'s entry when no use holds or waits for it (each
    /// keeps an `Arc` of its lock).
    fn forget_if_unused(&self, bucket: &str) {
        if let Ok(mut locks) = self.locks.lock()
            && locks.get(bucket).is_some_and(|l| Arc::strong_count(l) == 1)
        {
            locks.remove(bucket);
        }
    }

    /// How many buckets have an entry (tests: entries do not pile up).
    #[cfg(test)]
    fn entries(&self) -> usize {
        self.locks.lock().map(|l| l.len()).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn shared_uses_go_together_and_keep_an_exclusive_one_out() {
        let uses = BucketUses::default();
        let a = uses.shared("b").await.expect("shared");
        let b = uses.shared("b").await.expect("shared");
        let refused = uses
            .exclusive_within("b", Duration::from_millis(50))
            .await
            .expect_err("exclusive while shared");
        assert_eq!(*refused.code(), S3ErrorCode::OperationAborted);
        // Another bucket is not affected.
        drop(
            uses.exclusive_within("c", Duration::from_millis(50))
                .await
                .expect("other bucket"),
        );
        drop((a, b));
        let x = uses
            .exclusive_within("b", Duration::from_millis(50))
            .await
            .expect("free");
        drop(x);
        assert_eq!(uses.entries(), 0, "entries are dropped with their last use");
    }

    #[tokio::test]
    async fn an_exclusive_use_waits_for_shared_ones_that_end_in_time() {
        let uses = BucketUses::default();
        let a = uses.shared("b").await.expect("shared");
        let clone = a.clone();
        let u = uses.clone();
        let waiter = tokio::spawn(async move { u.exclusive_within("b", Duration::from_secs(30)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(a);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "a clone still holds the use");
        drop(clone);
        let x = waiter
            .await
            .expect("join")
            .expect("exclusive after the shared ones");
        // A shared use that arrives now waits for the exclusive one.
        let u = uses.clone();
        let later = tokio::spawn(async move { u.shared("b").await.map(drop) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !later.is_finished(),
            "a shared use went in beside an exclusive one"
        );
        drop(x);
        later.await.expect("join").expect("shared after");
        assert_eq!(uses.entries(), 0);
    }

    #[tokio::test]
    async fn a_refused_exclusive_use_lets_waiting_shared_ones_through() {
        let uses = BucketUses::default();
        let a = uses.shared("b").await.expect("shared");
        let u = uses.clone();
        let x = tokio::spawn(async move { u.exclusive_within("b", Duration::from_millis(100)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let u = uses.clone();
        let queued = tokio::spawn(async move { u.shared("b").await });
        assert!(x.await.expect("join").is_err());
        let q = queued.await.expect("join").expect("shared after the refusal");
        drop((a, q));
        assert_eq!(uses.entries(), 0);
    }
}
