//! hipObject's wire formats, as pure code: no I/O, no `unsafe`, no
//! allocation on the parse paths, and no panic on any input.
//!
//! hipObject moves S3 object data over RDMA. A client sends an ordinary S3
//! request with a [`TOKEN_HEADER`] header naming its queue pair and buffer;
//! the server moves the bytes with RDMA and answers with a
//! [`REPLY_HEADER`] header (and [`BYTES_HEADER`] with the byte count). This
//! crate defines the two header values that carry protocol data:
//!
//! - [`token`]: the 44-byte binary token ([`Token`]), hex-encoded as 88
//!   lowercase digits ([`HexToken`]) and decoded from either case
//!   ([`Token::decode`]).
//! - [`reply`]: the `x-amz-rdma-reply` grammar ([`parse_reply`] into a
//!   [`Reply`], and `Display` back to the canonical text), including the
//!   `409:<token>:<psn>` binding reply of hipObject's RC handshake and the
//!   `NNN:<token>:<count>` success reply that names the server queue pair
//!   and the bytes it moved.
//!
//! - [`landed`]: the GET proof: one WRITE WITH IMMEDIATE of the whole range,
//!   the largest GET, and the client's [`landed::Tally`].
//! - [`rc_v2`]: the headers, values and messages of the `hipobj-rc-v2`
//!   control protocol (PREPARE / READY / CANCEL on `/.hipobj-rc/`).
//!
//! Both sides use it: the client to mint tokens and read replies, the server
//! (and test servers) to read tokens and write replies.
//!
//! # Example
//!
//! ```
//! use hipobj_proto::{parse_reply, Reply, Token, Transport};
//!
//! let server = Token {
//!     transport: Transport::Rc,
//!     qpn: 0x1234,
//!     gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 7],
//!     rkey: 0,
//!     addr: 0,
//!     len: 0,
//!     port: 1,
//!     lid: 0,
//! };
//! // The server binds a queue pair and tells the client to connect to it.
//! let header = Reply::Bind { token: server, psn: 0x00c0de }.to_string();
//! assert!(header.starts_with("409:01341200"));
//! assert!(header.ends_with(":00c0de"));
//!
//! // The client reads it back.
//! let reply = parse_reply(header.as_bytes())?;
//! assert_eq!(reply.http_code(), 409);
//! assert!(!reply.is_success());
//! assert_eq!(reply.peer_token(), Some(&server));
//! assert_eq!(server.client_ipv4(), Some(std::net::Ipv4Addr::new(10, 0, 0, 7)));
//! # Ok::<(), hipobj_proto::ReplyError>(())
//! ```

mod checksum;
mod direction;
pub mod landed;
pub mod rc_v2;
pub mod reply;
pub mod token;

pub use direction::Direction;
pub use reply::{
    COUNT_HEX_LEN, PSN_HEX_LEN, PSN_MAX, REPLY_BIND_STATUS, REPLY_NOT_IMPLEMENTED, Reply, ReplyError,
    SUCCESS_CODES, is_success_code, parse_reply,
};
pub use token::{
    HexToken, TOKEN_HEX_LEN, TOKEN_LEN, Token, TokenError, TokenHeaderError, Transport, token_from_header,
};

/// Request header that carries the client's hex [`Token`].
pub const TOKEN_HEADER: &str = "x-amz-rdma-token";

/// Response header that carries the server's [`Reply`].
pub const REPLY_HEADER: &str = "x-amz-rdma-reply";

/// Response header with the decimal number of bytes the server moved.
pub const BYTES_HEADER: &str = "x-amz-rdma-bytes-transferred";
