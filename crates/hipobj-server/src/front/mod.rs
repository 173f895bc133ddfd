//! The front door: what every connection meets before the S3 service.
//!
//! * [`server`]: binding, accepting, and serving connections until stopped;
//! * [`conn`], [`shares`], [`proxy_protocol`], [`tls`]: one connection's
//!   socket options and timeouts, each address's share of the slots, the
//!   PROXY header of a trusted load balancer, and TLS;
//! * [`body`], [`unsized_body`]: what a request body is held to on arrival;
//! * [`service`]: [`service::Front`], which answers the server's own paths
//!   (health, metrics, the `hipobj-rc-v2` control path, CORS preflights)
//!   and hands everything else to s3s.

pub(crate) mod body;
pub(crate) mod conn;
pub(crate) mod proxy_protocol;
pub(crate) mod server;
pub(crate) mod service;
pub(crate) mod shares;
pub mod tls;
pub(crate) mod unsized_body;
