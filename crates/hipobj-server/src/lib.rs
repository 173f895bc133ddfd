//! `hipobj-server`: an S3 server that also serves hipObject's RDMA
//! transfers (docs/protocol.md §4, docs/server.md).
//!
//! The layers, outside in:
//!
//! * the front door (`front`): connections, TLS, body limits, and the
//!   server's own paths (`/.hipobj/...`, `/.hipobj-rc/...`) before s3s;
//! * `s3`: S3 parsing and SigV4 (s3s), and the access policy;
//! * [`rdma`]: the RDMA layer, which serves GetObject, PutObject and
//!   UploadPart requests carrying `x-amz-rdma-token` and passes everything
//!   else through;
//! * the store behind it (crate `hipobj-store`), any [`s3s::S3`]: the
//!   filesystem store, or a forwarder to another S3 service.
//!
//! [`Server::start`] runs it in-process and returns a [`Handle`]; the
//! `hipobj-server` binary is a thin command line over the same call.

mod access_log;
pub mod config;
pub mod config_text;
pub mod cpu;
pub mod drain;
mod front;
mod health;
mod keys;
mod limit_log;
pub mod logging;
mod metrics;
mod metrics_http;
mod operation;
pub mod rdma;
mod s3;
mod store;

pub use config::Config;
pub use front::server::{Handle, Server};
pub use front::tls;

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
