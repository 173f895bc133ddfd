//! The damage the store met, for the operator's metrics: objects skipped by
//! listings because their files do not read back, reads refused because
//! bytes disagree with their checksums, and requests refused because a
//! bucket's metadata is missing or damaged. Counted for the whole
//! process (every store in it), since a metric is read per process.

use std::sync::atomic::{AtomicU64, Ordering};

static SKIPPED_IN_LISTINGS: AtomicU64 = AtomicU64::new(0);
static CHECKSUM_MISMATCHES: AtomicU64 = AtomicU64::new(0);
static METADATA_REFUSALS: AtomicU64 = AtomicU64::new(0);

/// The counts so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Damage {
    /// Entries a listing left out because their files are damaged.
    pub skipped_in_listings: u64,
    /// Reads that failed because stored bytes disagree with their checksum.
    pub checksum_mismatches: u64,
    /// Requests refused because a bucket's metadata (its owner record, a
    /// setting) is missing or damaged.
    pub metadata_refusals: u64,
}

/// The counts so far.
pub fn counts() -> Damage {
    Damage {
        skipped_in_listings: SKIPPED_IN_LISTINGS.load(Ordering::Relaxed),
        checksum_mismatches: CHECKSUM_MISMATCHES.load(Ordering::Relaxed),
        metadata_refusals: METADATA_REFUSALS.load(Ordering::Relaxed),
    }
}

/// Counts an entry a listing left out.
pub fn skipped_in_listing() {
    SKIPPED_IN_LISTINGS.fetch_add(1, Ordering::Relaxed);
}

/// Counts a read refused for a checksum mismatch.
pub fn checksum_mismatch() {
    CHECKSUM_MISMATCHES.fetch_add(1, Ordering::Relaxed);
}

/// Counts a request refused for missing or damaged bucket metadata.
pub fn metadata_refusal() {
    METADATA_REFUSALS.fetch_add(1, Ordering::Relaxed);
}
