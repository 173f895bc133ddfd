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
//!     part: None,
//! };
//! let headers = prepare.to_headers();
//! let back = PrepareRequest::from_headers(headers.iter().map(|(n, v)| (*n, v.as_bytes())))?;
//! assert_eq!(back, prepare);
//! # Ok::<(), hipobj_proto::rc_v2::V2Error>(())
//! ```

mod fields;
mod messages;
mod values;

pub use crate::Direction;
pub use messages::{
    CancelRequest, PrepareRequest, PrepareResponse, ReadyRequest, ReadyResponse, UploadPart, is_v2,
    lists_multipart, zero_token,
};
pub use values::{Cookie, ObjectPath, Psn, Qpn, RemoteMr, SessionId, Size, parse_mr_addr, parse_mr_rkey};

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

/// The server's extensions, in a PREPARE answer: a comma-separated list
/// (the `mp` extension of docs/protocol.md; versitygw's spelling).
pub const CAPABILITIES_HEADER: &str = "x-amz-rdma-capabilities";
/// The capability of storing a PUT session's bytes as a multipart upload's
/// part ([`UPLOAD_ID_HEADER`], [`PART_NUMBER_HEADER`]).
pub const CAPABILITY_MULTIPART: &str = "mp";
/// PREPARE of a PUT, `mp`: the multipart upload the bytes are a part of.
pub const UPLOAD_ID_HEADER: &str = "x-amz-rdma-upload-id";
/// PREPARE of a PUT, `mp`: the part's number, decimal 1 to 10000.
pub const PART_NUMBER_HEADER: &str = "x-amz-rdma-part-number";

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::{Token, Transport};

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

    /// An RC client token, encoded as PREPARE carries it.
    fn client_token() -> String {
        Token {
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
        .to_string()
    }

    fn prepare_with(name: &str, value: Option<&str>) -> Result<PrepareRequest, V2Error> {
        let token = client_token();
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
    fn a_put_may_name_a_part_both_headers_or_neither_and_a_get_none() {
        let token = client_token();
        let with = |op: &'static str, extra: &[(&'static str, &'static str)]| {
            let mut pairs: Vec<(&str, &str)> = UPSTREAM_PREPARE.to_vec();
            pairs[3].1 = &token;
            pairs.retain(|(n, _)| *n != OP_HEADER);
            pairs.push((OP_HEADER, op));
            pairs.extend_from_slice(extra);
            PrepareRequest::from_headers(h(&pairs))
        };
        let p = with("PUT", &[(UPLOAD_ID_HEADER, "up-1"), (PART_NUMBER_HEADER, "7")]).expect("a part");
        assert_eq!(
            p.part,
            Some(UploadPart {
                upload_id: "up-1".into(),
                number: 7
            })
        );
        let back = PrepareRequest::from_headers(p.to_headers().iter().map(|(n, v)| (*n, v.as_bytes())));
        assert_eq!(back, Ok(p));
        assert_eq!(with("PUT", &[]).map(|p| p.part), Ok(None));
        assert_eq!(
            with("PUT", &[(UPLOAD_ID_HEADER, "up-1")]).err(),
            Some(V2Error::Missing(PART_NUMBER_HEADER))
        );
        assert_eq!(
            with("PUT", &[(PART_NUMBER_HEADER, "1")]).err(),
            Some(V2Error::Missing(UPLOAD_ID_HEADER))
        );
        for bad in ["0", "10001", "01", "-1", "x"] {
            let extra = [(UPLOAD_ID_HEADER, "up-1"), (PART_NUMBER_HEADER, bad)];
            assert_eq!(
                with("PUT", &extra).err(),
                Some(V2Error::Malformed(PART_NUMBER_HEADER)),
                "{bad}"
            );
        }
        assert_eq!(
            with("PUT", &[(UPLOAD_ID_HEADER, "up 1"), (PART_NUMBER_HEADER, "1")]).err(),
            Some(V2Error::Malformed(UPLOAD_ID_HEADER))
        );
        assert_eq!(
            with("GET", &[(UPLOAD_ID_HEADER, "up-1"), (PART_NUMBER_HEADER, "1")]).err(),
            Some(V2Error::Malformed(UPLOAD_ID_HEADER))
        );
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
            multipart: false,
        };
        let headers = resp.to_headers();
        let back = PrepareResponse::from_headers(headers.iter().map(|(n, v)| (*n, v.as_bytes())));
        assert_eq!(back, Ok(resp));
        // `mp` among the capabilities, in any case, beside unknown ones.
        let mp = PrepareResponse {
            multipart: true,
            ..resp
        };
        let back = PrepareResponse::from_headers(mp.to_headers().iter().map(|(n, v)| (*n, v.as_bytes())));
        assert_eq!(back, Ok(mp));
        let mut headers = resp.to_headers();
        headers.push((CAPABILITIES_HEADER, "zz, MP ,other".into()));
        let back = PrepareResponse::from_headers(headers.iter().map(|(n, v)| (*n, v.as_bytes())));
        assert_eq!(back.map(|r| r.multipart), Ok(true));
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
