//! Which way a transfer, or a staging copy, moves bytes.

pub use hipobj_proto::Direction;

/// Which way `sync` copies a staged buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncDirection {
    /// Device memory to the staging buffer (before a PUT).
    ToHost,
    /// The staging buffer to device memory (after a GET).
    ToDevice,
}
