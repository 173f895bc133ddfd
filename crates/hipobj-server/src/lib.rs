//! `hipobj-server`: an S3 server that also serves hipObject's RDMA
//! transfers (docs/protocol.md §4, docs/server.md).
//!
//! The layers, outside in:
//!
//! * [`s3`]: HTTP (hyper), S3 parsing and SigV4 (s3s), the access policy,
//!   and the server's own endpoints (`/.hipobj/metrics`);
//! * [`rdma`]: the RDMA layer, which serves GetObject, PutObject and
//!   UploadPart requests carrying `x-amz-rdma-token` and passes everything
//!   else through;
//! * the store behind it (crate `hipobj-store`), any [`s3s::S3`]: the
//!   filesystem store, or a forwarder to another S3 service.
//!
//! [`Server::start`] runs it in-process and returns a [`Handle`]; the
//! `hipobj-server` binary is a thin command line over the same call.

pub mod access_log;
pub mod body;
pub mod config;
pub mod config_text;
pub mod conn;
pub mod cpu;
pub mod drain;
pub mod health;
pub mod keys;
pub mod limit_log;
pub mod logging;
pub mod metrics;
pub mod metrics_http;
pub mod operation;
mod proxy_protocol;
pub mod rdma;
pub mod s3;
mod server;
pub mod shares;
mod store;
pub mod tls;
pub mod unsized_body;

pub use config::Config;
pub use server::{Handle, Server};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is unusable.
    #[error("configuration: {0}")]
    Config(String),
    /// The store could not be opened.
    #[error("storage: {0}")]
    Storage(String),
    /// The RDMA device could not be opened.
    #[error("RDMA: {0}")]
    Rdma(String),
    /// The TLS certificate or key is unusable.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// A socket or file operation failed.
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
}
