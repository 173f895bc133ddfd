//! hipobj-rc-v2's messages: PREPARE, READY and CANCEL, and the server's
//! answers, each read from and written as its headers.

use super::fields::{Fields, parse_decimal};
use super::*;
use crate::token::{Token, Transport};

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
    /// A PUT whose bytes are a part of a multipart upload (the `mp`
    /// extension; only to a server that advertised it).
    pub part: Option<UploadPart>,
}

/// A part of a multipart upload, which a PUT session stores instead of an
/// object (the `mp` extension).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UploadPart {
    /// The upload's id, as CreateMultipartUpload gave it: 1 to 1024
    /// visible ASCII characters.
    pub upload_id: String,
    /// The part's number, 1 to 10000.
    pub number: u16,
}

impl UploadPart {
    /// The largest part number S3 allows.
    pub const MAX_NUMBER: u16 = 10_000;

    fn parse_id(v: &[u8]) -> Option<String> {
        (!v.is_empty() && v.len() <= 1024 && v.iter().all(u8::is_ascii_graphic))
            .then(|| String::from_utf8(v.to_vec()).ok())
            .flatten()
    }

    fn parse_number(v: &[u8]) -> Option<u16> {
        parse_decimal(v)
            .and_then(|n| u16::try_from(n).ok())
            .filter(|n| (1..=Self::MAX_NUMBER).contains(n))
    }
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
        if let Some(part) = &self.part {
            h.push((UPLOAD_ID_HEADER, part.upload_id.clone()));
            h.push((PART_NUMBER_HEADER, part.number.to_string()));
        }
        h
    }

    /// Reads a request: [`V2Error::Unsupported`] first if it is not v2, then
    /// each header in turn. The token must be RC or all zero; the client
    /// buffer headers are optional, but all three or none; so are the part
    /// headers, which only a PUT may carry.
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
                UPLOAD_ID_HEADER,
                PART_NUMBER_HEADER,
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
        let upload_id = f.optional(UPLOAD_ID_HEADER, UploadPart::parse_id)?;
        let number = f.optional(PART_NUMBER_HEADER, UploadPart::parse_number)?;
        let part = match (upload_id, number) {
            (None, None) => None,
            (Some(_), Some(_)) if op == Direction::Get => return Err(V2Error::Malformed(UPLOAD_ID_HEADER)),
            (Some(upload_id), Some(number)) => Some(UploadPart { upload_id, number }),
            (None, Some(_)) => return Err(V2Error::Missing(UPLOAD_ID_HEADER)),
            (Some(_), None) => return Err(V2Error::Missing(PART_NUMBER_HEADER)),
        };
        Ok(PrepareRequest {
            op,
            target,
            size,
            offset,
            token,
            psn,
            cookie,
            client_mr,
            part,
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
    /// Whether the server stores a PUT session as a multipart upload's part
    /// ([`CAPABILITY_MULTIPART`] among [`CAPABILITIES_HEADER`]).
    pub multipart: bool,
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
        let mut h = vec![
            (PROTOCOL_HEADER, PROTOCOL.to_owned()),
            (REPLY_HEADER, format!("200:{}", self.token.encode())),
            (SESSION_HEADER, self.session.to_string()),
            (PSN_HEADER, self.psn.to_string()),
            (QPN_HEADER, format!("{:x}", self.token.qpn)),
            (MR_ADDR_HEADER, format!("{:x}", self.token.addr)),
            (MR_RKEY_HEADER, format!("{:x}", self.token.rkey)),
        ];
        if self.multipart {
            h.push((CAPABILITIES_HEADER, CAPABILITY_MULTIPART.to_owned()));
        }
        h
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
                CAPABILITIES_HEADER,
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
        let multipart = f.get(CAPABILITIES_HEADER).is_some_and(lists_multipart);
        Ok(PrepareResponse {
            token,
            session,
            psn,
            multipart,
        })
    }
}

/// Whether a [`CAPABILITIES_HEADER`] value lists [`CAPABILITY_MULTIPART`]:
/// a comma-separated list, names in any case; unknown names are ignored,
/// and a malformed list names nothing.
pub fn lists_multipart(value: &[u8]) -> bool {
    value.split(|&b| b == b',').any(|c| {
        c.trim_ascii()
            .eq_ignore_ascii_case(CAPABILITY_MULTIPART.as_bytes())
    })
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
