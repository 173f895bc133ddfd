//! The `hipobj-rc-v2` control protocol: the words both ends of it use.
//!
//! `hipobj-rc-v2` is the RC handshake that servers outside this project
//! speak (docs/protocol.md, "hipobj-rc-v2"). It takes three SigV4-signed,
//! body-less `POST` requests on the control path [`PATH_PREFIX`]:
//!
//! 1. [`PREPARE_PATH`] ([`PrepareRequest`] → [`PrepareResponse`]): the
//!    client names the operation, the object, the size, its queue pair (in an
//!    RC [`Token`]), its first PSN and a [`Cookie`]. The server creates a
//!    queue pair and a staging buffer for the session and answers with them.
//! 2. [`READY_PATH`] ([`ReadyRequest`] → [`ReadyResponse`]): the client has
//!    connected its queue pair; the server connects its own and moves the
//!    bytes. A GET is the server's RDMA WRITE WITH IMMEDIATE into the
//!    client's buffer, a PUT the client's WRITE WITH IMMEDIATE into the
//!    staging buffer; the immediate value is the cookie in both directions.
//!    The response comes after the transfer.
//! 3. [`CANCEL_PATH`] ([`CancelRequest`]): drop a session; always
//!    [`Status::Cancelled`], even for a session the server does not know.
//!
//! This module has no I/O. Each message converts to a list of header
//! `(name, value)` pairs (`to_headers`) and back (`from_headers`, which takes
//! any iterator of `(name, value bytes)` so that it reads an `http::HeaderMap`
//! as easily as a test's array). Parsing is strict: every value has one
//! spelling, a header we read may appear only once, and any other
//! `x-amz-rdma-*` header is ignored. Header names are written lowercase and
//! matched without regard to case.
//!
//! # Example
//!
//! ```
//! use hipobj_proto::rc_v2::{Cookie, Direction, PrepareRequest, Psn, Size, ObjectPath};
//! use hipobj_proto::{Token, Transport};
//!
//! let client = Token {
//!     transport: Transport::Rc,
//!     qpn: 0x11,
//!     gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
//!     rkey: 0,
//!     addr: 0,
//!     len: 0,
//!     port: 1,
//!     lid: 0,
//! };
//! let prepare = PrepareRequest {
//!     op: Direction::Get,
//!     target: ObjectPath::new("bkt", "dir/obj")?,
//!     size: Size::new(4096).expect("in range"),
//!     offset: None,
//!     token: client,
//!     psn: Psn::new(1).expect("24-bit, non-zero"),
//!     cookie: Cookie::new(0x1a2b_3c4d).expect("non-zero"),
//!     client_mr: None,
//! };
//! let headers = prepare.to_headers();
//! let back = PrepareRequest::from_headers(headers.iter().map(|(n, v)| (*n, v.as_bytes())))?;
//! assert_eq!(back, prepare);
//! # Ok::<(), hipobj_proto::rc_v2::V2Error>(())
//! ```

use std::fmt;
use std::str::FromStr;

pub use crate::Direction;
use crate::token::{Token, Transport};

/// The protocol's name, the value of [`PROTOCOL_HEADER`].
pub const PROTOCOL: &str = "hipobj-rc-v2";

/// The control path: every v2 request goes to a path under it. `.hipobj-rc`
/// is not a valid bucket name, so a server routes it before S3 parsing.
pub const PATH_PREFIX: &str = "/.hipobj-rc/";
/// The PREPARE request's path.
pub const PREPARE_PATH: &str = "/.hipobj-rc/prepare";
/// The READY request's path.
pub const READY_PATH: &str = "/.hipobj-rc/ready";
/// The CANCEL request's path.
pub const CANCEL_PATH: &str = "/.hipobj-rc/cancel";
/// The HTTP method of every control request.
pub const METHOD: &str = "POST";

/// The SigV4 service name the upstream client signs control requests with
/// (a server accepts it beside `s3`).
pub const SIGV4_SERVICE: &str = "hipobj";

/// Every `x-amz-rdma-*` header: a server requires each one a request
/// carries to be among its SigV4 signed headers.
pub const HEADER_PREFIX: &str = "x-amz-rdma-";

/// Request and response header naming the protocol ([`PROTOCOL`]).
pub const PROTOCOL_HEADER: &str = "x-amz-rdma-protocol";
/// Response header of a server that does not speak the protocol (or not
/// now): its value is [`PROTOCOL_STATUS_UNSUPPORTED`], with status 501.
pub const PROTOCOL_STATUS_HEADER: &str = "x-amz-rdma-protocol-status";
/// The value of [`PROTOCOL_STATUS_HEADER`] that tells the client to fall
/// back to plain HTTP.
pub const PROTOCOL_STATUS_UNSUPPORTED: &str = "unsupported";
/// PREPARE: `GET` or `PUT` ([`Direction`]).
pub const OP_HEADER: &str = "x-amz-rdma-op";
/// PREPARE: the object, `/bucket/key` ([`ObjectPath`]).
pub const TARGET_HEADER: &str = "x-amz-rdma-target";
/// PREPARE: the number of bytes, decimal ([`Size`]).
pub const SIZE_HEADER: &str = "x-amz-rdma-size";
/// PREPARE, optional: where a GET starts in the object, decimal.
pub const OFFSET_HEADER: &str = "x-amz-rdma-offset";
/// PREPARE: the client's RC token (88 hex digits); the same header as the
/// binding protocol's [`crate::TOKEN_HEADER`].
pub const TOKEN_HEADER: &str = crate::TOKEN_HEADER;
/// PREPARE request: the client's first PSN; PREPARE response: the
/// server's. Six hex digits ([`Psn`]).
pub const PSN_HEADER: &str = "x-amz-rdma-psn";
/// PREPARE and READY requests, READY response: the session cookie, eight
/// hex digits ([`Cookie`]).
pub const COOKIE_HEADER: &str = "x-amz-rdma-cookie";
/// The address of a registered buffer, hex: the client's in requests, the
/// staging buffer's in the PREPARE response.
pub const MR_ADDR_HEADER: &str = "x-amz-rdma-mr-addr";
/// The remote key of that buffer, hex.
pub const MR_RKEY_HEADER: &str = "x-amz-rdma-mr-rkey";
/// A queue pair number, hex: the client's in requests, the server's in the
/// PREPARE response ([`Qpn`]).
pub const QPN_HEADER: &str = "x-amz-rdma-qpn";
/// PREPARE response, READY and CANCEL requests: the session id, 32 hex
/// digits ([`SessionId`]).
pub const SESSION_HEADER: &str = "x-amz-rdma-session";
/// PREPARE response: `200:` and the server's token.
pub const REPLY_HEADER: &str = crate::REPLY_HEADER;
/// READY response: the bytes moved, decimal.
pub const BYTES_HEADER: &str = crate::BYTES_HEADER;
/// READY response to a PUT: the stored object's ETag.
pub const ETAG_HEADER: &str = "x-amz-rdma-etag";
/// READY response to a PUT, optional: the stored object's version id.
pub const VERSION_ID_HEADER: &str = "x-amz-rdma-version-id";
/// READY response, optional: the CRC-64/NVME of the bytes, base64 (the
/// Ceph RGW fork's form; [`Crc64Nvme::from_base64`]).
pub const CHECKSUM_CRC64NVME_HEADER: &str = "x-amz-rdma-checksum-crc64nvme";
/// READY response, optional: `CRC64NVME <base64>`, the same checksum in the
/// form of hipObject upstream and versitygw ([`Crc64Nvme::from_field`]).
pub const CHECKSUM_HEADER: &str = "x-amz-rdma-checksum";

