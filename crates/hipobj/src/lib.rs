//! hipObject: move the bytes of S3 objects straight between an S3 server and
//! GPU or host memory by RDMA.
//!
//! This crate is the library's core: it chooses the NIC, registers buffers,
//! mints tokens, leases RC connections and runs the transfer sequence of
//! docs/protocol.md. It reaches the outside world only through the
//! [`hipobj_platform`] seams, and talks S3 only through the application's
//! [`Control`]. The C ABI of hipobj.h (crate `hipobj-capi`) is a thin skin
//! over [`Library`] and [`Instance`].
//!
//! Layers, top to bottom: [`Library`] (the current instance, init and
//! shutdown) → [`Instance`] (argument checks, the transfer sequence,
//! staging) → buffers, pool, connections, device → the platform seams.

pub mod abandoned;
pub mod buffers;
pub mod client;
pub mod connection;
pub mod control;
pub mod device;
pub mod error;
pub mod instance;
pub mod library;
pub mod nic;
pub mod options;
pub mod pool;
pub mod system;

pub use client::{Client, ClientBuilder, Registration};
pub use control::{Control, ControlError};
pub use error::{Error, ErrorKind, Result};
pub use instance::{Config, Direction, Instance, SyncDirection};
pub use library::Library;
pub use options::Options;
