//! Which way a transfer, or a staging copy, moves bytes.

/// Which way a transfer moves bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// The server RDMA WRITEs into the buffer.
    Get,
    /// The server RDMA READs from the buffer.
    Put,
}

/// Which way `sync` copies a staged buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncDirection {
    /// Device memory to the staging buffer (before a PUT).
    ToHost,
    /// The staging buffer to device memory (after a GET).
    ToDevice,
}