pub use crate::checksum::Crc64Nvme;

/// The largest [`Size`] of one transfer: 2^31 - 1 bytes.
pub const MAX_SIZE: u32 = 0x7fff_ffff;

/// The statuses of the control path and what each one means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// 200: PREPARE made a session, or READY moved the bytes.
    Ok,
    /// 204: CANCEL (always, even for an unknown session).
    Cancelled,
    /// 400: a header is missing, repeated or malformed, or the request
    /// cannot be served as asked (a GET without a client buffer).
    BadRequest,
    /// 403: the request is not signed as the protocol requires, or READY's
    /// cookie differs from PREPARE's (the session is dropped).
    Forbidden,
    /// 404: the bucket or object of a GET does not exist.
    NotFound,
    /// 408: the transfer did not complete in time.
    Timeout,
    /// 409: the session is unknown, expired, already used, or another
    /// user's.
    UnknownSession,
    /// 413: the size is over [`MAX_SIZE`] or over what the server serves.
    TooLarge,
    /// 416: a GET's offset + size runs past the end of the object.
    RangeNotSatisfiable,
    /// 500: the server failed.
    Internal,
    /// 501 (with [`PROTOCOL_STATUS_HEADER`]): the server does not speak the
    /// protocol, or not now; fall back to HTTP.
    Unsupported,
    /// 503: too many sessions are open.
    Busy,
}

impl Status {
    /// Every status, in code order.
    pub const ALL: [Status; 12] = [
        Status::Ok,
        Status::Cancelled,
        Status::BadRequest,
        Status::Forbidden,
        Status::NotFound,
        Status::Timeout,
        Status::UnknownSession,
        Status::TooLarge,
        Status::RangeNotSatisfiable,
        Status::Internal,
        Status::Unsupported,
        Status::Busy,
    ];

    /// The HTTP status code.
    pub const fn code(self) -> u16 {
        match self {
            Status::Ok => 200,
            Status::Cancelled => 204,
            Status::BadRequest => 400,
            Status::Forbidden => 403,
            Status::NotFound => 404,
            Status::Timeout => 408,
            Status::UnknownSession => 409,
            Status::TooLarge => 413,
            Status::RangeNotSatisfiable => 416,
            Status::Internal => 500,
            Status::Unsupported => 501,
            Status::Busy => 503,
        }
    }

    /// The status with this code, if the protocol has one.
    pub fn from_code(code: u16) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.code() == code)
    }
}

