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
//!
//! The core depends on the seams only: a program passes the [`Platform`]
//! to run on, which for production comes from the `hipobj-system` crate
//! and in tests from `hipobj_platform::fake`.
//!
//! [`Platform`]: hipobj_platform::Platform

mod abandoned;
mod buffers;
mod checksum;
mod client;
mod config;
mod connection;
mod control;
mod device;
mod direction;
mod error;
mod instance;
mod library;
mod nic;
mod options;
mod peer;
mod pool;
mod rc_v2;
mod rc_v2_state;
mod windows;

// The public API: what programs built on the core (the C skin, the CLI, the
// aws-sdk-s3 integration) use. The platform they run on comes from the
// composition root, `hipobj-system`, or from the fakes in tests.
pub use buffers::{BufKind, MAX_BUFFER_SIZE, MAX_BUFFERS, check_region, check_size};
pub use client::{Client, ClientBuilder, RcV2, Registration};
// What one transfer grants the server through a connection (the fence
// benchmark builds one by hand).
pub use config::Config;
pub use connection::Grant;
pub use control::{Control, ControlError};
pub use device::{FenceMode, RdmaDevice};
pub use direction::{Direction, SyncDirection};
pub use error::{Error, ErrorKind, Result};
pub use instance::Instance;
pub use library::Library;
pub use nic::{Chosen, choose as choose_nic};
pub use options::{ENV_VARS, Options};
pub use peer::{AllowPeer, ControlChannel, resolve_host};
pub use rc_v2::{RC_V2_MAX_SIZE, RC_V2_PROOF_WAIT, RcV2Session};
