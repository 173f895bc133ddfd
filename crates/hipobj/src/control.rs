//! The S3 side of a transfer, as the library sees it: hand a token to the
//! application's S3 client, and get the server's `x-amz-rdma-reply` back.
//!
//! The C API adapts `hipObjOps_t` to this trait; Rust callers implement it
//! over their own S3 client.

/// Why the application's S3 exchange failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ControlError(pub String);

/// The application's S3 client, driven by one transfer.
///
/// A transfer calls [`Control::send_request`] and then [`Control::recv_reply`],
/// once, or twice when the server asks to bind a connection first (see
/// docs/protocol.md). Both run on the thread that started the transfer, with
/// no library lock held, so they may call into the library.
pub trait Control {
    /// Sends the S3 request with `token` in the `x-amz-rdma-token` header.
    fn send_request(&mut self, token: &str) -> Result<(), ControlError>;

    /// Writes the response's `x-amz-rdma-reply` value into `reply` and says
    /// how many bytes it wrote.
    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError>;

    /// The addresses of the server that the latest request went to (its
    /// host, resolved), where the application knows them; asked after each
    /// reply. A binding reply may then only name a server QP at one of them
    /// (docs/protocol.md §8, `crate::AllowPeer` for NAT and multi-homed
    /// servers), unless [`Control::control_channel`] says the request went
    /// over verified TLS. The default, `None`, falls back to
    /// [`crate::Instance::set_server_addrs`].
    fn server_addrs(&self) -> Option<Vec<std::net::IpAddr>> {
        None
    }

    /// How the latest request reached the server; asked with
    /// [`Control::server_addrs`]. Say [`crate::ControlChannel::VerifiedTls`]
    /// only for a request sent over TLS whose certificate the application's
    /// HTTP client verified for the endpoint's host: a binding reply may
    /// then name a server QP at any unicast address (docs/protocol.md §8).
    /// The default, [`crate::ControlChannel::Unauthenticated`], keeps the
    /// check against the endpoint's addresses.
    fn control_channel(&self) -> crate::ControlChannel {
        crate::ControlChannel::Unauthenticated
    }
}