/// Why a v2 message was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum V2Error {
    /// [`PROTOCOL_HEADER`] is missing or names another protocol: answer
    /// 501 with [`PROTOCOL_STATUS_UNSUPPORTED`].
    #[error("{PROTOCOL_HEADER} is missing or is not {PROTOCOL}")]
    Unsupported,
    /// A required header is absent.
    #[error("header {0} is missing")]
    Missing(&'static str),
    /// A header appears more than once.
    #[error("header {0} appears more than once")]
    Duplicate(&'static str),
    /// A header's value does not have the one spelling it may have.
    #[error("header {0} is malformed")]
    Malformed(&'static str),
    /// [`SIZE_HEADER`] is a well-formed number above [`MAX_SIZE`].
    #[error("size {0} is over the protocol's maximum of {MAX_SIZE}")]
    TooLarge(u64),
    /// The PREPARE response's reply token does not name the queue pair of
    /// [`QPN_HEADER`], is not RC, or has a zero GID.
    #[error("the reply token is not a usable RC endpoint matching {QPN_HEADER}")]
    BadReplyToken,
}

impl V2Error {
    /// The status a server answers a request it rejected with.
    pub const fn status(&self) -> Status {
        match self {
            V2Error::Unsupported => Status::Unsupported,
            V2Error::TooLarge(_) => Status::TooLarge,
            V2Error::Missing(_) | V2Error::Duplicate(_) | V2Error::Malformed(_) | V2Error::BadReplyToken => {
                Status::BadRequest
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------

/// A packet sequence number: 24 bits, not zero; six hex digits on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Psn(u32);

impl Psn {
    /// Number of hex digits on the wire.
    pub const HEX_LEN: usize = 6;

    /// `value` if it is in 1..=0xffffff.
    pub const fn new(value: u32) -> Option<Psn> {
        if value != 0 && value <= crate::PSN_MAX {
            Some(Psn(value))
        } else {
            None
        }
    }

    /// The number.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// Parses exactly six hex digits (either case) naming a non-zero PSN.
    pub fn parse(value: &[u8]) -> Option<Psn> {
        let v = parse_hex_exact(value, Self::HEX_LEN)?;
        Psn::new(u32::try_from(v).ok()?)
    }
}

impl fmt::Display for Psn {
    /// Six lowercase hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:06x}", self.0)
    }
}

/// The session cookie: 32 bits, not zero; eight hex digits on the wire. It
/// is the immediate value of the one WRITE WITH IMMEDIATE in either
/// direction (in the verbs' host-order `imm` field; on the wire it travels
/// big-endian, as every immediate does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cookie(u32);

impl Cookie {
    /// Number of hex digits on the wire.
    pub const HEX_LEN: usize = 8;

    /// `value` if it is not zero.
    pub const fn new(value: u32) -> Option<Cookie> {
        if value != 0 { Some(Cookie(value)) } else { None }
    }

    /// The number, which is also the immediate value.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// Parses exactly eight hex digits (either case) naming a non-zero value.
    pub fn parse(value: &[u8]) -> Option<Cookie> {
        let v = parse_hex_exact(value, Self::HEX_LEN)?;
        Cookie::new(u32::try_from(v).ok()?)
    }
}

impl fmt::Display for Cookie {
    /// Eight lowercase hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:08x}", self.0)
    }
}

/// A session id: 16 bytes, 32 hex digits on the wire. The server draws it
/// at random.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionId(pub [u8; 16]);

impl SessionId {
    /// Number of hex digits on the wire.
    pub const HEX_LEN: usize = 32;

    /// Parses exactly 32 hex digits (either case).
    pub fn parse(value: &[u8]) -> Option<SessionId> {
        if value.len() != Self::HEX_LEN {
            return None;
        }
        let mut out = [0u8; 16];
        for (byte, pair) in out.iter_mut().zip(value.chunks_exact(2)) {
            *byte = (nibble(pair[0])? << 4) | nibble(pair[1])?;
        }
        Some(SessionId(out))
    }
}

impl fmt::Display for SessionId {
    /// 32 lowercase hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({self})")
    }
}

/// The byte count of a transfer: 1..=[`MAX_SIZE`], decimal on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Size(u32);

impl Size {
    /// `value` if it is in 1..=[`MAX_SIZE`].
    pub const fn new(value: u64) -> Option<Size> {
        if value != 0 && value <= MAX_SIZE as u64 {
            Some(Size(value as u32))
        } else {
            None
        }
    }

    /// The number of bytes.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The number of bytes, as a `u64`.
    pub const fn get_u64(self) -> u64 {
        self.0 as u64
    }

    /// Parses a decimal size: [`V2Error::TooLarge`] for a well-formed number
    /// over [`MAX_SIZE`], [`V2Error::Malformed`] for anything else that is
    /// not 1..=[`MAX_SIZE`].
    pub fn parse(value: &[u8]) -> Result<Size, V2Error> {
        let n = parse_decimal(value).ok_or(V2Error::Malformed(SIZE_HEADER))?;
        if n == 0 {
            return Err(V2Error::Malformed(SIZE_HEADER));
        }
        Size::new(n).ok_or(V2Error::TooLarge(n))
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A queue pair number: 24 bits, not zero; hex of 1 to 8 digits on the
/// wire (the upstream client writes no leading zeros), written without
/// leading zeros.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Qpn(u32);

impl Qpn {
    /// `value` if it is in 1..=0xffffff.
    pub const fn new(value: u32) -> Option<Qpn> {
        if value != 0 && value <= 0x00ff_ffff {
            Some(Qpn(value))
        } else {
            None
        }
    }

    /// The number.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// Parses 1 to 8 hex digits (either case) naming 1..=0xffffff.
    pub fn parse(value: &[u8]) -> Option<Qpn> {
        Qpn::new(u32::try_from(parse_hex_var(value, 8)?).ok()?)
    }
}

impl fmt::Display for Qpn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

/// A registered buffer as the peer sees it: its address and remote key,
/// hex on the wire (1 to 16 and 1 to 8 digits), written without leading
/// zeros.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteMr {
    /// The buffer's address in its owner's address space.
    pub addr: u64,
    /// Its remote key.
    pub rkey: u32,
}

/// Parses an address header's value: 1 to 16 hex digits.
pub fn parse_mr_addr(value: &[u8]) -> Option<u64> {
    parse_hex_var(value, 16)
}

/// Parses a remote key header's value: 1 to 8 hex digits.
pub fn parse_mr_rkey(value: &[u8]) -> Option<u32> {
    u32::try_from(parse_hex_var(value, 8)?).ok()
}

/// The object a PREPARE names: `/bucket/key`, the key percent-encoded on the
/// wire (as in an S3 path).
///
/// The wire form starts with `/`, has a non-empty bucket without `%`, then
/// `/` and a non-empty key; every byte is visible ASCII (`!`..`~`), each
/// `%` starts a two-digit hex escape, and the decoded key is UTF-8 without
/// NUL. A query (`?...`) is not accepted.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectPath {
    bucket: String,
    key: String,
}

impl ObjectPath {
    /// A target from a bucket and a decoded key.
    pub fn new(bucket: &str, key: &str) -> Result<ObjectPath, V2Error> {
        let bad = V2Error::Malformed(TARGET_HEADER);
        if bucket.is_empty()
            || key.is_empty()
            || key.contains('\0')
            || !bucket
                .bytes()
                .all(|b| b.is_ascii_graphic() && !matches!(b, b'/' | b'%' | b'?'))
        {
            return Err(bad);
        }
        Ok(ObjectPath {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
        })
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The key, decoded.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Parses the wire form (see the type's docs).
    pub fn parse(value: &[u8]) -> Result<ObjectPath, V2Error> {
        let bad = V2Error::Malformed(TARGET_HEADER);
        let rest = value.strip_prefix(b"/").ok_or(bad.clone())?;
        if !rest.iter().all(|b| b.is_ascii_graphic()) || rest.contains(&b'?') {
            return Err(bad);
        }
        let slash = rest.iter().position(|&b| b == b'/').ok_or(bad.clone())?;
        let (bucket, key) = (&rest[..slash], &rest[slash + 1..]);
        let bucket = std::str::from_utf8(bucket).map_err(|_| bad.clone())?;
        let key = percent_decode(key).ok_or(bad)?;
        ObjectPath::new(bucket, &key)
    }
}

impl fmt::Display for ObjectPath {
    /// `/bucket/key` with every key byte other than unreserved characters
    /// and `/` percent-encoded.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "/{}/", self.bucket)?;
        for b in self.key.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
                write!(f, "{}", char::from(b))?;
            } else {
                write!(f, "%{b:02X}")?;
            }
        }
        Ok(())
    }
}

impl FromStr for ObjectPath {
    type Err = V2Error;
    fn from_str(s: &str) -> Result<ObjectPath, V2Error> {
        ObjectPath::parse(s.as_bytes())
    }
}

// ---------------------------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------------------------

/// The PREPARE request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareRequest {
    /// GET or PUT.
    pub op: Direction,
    /// The object.
    pub target: ObjectPath,
    /// The number of bytes.
    pub size: Size,
    /// Where a GET starts in the object ([`OFFSET_HEADER`]); `None` is 0.
    pub offset: Option<u64>,
    /// The client's queue pair: an RC token ([`Transport::Rc`]) or the
    /// all-zero token (a server on the same device).
    pub token: Token,
    /// The client's first PSN: the server's receive PSN.
    pub psn: Psn,
    /// The session cookie.
    pub cookie: Cookie,
    /// The client's buffer and QPN, which the upstream client sends here as
    /// well as in READY (a server reads them from READY).
    pub client_mr: Option<(RemoteMr, Qpn)>,
}

impl PrepareRequest {
    /// The headers of the request, protocol header first.
    pub fn to_headers(&self) -> Vec<(&'static str, String)> {
        let mut h = vec![
            (PROTOCOL_HEADER, PROTOCOL.to_owned()),
            (OP_HEADER, self.op.as_str().to_owned()),
            (TARGET_HEADER, self.target.to_string()),
            (SIZE_HEADER, self.size.to_string()),
        ];
        if let Some(offset) = self.offset {
            h.push((OFFSET_HEADER, offset.to_string()));
        }
        h.push((TOKEN_HEADER, self.token.encode().to_string()));
        h.push((PSN_HEADER, self.psn.to_string()));
        h.push((COOKIE_HEADER, self.cookie.to_string()));
        if let Some((mr, qpn)) = self.client_mr {
            push_mr(&mut h, mr, qpn);
        }
        h
    }

    /// Reads a request: [`V2Error::Unsupported`] first if it is not v2, then
    /// each header in turn. The token must be RC or all zero; the client
    /// buffer headers are optional, but all three or none.
    pub fn from_headers<'n, 'v>(
        headers: impl IntoIterator<Item = (&'n str, &'v [u8])>,
    ) -> Result<Self, V2Error> {
        let f = Fields::collect(
            headers,
            &[
                PROTOCOL_HEADER,
                OP_HEADER,
                TARGET_HEADER,
                SIZE_HEADER,
                OFFSET_HEADER,
                TOKEN_HEADER,
                PSN_HEADER,
                COOKIE_HEADER,
                MR_ADDR_HEADER,
                MR_RKEY_HEADER,
                QPN_HEADER,
            ],
        )?;
        f.check_protocol()?;
        let op = f.parse(OP_HEADER, Direction::parse)?;
        let target = ObjectPath::parse(f.required(TARGET_HEADER)?)?;
        let size = Size::parse(f.required(SIZE_HEADER)?)?;
        let offset = f.optional(OFFSET_HEADER, parse_decimal)?;
        let token = f.parse(TOKEN_HEADER, |v| {
            let t = Token::decode(v).ok()?;
            (t.transport == Transport::Rc || t == zero_token()).then_some(t)
        })?;
        let psn = f.parse(PSN_HEADER, Psn::parse)?;
        let cookie = f.parse(COOKIE_HEADER, Cookie::parse)?;
        let client_mr = f.client_mr_all_or_none()?;
        Ok(PrepareRequest {
            op,
            target,
            size,
            offset,
            token,
            psn,
            cookie,
            client_mr,
        })
    }
}

/// The all-zero token, which a client on the server's own device may send.
pub fn zero_token() -> Token {
    Token {
        transport: Transport::Dc,
        qpn: 0,
        gid: [0; 16],
        rkey: 0,
        addr: 0,
        len: 0,
        port: 0,
        lid: 0,
    }
}

/// The PREPARE response (status 200).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrepareResponse {
    /// The server's token: RC, its QPN and GID, the staging buffer's rkey,
    /// address and length, its port. It travels as `200:<token>` in
    /// [`REPLY_HEADER`].
    pub token: Token,
    /// The session id.
    pub session: SessionId,
    /// The server's first PSN: the client's receive PSN.
    pub psn: Psn,
}

impl PrepareResponse {
    /// The server's QPN, as [`QPN_HEADER`] carries it.
    pub fn qpn(&self) -> u32 {
        self.token.qpn
    }

    /// The staging buffer, as [`MR_ADDR_HEADER`] and [`MR_RKEY_HEADER`] carry it.
    pub fn staging(&self) -> RemoteMr {
        RemoteMr {
            addr: self.token.addr,
            rkey: self.token.rkey,
        }
    }

    /// The headers of the response.
    pub fn to_headers(&self) -> Vec<(&'static str, String)> {
        vec![
            (PROTOCOL_HEADER, PROTOCOL.to_owned()),
            (REPLY_HEADER, format!("200:{}", self.token.encode())),
            (SESSION_HEADER, self.session.to_string()),
            (PSN_HEADER, self.psn.to_string()),
            (QPN_HEADER, format!("{:x}", self.token.qpn)),
            (MR_ADDR_HEADER, format!("{:x}", self.token.addr)),
            (MR_RKEY_HEADER, format!("{:x}", self.token.rkey)),
        ]
    }

    /// Reads a 200 response as the upstream client does, and a little
    /// stricter: the reply is exactly `200:` and a token, the token is RC
    /// with a non-zero GID, and [`QPN_HEADER`], [`MR_ADDR_HEADER`] and
    /// [`MR_RKEY_HEADER`] agree with it.
    pub fn from_headers<'n, 'v>(
        headers: impl IntoIterator<Item = (&'n str, &'v [u8])>,
    ) -> Result<Self, V2Error> {
        let f = Fields::collect(
            headers,
            &[
                PROTOCOL_HEADER,
                REPLY_HEADER,
                SESSION_HEADER,
                PSN_HEADER,
                QPN_HEADER,
                MR_ADDR_HEADER,
                MR_RKEY_HEADER,
            ],
        )?;
        f.check_protocol()?;
        let token = f.parse(REPLY_HEADER, |v| Token::decode(v.strip_prefix(b"200:")?).ok())?;
        let session = f.parse(SESSION_HEADER, SessionId::parse)?;
        let psn = f.parse(PSN_HEADER, Psn::parse)?;
        let qpn = f.parse(QPN_HEADER, Qpn::parse)?;
        let addr = f.parse(MR_ADDR_HEADER, parse_mr_addr)?;
        let rkey = f.parse(MR_RKEY_HEADER, parse_mr_rkey)?;
        if token.transport != Transport::Rc
            || token.gid == [0; 16]
            || token.qpn != qpn.get()
            || token.addr != addr
            || token.rkey != rkey
        {
            return Err(V2Error::BadReplyToken);
        }
        Ok(PrepareResponse { token, session, psn })
    }
}

/// The READY request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadyRequest {
    /// The session PREPARE made.
    pub session: SessionId,
    /// The cookie PREPARE carried.
    pub cookie: Cookie,
    /// The client's buffer (required for a GET) and QPN.
    pub client_mr: Option<(RemoteMr, Qpn)>,
}

impl ReadyRequest {
    /// The headers of the request.
    pub fn to_headers(&self) -> Vec<(&'static str, String)> {
        let mut h = vec![
            (PROTOCOL_HEADER, PROTOCOL.to_owned()),
            (SESSION_HEADER, self.session.to_string()),
            (COOKIE_HEADER, self.cookie.to_string()),
        ];
        if let Some((mr, qpn)) = self.client_mr {
            push_mr(&mut h, mr, qpn);
        }
        h
    }

    /// Reads a request; the buffer headers are all three or none.
    pub fn from_headers<'n, 'v>(
        headers: impl IntoIterator<Item = (&'n str, &'v [u8])>,
    ) -> Result<Self, V2Error> {
        let f = Fields::collect(
            headers,
            &[
                PROTOCOL_HEADER,
                SESSION_HEADER,
                COOKIE_HEADER,
                MR_ADDR_HEADER,
                MR_RKEY_HEADER,
                QPN_HEADER,
            ],
        )?;
        f.check_protocol()?;
        let session = f.parse(SESSION_HEADER, SessionId::parse)?;
        let cookie = f.parse(COOKIE_HEADER, Cookie::parse)?;
        let client_mr = f.client_mr_all_or_none()?;
        Ok(ReadyRequest {
            session,
            cookie,
            client_mr,
        })
    }
}

/// The READY response (status 200), sent after the transfer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyResponse {
    /// The session's cookie, echoed.
    pub cookie: Cookie,
    /// The bytes moved (the session's size).
    pub bytes: u64,
    /// The stored object's ETag (PUT), as the S3 `ETag` header would carry it.
    pub etag: Option<String>,
    /// The stored object's version id (PUT), where the server versions.
    pub version_id: Option<String>,
    /// The CRC-64/NVME of the bytes, where the server sends it: written in
    /// both header forms, read from either (both, when both come, must
    /// agree).
    pub checksum_crc64nvme: Option<Crc64Nvme>,
}

impl ReadyResponse {
    /// The headers of the response.
    pub fn to_headers(&self) -> Vec<(&'static str, String)> {
        let mut h = vec![
            (PROTOCOL_HEADER, PROTOCOL.to_owned()),
            (COOKIE_HEADER, self.cookie.to_string()),
            (BYTES_HEADER, self.bytes.to_string()),
        ];
        for (name, value) in [(ETAG_HEADER, &self.etag), (VERSION_ID_HEADER, &self.version_id)] {
            if let Some(v) = value {
                h.push((name, v.clone()));
            }
        }
        if let Some(crc) = self.checksum_crc64nvme {
            h.push((CHECKSUM_HEADER, crc.to_field()));
            h.push((CHECKSUM_CRC64NVME_HEADER, crc.to_base64()));
        }
        h
    }

    /// Reads a 200 response. The optional values must be visible ASCII.
    pub fn from_headers<'n, 'v>(
        headers: impl IntoIterator<Item = (&'n str, &'v [u8])>,
    ) -> Result<Self, V2Error> {
        let f = Fields::collect(
            headers,
            &[
                PROTOCOL_HEADER,
                COOKIE_HEADER,
                BYTES_HEADER,
                ETAG_HEADER,
                VERSION_ID_HEADER,
                CHECKSUM_CRC64NVME_HEADER,
                CHECKSUM_HEADER,
            ],
        )?;
        f.check_protocol()?;
        let cookie = f.parse(COOKIE_HEADER, Cookie::parse)?;
        let bytes = f.parse(BYTES_HEADER, parse_decimal)?;
        let text = |v: &[u8]| {
            (!v.is_empty() && v.iter().all(|b| b.is_ascii_graphic()))
                .then(|| String::from_utf8(v.to_vec()).ok())
                .flatten()
        };
        Ok(ReadyResponse {
            cookie,
            bytes,
            etag: f.optional(ETAG_HEADER, text)?,
            version_id: f.optional(VERSION_ID_HEADER, text)?,
            checksum_crc64nvme: f.checksum()?,
        })
    }
}

/// The CANCEL request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CancelRequest {
    /// The session to drop.
    pub session: SessionId,
}

impl CancelRequest {
    /// The headers of the request.
    pub fn to_headers(&self) -> Vec<(&'static str, String)> {
        vec![
            (PROTOCOL_HEADER, PROTOCOL.to_owned()),
            (SESSION_HEADER, self.session.to_string()),
        ]
    }

    /// Reads a request.
    pub fn from_headers<'n, 'v>(
        headers: impl IntoIterator<Item = (&'n str, &'v [u8])>,
    ) -> Result<Self, V2Error> {
        let f = Fields::collect(headers, &[PROTOCOL_HEADER, SESSION_HEADER])?;
        f.check_protocol()?;
        Ok(CancelRequest {
            session: f.parse(SESSION_HEADER, SessionId::parse)?,
        })
    }
}

/// Whether a request's headers say it is v2 at all ([`PROTOCOL_HEADER`] is
/// exactly [`PROTOCOL`]), for a server deciding between 501 and parsing.
pub fn is_v2<'n, 'v>(headers: impl IntoIterator<Item = (&'n str, &'v [u8])>) -> bool {
    Fields::collect(headers, &[PROTOCOL_HEADER]).is_ok_and(|f| f.check_protocol().is_ok())
}

fn push_mr(h: &mut Vec<(&'static str, String)>, mr: RemoteMr, qpn: Qpn) {
    h.push((MR_ADDR_HEADER, format!("{:x}", mr.addr)));
    h.push((MR_RKEY_HEADER, format!("{:x}", mr.rkey)));
    h.push((QPN_HEADER, qpn.to_string()));
}

// ---------------------------------------------------------------------------------------------
// Header collection and number parsing
// ---------------------------------------------------------------------------------------------

/// The values of the headers one message reads, each seen at most once.
struct Fields<'v> {
    names: &'static [&'static str],
    values: Vec<Option<&'v [u8]>>,
}

impl<'v> Fields<'v> {
    fn collect<'n>(
        headers: impl IntoIterator<Item = (&'n str, &'v [u8])>,
        names: &'static [&'static str],
    ) -> Result<Self, V2Error> {
        let mut values = vec![None; names.len()];
        for (name, value) in headers {
            if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(name))
                && values[i].replace(value).is_some()
            {
                return Err(V2Error::Duplicate(names[i]));
            }
        }
        Ok(Fields { names, values })
    }

    fn get(&self, name: &'static str) -> Option<&'v [u8]> {
        let i = self.names.iter().position(|n| *n == name)?;
        self.values[i]
    }

    fn check_protocol(&self) -> Result<(), V2Error> {
        match self.get(PROTOCOL_HEADER) {
            Some(v) if v == PROTOCOL.as_bytes() => Ok(()),
            _ => Err(V2Error::Unsupported),
        }
    }

    fn required(&self, name: &'static str) -> Result<&'v [u8], V2Error> {
        self.get(name).ok_or(V2Error::Missing(name))
    }

    fn parse<T>(&self, name: &'static str, f: impl FnOnce(&[u8]) -> Option<T>) -> Result<T, V2Error> {
        f(self.required(name)?).ok_or(V2Error::Malformed(name))
    }

    fn optional<T>(
        &self,
        name: &'static str,
        f: impl FnOnce(&[u8]) -> Option<T>,
    ) -> Result<Option<T>, V2Error> {
        self.get(name)
            .map(|v| f(v).ok_or(V2Error::Malformed(name)))
            .transpose()
    }

    /// The checksum of either form; both, when both come, must agree.
    fn checksum(&self) -> Result<Option<Crc64Nvme>, V2Error> {
        let field = self.optional(CHECKSUM_HEADER, Crc64Nvme::from_field)?;
        let plain = self.optional(CHECKSUM_CRC64NVME_HEADER, Crc64Nvme::from_base64)?;
        match (field, plain) {
            (Some(a), Some(b)) if a != b => Err(V2Error::Malformed(CHECKSUM_HEADER)),
            (a, b) => Ok(a.or(b)),
        }
    }

    fn client_mr_all_or_none(&self) -> Result<Option<(RemoteMr, Qpn)>, V2Error> {
        let addr = self.optional(MR_ADDR_HEADER, parse_mr_addr)?;
        let rkey = self.optional(MR_RKEY_HEADER, parse_mr_rkey)?;
        let qpn = self.optional(QPN_HEADER, Qpn::parse)?;
        match (addr, rkey, qpn) {
            (Some(addr), Some(rkey), Some(qpn)) => Ok(Some((RemoteMr { addr, rkey }, qpn))),
            (None, None, None) => Ok(None),
            (None, _, _) => Err(V2Error::Missing(MR_ADDR_HEADER)),
            (_, None, _) => Err(V2Error::Missing(MR_RKEY_HEADER)),
            (_, _, None) => Err(V2Error::Missing(QPN_HEADER)),
        }
    }
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// 1 to `max` hex digits, either case, nothing else.
fn parse_hex_var(value: &[u8], max: usize) -> Option<u64> {
    if value.is_empty() || value.len() > max || max > 16 {
        return None;
    }
    value
        .iter()
        .try_fold(0u64, |acc, &c| Some((acc << 4) | u64::from(nibble(c)?)))
}

/// Exactly `len` hex digits.
fn parse_hex_exact(value: &[u8], len: usize) -> Option<u64> {
    if value.len() != len {
        return None;
    }
    parse_hex_var(value, len)
}

/// A decimal `u64`: 1 to 20 digits, no sign, no leading zero except "0".
fn parse_decimal(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 20 || (value.len() > 1 && value[0] == b'0') {
        return None;
    }
    value.iter().try_fold(0u64, |acc, &c| {
        if !c.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add(u64::from(c - b'0'))
    })
}

/// Percent-decodes `raw` into UTF-8 without NUL.
fn percent_decode(raw: &[u8]) -> Option<String> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' {
            let hi = nibble(*raw.get(i + 1)?)?;
            let lo = nibble(*raw.get(i + 2)?)?;
            out.push((hi << 4) | lo);
            i += 3;
        } else {
            out.push(raw[i]);
            i += 1;
        }
    }
    if out.contains(&0) {
        return None;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = (&'a str, &'a [u8])> + 'a {
        pairs.iter().map(|(n, v)| (*n, v.as_bytes()))
    }

    /// The PREPARE the upstream client sends (its header spellings: no
    /// leading zeros in the buffer values, lowercase names).
    const UPSTREAM_PREPARE: &[(&str, &str)] = &[
        ("host", "127.0.0.1"),
        ("x-amz-date", "20261130T184100Z"),
        ("x-amz-rdma-protocol", "hipobj-rc-v2"),
        // filled in by each test with a token it builds
        ("x-amz-rdma-token", ""),
        ("x-amz-rdma-psn", "000001"),
        ("x-amz-rdma-cookie", "1a2b3c4d"),
        ("x-amz-rdma-op", "PUT"),
        ("x-amz-rdma-target", "/bkt/v2-put"),
        ("x-amz-rdma-size", "64"),
        ("x-amz-rdma-mr-addr", "55d4c0a3b000"),
        ("x-amz-rdma-mr-rkey", "1f2e"),
        ("x-amz-rdma-qpn", "11"),
    ];

    #[test]
    fn the_upstream_clients_prepare_parses() {
        let mut pairs = UPSTREAM_PREPARE.to_vec();
        let token = Token {
            transport: Transport::Rc,
            qpn: 0x11,
            gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            rkey: 0,
            addr: 0,
            len: 0,
            port: 1,
            lid: 0,
        };
        let hex = token.encode().to_string();
        pairs[3].1 = &hex;
        let p = PrepareRequest::from_headers(h(&pairs)).expect("parses");
        assert_eq!(p.op, Direction::Put);
        assert_eq!((p.target.bucket(), p.target.key()), ("bkt", "v2-put"));
        assert_eq!(p.size.get(), 64);
        assert_eq!(p.offset, None);
        assert_eq!(p.token, token);
        assert_eq!(p.psn.get(), 1);
        assert_eq!(p.cookie.get(), 0x1a2b_3c4d);
        let (mr, qpn) = p.client_mr.expect("buffer sent");
        assert_eq!((mr.addr, mr.rkey, qpn.get()), (0x55d4_c0a3_b000, 0x1f2e, 0x11));
    }

    fn prepare_with(name: &str, value: Option<&str>) -> Result<PrepareRequest, V2Error> {
        let token = Token {
            transport: Transport::Rc,
            qpn: 0x11,
            gid: [1; 16],
            rkey: 0,
            addr: 0,
            len: 0,
            port: 1,
            lid: 0,
        }
        .encode()
        .to_string();
        let mut pairs: Vec<(&str, &str)> = UPSTREAM_PREPARE.to_vec();
        pairs[3].1 = &token;
        pairs.retain(|(n, _)| *n != name);
        if let Some(v) = value {
            pairs.push((name, v));
        }
        PrepareRequest::from_headers(h(&pairs))
    }

    #[test]
    fn a_prepare_with_one_bad_header_is_refused_with_its_status() {
        use V2Error as E;
        let cases: &[(&str, Option<&str>, V2Error)] = &[
            (PROTOCOL_HEADER, None, E::Unsupported),
            (PROTOCOL_HEADER, Some("hipobj-rc-v1"), E::Unsupported),
            (PROTOCOL_HEADER, Some("HIPOBJ-RC-V2"), E::Unsupported),
            (OP_HEADER, Some("get"), E::Malformed(OP_HEADER)),
            (OP_HEADER, Some("DELETE"), E::Malformed(OP_HEADER)),
            (OP_HEADER, None, E::Missing(OP_HEADER)),
            (PSN_HEADER, Some("000000"), E::Malformed(PSN_HEADER)),
            (PSN_HEADER, Some("1"), E::Malformed(PSN_HEADER)),
            (PSN_HEADER, Some("1000000"), E::Malformed(PSN_HEADER)),
            (PSN_HEADER, Some("00000g"), E::Malformed(PSN_HEADER)),
            (COOKIE_HEADER, Some("00000000"), E::Malformed(COOKIE_HEADER)),
            (COOKIE_HEADER, Some("1a2b3c4"), E::Malformed(COOKIE_HEADER)),
            (COOKIE_HEADER, Some("+a2b3c4d"), E::Malformed(COOKIE_HEADER)),
            (SIZE_HEADER, Some("0"), E::Malformed(SIZE_HEADER)),
            (SIZE_HEADER, Some("064"), E::Malformed(SIZE_HEADER)),
            (SIZE_HEADER, Some("-1"), E::Malformed(SIZE_HEADER)),
            (SIZE_HEADER, Some(" 64"), E::Malformed(SIZE_HEADER)),
            (SIZE_HEADER, Some("2147483648"), E::TooLarge(0x8000_0000)),
            (
                SIZE_HEADER,
                Some("99999999999999999999999"),
                E::Malformed(SIZE_HEADER),
            ),
            (TARGET_HEADER, Some("bkt/key"), E::Malformed(TARGET_HEADER)),
            (TARGET_HEADER, Some("/bkt"), E::Malformed(TARGET_HEADER)),
            (TARGET_HEADER, Some("/bkt/"), E::Malformed(TARGET_HEADER)),
            (TARGET_HEADER, Some("//key"), E::Malformed(TARGET_HEADER)),
            (TARGET_HEADER, Some("/bkt/a b"), E::Malformed(TARGET_HEADER)),
            (TARGET_HEADER, Some("/bkt/a%0"), E::Malformed(TARGET_HEADER)),
            (TARGET_HEADER, Some("/bkt/a%00"), E::Malformed(TARGET_HEADER)),
            (
                TARGET_HEADER,
                Some("/bkt/a?versionId=1"),
                E::Malformed(TARGET_HEADER),
            ),
            (TOKEN_HEADER, Some("01"), E::Malformed(TOKEN_HEADER)),
            (QPN_HEADER, None, E::Missing(QPN_HEADER)),
            (QPN_HEADER, Some("0"), E::Malformed(QPN_HEADER)),
            (QPN_HEADER, Some("1000000"), E::Malformed(QPN_HEADER)),
            (
                MR_ADDR_HEADER,
                Some("10000000000000000"),
                E::Malformed(MR_ADDR_HEADER),
            ),
            (MR_RKEY_HEADER, Some(""), E::Malformed(MR_RKEY_HEADER)),
            (OFFSET_HEADER, Some("x"), E::Malformed(OFFSET_HEADER)),
        ];
        for (name, value, want) in cases {
            let got = prepare_with(name, *value);
            assert_eq!(got.as_ref().err(), Some(want), "{name}: {value:?}");
        }
        assert_eq!(E::Unsupported.status().code(), 501);
        assert_eq!(E::TooLarge(1 << 31).status().code(), 413);
        assert_eq!(E::Malformed(PSN_HEADER).status().code(), 400);
        // the three accepted corners
        assert!(prepare_with(OFFSET_HEADER, Some("0")).is_ok());
        assert!(prepare_with(SIZE_HEADER, Some("2147483647")).is_ok());
        assert!(prepare_with(PSN_HEADER, Some("FFFFFF")).is_ok());
    }

    #[test]
    fn a_repeated_header_is_refused_and_unknown_ones_are_ignored() {
        let token = Token {
            transport: Transport::Rc,
            qpn: 1,
            gid: [1; 16],
            rkey: 0,
            addr: 0,
            len: 0,
            port: 1,
            lid: 0,
        }
        .encode()
        .to_string();
        let mut pairs = UPSTREAM_PREPARE.to_vec();
        pairs[3].1 = &token;
        pairs.push(("X-Amz-Rdma-Cookie", "1a2b3c4d"));
        assert_eq!(
            PrepareRequest::from_headers(h(&pairs)),
            Err(V2Error::Duplicate(COOKIE_HEADER))
        );
        pairs.pop();
        pairs.push(("x-amz-rdma-something-new", "x"));
        assert!(PrepareRequest::from_headers(h(&pairs)).is_ok());
    }

    #[test]
    fn a_dc_token_is_refused_but_the_all_zero_token_is_taken() {
        let dc = Token {
            transport: Transport::Dc,
            qpn: 5,
            ..zero_token()
        }
        .encode()
        .to_string();
        assert_eq!(
            prepare_with(TOKEN_HEADER, Some(&dc)),
            Err(V2Error::Malformed(TOKEN_HEADER))
        );
        let zero = "0".repeat(88);
        assert_eq!(
            prepare_with(TOKEN_HEADER, Some(&zero)).map(|p| p.token),
            Ok(zero_token())
        );
    }

    #[test]
    fn the_prepare_response_must_agree_with_its_token() {
        let token = Token {
            transport: Transport::Rc,
            qpn: 0x42,
            gid: [9; 16],
            rkey: 0x77,
            addr: 0x1000,
            len: 64,
            port: 1,
            lid: 0,
        };
        let resp = PrepareResponse {
            token,
            session: SessionId([0xab; 16]),
            psn: Psn::new(0xc0de).expect("psn"),
        };
        let headers = resp.to_headers();
        let back = PrepareResponse::from_headers(headers.iter().map(|(n, v)| (*n, v.as_bytes())));
        assert_eq!(back, Ok(resp));
        for (name, value) in [
            (QPN_HEADER, "43"),
            (MR_ADDR_HEADER, "1001"),
            (MR_RKEY_HEADER, "78"),
            (REPLY_HEADER, "409:"),
        ] {
            let mut changed = headers.clone();
            for (n, v) in &mut changed {
                if *n == name {
                    *v = if name == REPLY_HEADER {
                        format!("409:{}", token.encode())
                    } else {
                        value.to_owned()
                    };
                }
            }
            let got = PrepareResponse::from_headers(changed.iter().map(|(n, v)| (*n, v.as_bytes())));
            assert!(got.is_err(), "{name} changed to {value} was accepted");
        }
        let zero_gid = PrepareResponse {
            token: Token {
                gid: [0; 16],
                ..token
            },
            ..resp
        }
        .to_headers();
        assert_eq!(
            PrepareResponse::from_headers(zero_gid.iter().map(|(n, v)| (*n, v.as_bytes()))),
            Err(V2Error::BadReplyToken)
        );
    }

    #[test]
    fn ready_needs_the_whole_client_buffer_or_none() {
        let base = [
            (PROTOCOL_HEADER, PROTOCOL),
            (SESSION_HEADER, "000102030405060708090a0b0c0d0e0f"),
            (COOKIE_HEADER, "1a2b3c4d"),
        ];
        let r = ReadyRequest::from_headers(h(&base)).expect("no buffer is fine");
        assert_eq!(r.client_mr, None);
        assert_eq!(r.session.to_string(), "000102030405060708090a0b0c0d0e0f");
        let mut some = base.to_vec();
        some.push((MR_ADDR_HEADER, "1000"));
        assert_eq!(
            ReadyRequest::from_headers(h(&some)),
            Err(V2Error::Missing(MR_RKEY_HEADER))
        );
        let mut short = base.to_vec();
        short[1].1 = "000102030405060708090a0b0c0d0e0";
        assert_eq!(
            ReadyRequest::from_headers(h(&short)),
            Err(V2Error::Malformed(SESSION_HEADER))
        );
        assert_eq!(
            CancelRequest::from_headers(h(&base[..2])).map(|c| c.session),
            Ok(r.session)
        );
        assert_eq!(
            CancelRequest::from_headers(h(&base[1..2])),
            Err(V2Error::Unsupported)
        );
    }

    #[test]
    fn ready_answers_carry_the_checksum_in_both_forms_and_read_either() {
        let crc = Crc64Nvme(0xae8b_1486_0a79_9888);
        let answer = ReadyResponse {
            cookie: Cookie::new(7).expect("non-zero"),
            bytes: 9,
            etag: None,
            version_id: None,
            checksum_crc64nvme: Some(crc),
        };
        let sent = answer.to_headers();
        let value = |name: &str| sent.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str());
        assert_eq!(value(CHECKSUM_HEADER), Some("CRC64NVME rosUhgp5mIg="));
        assert_eq!(value(CHECKSUM_CRC64NVME_HEADER), Some("rosUhgp5mIg="));
        let base = [
            (PROTOCOL_HEADER, PROTOCOL),
            (COOKIE_HEADER, "00000007"),
            (BYTES_HEADER, "9"),
        ];
        let read = |extra: &[(&'static str, &'static str)]| {
            let all: Vec<(&str, &str)> = base.iter().chain(extra).copied().collect();
            ReadyResponse::from_headers(h(&all)).map(|r| r.checksum_crc64nvme)
        };
        assert_eq!(read(&[]), Ok(None));
        assert_eq!(
            read(&[("X-Amz-Rdma-Checksum", "CRC64NVME rosUhgp5mIg=")]),
            Ok(Some(crc))
        );
        assert_eq!(
            read(&[("X-Amz-Rdma-Checksum-Crc64nvme", "rosUhgp5mIg=")]),
            Ok(Some(crc))
        );
        assert_eq!(
            read(&[
                (CHECKSUM_HEADER, "CRC64NVME rosUhgp5mIg="),
                (CHECKSUM_CRC64NVME_HEADER, "rosUhgp5mIg=")
            ]),
            Ok(Some(crc))
        );
        // Two forms that disagree, and malformed values of each, fail.
        assert_eq!(
            read(&[
                (CHECKSUM_HEADER, "CRC64NVME rosUhgp5mIg="),
                (CHECKSUM_CRC64NVME_HEADER, "AAAAAAAAAAA=")
            ]),
            Err(V2Error::Malformed(CHECKSUM_HEADER))
        );
        for bad in ["rosUhgp5mIg=", "CRC64NVME rosUhgp5mIh=", "CRC32C AAAAAA==", ""] {
            assert_eq!(
                read(&[(CHECKSUM_HEADER, bad)]),
                Err(V2Error::Malformed(CHECKSUM_HEADER)),
                "{bad:?}"
            );
        }
        for bad in ["CRC64NVME rosUhgp5mIg=", "rosUhgp5mIh=", "rosUhgp5mIg", "x"] {
            assert_eq!(
                read(&[(CHECKSUM_CRC64NVME_HEADER, bad)]),
                Err(V2Error::Malformed(CHECKSUM_CRC64NVME_HEADER)),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn targets_encode_what_needs_it_and_decode_back() {
        let t = ObjectPath::new("bkt", "dir/a b+c%é").expect("valid");
        assert_eq!(t.to_string(), "/bkt/dir/a%20b%2Bc%25%C3%A9");
        assert_eq!(ObjectPath::parse(t.to_string().as_bytes()), Ok(t));
        assert!(ObjectPath::new("b/k", "x").is_err());
        assert!(ObjectPath::new("", "x").is_err());
    }

    #[test]
    fn statuses_have_their_codes() {
        for s in Status::ALL {
            assert_eq!(Status::from_code(s.code()), Some(s));
        }
        assert_eq!(Status::from_code(402), None);
        assert_eq!(Status::UnknownSession.code(), 409);
        assert_eq!(Status::Forbidden.code(), 403);
    }
}
