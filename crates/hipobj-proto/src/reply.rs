//! The `x-amz-rdma-reply` response header: grammar, parser and formatter.
//!
//! # Grammar
//!
//! After any run of trailing NUL, CR and LF bytes is dropped, the value must
//! be exactly one of:
//!
//! ```text
//! reply   = "ok" / "err"                      ; legacy tags, lowercase only
//!         / status                            ; e.g. "200", "501"
//!         / status ":" token                  ; e.g. "200:<88 hex>"
//!         / success ":" token ":" count       ; a transfer that moved `count` bytes
//!         / "409" ":" token ":" psn           ; the binding reply
//! status  = 3DIGIT                            ; 100..=599, no sign or space
//! success = "200" / "204" / "206"
//! token   = 88HEXDIG                          ; see crate::token, either case
//! count   = 16LOWERHEXDIG                     ; bytes moved, a u64, lowercase only
//! psn     = 6HEXDIG                           ; initial PSN, either case
//! ```
//!
//! Nothing else is accepted: no whitespace anywhere, no empty fields, no
//! leading `+`, no fourth field, no NUL except at the very end. The third
//! field's meaning follows from the status: after 200, 204 or 206 it is the
//! byte count (exactly 16 lowercase hex digits), after 409 the PSN (exactly
//! 6 hex digits); after any other status there is none.
//!
//! Only the full success form, [`Reply::Done`], proves anything to an RC
//! client: it names the server queue pair that moved the bytes and how many
//! it moved. The shorter success forms (`ok`, a bare `200`, `200:<token>`)
//! still parse, so that [`parse_reply`] stays a pure parser of every form a
//! server has ever sent, but a client must not take them as a completed
//! transfer (docs/protocol.md §2–3).
//!
//! A `409` with a token and a PSN is the server's half of the binding
//! handshake: it created a queue pair for the client's, moved no data, and
//! expects the client to connect to that queue pair (starting at that PSN)
//! and send the request again. A `409:<token>` without the PSN is an ordinary
//! status with a peer token, [`Reply::WithToken`].
//!
//! [`Reply`]'s `Display` writes the canonical form (lowercase hex, the PSN
//! as six digits), which [`parse_reply`] reads back to the same value.

use std::fmt;

use crate::token::{Token, TokenError};

/// The HTTP-style code a server puts in the reply when it declines RDMA and
/// the client should fall back to plain HTTP.
pub const REPLY_NOT_IMPLEMENTED: u16 = 501;

/// The status of a binding reply ([`Reply::Bind`]): HTTP 409 Conflict.
pub const REPLY_BIND_STATUS: u16 = 409;

/// The largest packet sequence number: PSNs are 24 bits wide.
pub const PSN_MAX: u32 = 0x00ff_ffff;

/// Number of hex digits of the PSN in a binding reply.
pub const PSN_HEX_LEN: usize = 6;

/// Number of hex digits of the byte count in a full success reply.
pub const COUNT_HEX_LEN: usize = 16;

/// The reply codes that mean the data moved: 200, 204 and 206.
pub const SUCCESS_CODES: [u16; 3] = [200, 204, 206];

/// Whether `code` is one of [`SUCCESS_CODES`].
pub const fn is_success_code(code: u16) -> bool {
    matches!(code, 200 | 204 | 206)
}

/// A parsed `x-amz-rdma-reply` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    /// The legacy tag `ok`; counts as 200.
    Ok,
    /// The legacy tag `err`; counts as 500.
    Err,
    /// A bare three-digit status, 100..=599.
    Status(u16),
    /// A status followed by the server's own token: `NNN:<token>`.
    WithToken {
        /// The status, 100..=599.
        status: u16,
        /// The token naming the server's queue pair.
        token: Token,
    },
    /// The full success reply `NNN:<token>:<count>` (NNN 200, 204 or 206):
    /// the server queue pair named by `token` moved `bytes` bytes.
    Done {
        /// The status: 200, 204 or 206.
        status: u16,
        /// The token naming the server queue pair that moved the bytes.
        token: Token,
        /// How many bytes it moved.
        bytes: u64,
    },
    /// The binding reply `409:<token>:<psn>`: connect to `token`'s queue pair
    /// expecting `psn`, then send the request again.
    Bind {
        /// The token naming the server queue pair that was bound.
        token: Token,
        /// The server's initial packet sequence number, at most [`PSN_MAX`].
        psn: u32,
    },
}

impl Reply {
    /// The HTTP-style code the reply stands for: `ok` is 200, `err` is 500,
    /// a binding reply is 409, and the others carry their own status.
    pub const fn http_code(&self) -> u16 {
        match *self {
            Reply::Ok => 200,
            Reply::Err => 500,
            Reply::Status(status) | Reply::WithToken { status, .. } | Reply::Done { status, .. } => status,
            Reply::Bind { .. } => REPLY_BIND_STATUS,
        }
    }

    /// Whether the reply reports a completed transfer: its
    /// [`http_code`](Self::http_code) is 200, 204 or 206.
    pub const fn is_success(&self) -> bool {
        is_success_code(self.http_code())
    }

    /// The server's token, for [`Reply::WithToken`], [`Reply::Done`] and
    /// [`Reply::Bind`].
    pub const fn peer_token(&self) -> Option<&Token> {
        match self {
            Reply::WithToken { token, .. } | Reply::Done { token, .. } | Reply::Bind { token, .. } => {
                Some(token)
            }
            Reply::Ok | Reply::Err | Reply::Status(_) => None,
        }
    }

    /// The byte count of a full success reply ([`Reply::Done`]).
    pub const fn bytes(&self) -> Option<u64> {
        match *self {
            Reply::Done { bytes, .. } => Some(bytes),
            _ => None,
        }
    }
}

impl fmt::Display for Reply {
    /// Writes the canonical header value: `ok`, `err`, `NNN`, `NNN:<token>`,
    /// `NNN:<token>:<count>` or `409:<token>:<psn>`, with lowercase hex, a
    /// sixteen-digit count and a six-digit PSN.
    ///
    /// A status outside 100..=599 or a PSN above [`PSN_MAX`] is written as
    /// is, and [`parse_reply`] then rejects the text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Ok => f.write_str("ok"),
            Reply::Err => f.write_str("err"),
            Reply::Status(status) => write!(f, "{status}"),
            Reply::WithToken { status, token } => write!(f, "{status}:{}", token.encode()),
            Reply::Done { status, token, bytes } => {
                write!(
                    f,
                    "{status}:{}:{bytes:0width$x}",
                    token.encode(),
                    width = COUNT_HEX_LEN
                )
            }
            Reply::Bind { token, psn } => {
                write!(
                    f,
                    "{REPLY_BIND_STATUS}:{}:{psn:0width$x}",
                    token.encode(),
                    width = PSN_HEX_LEN
                )
            }
        }
    }
}

/// Why an `x-amz-rdma-reply` value was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// Nothing was left after trailing NUL, CR and LF were dropped.
    #[error("reply is empty")]
    Empty,
    /// The value (or its part before the first `:`) is neither `ok`, `err`
    /// nor exactly three decimal digits.
    #[error("reply status is not `ok`, `err` or exactly three decimal digits")]
    BadStatus,
    /// Three digits, but not within 100..=599.
    #[error("reply status {0} is outside 100..=599")]
    StatusOutOfRange(u16),
    /// More than three `:`-separated fields.
    #[error("reply has {fields} `:`-separated fields, at most 3 are allowed")]
    TooManyFields {
        /// How many fields were found.
        fields: usize,
    },
    /// The token after the status is malformed.
    #[error("reply carries a malformed peer token: {0}")]
    BadToken(TokenError),
    /// The field after the token is not exactly six hex digits.
    #[error("reply PSN is not exactly {PSN_HEX_LEN} hex digits")]
    BadPsn,
    /// A PSN suffix came with a status other than 409.
    #[error("reply status {0} carries a PSN, which only a 409 binding reply may")]
    PsnWithoutBind(u16),
    /// The field after a success status's token is not exactly sixteen
    /// lowercase hex digits.
    #[error("reply byte count is not exactly {COUNT_HEX_LEN} lowercase hex digits")]
    BadCount,
    /// A byte count came with a status other than 200, 204 or 206.
    #[error("reply status {0} carries a byte count, which only 200, 204 and 206 may")]
    CountWithoutSuccess(u16),
}

/// Parses an `x-amz-rdma-reply` header value (see the [module docs](self)
/// for the grammar).
///
/// Trailing NUL, CR and LF bytes, in any mix, are ignored; anything else
/// that is not exactly one of the accepted forms is an error. The function
/// never panics, whatever the input.
pub fn parse_reply(bytes: &[u8]) -> Result<Reply, ReplyError> {
    let end = bytes
        .iter()
        .rposition(|&b| !matches!(b, b'\0' | b'\r' | b'\n'))
        .map_or(0, |last| last + 1);
    let text = &bytes[..end];

    match text {
        b"" => return Err(ReplyError::Empty),
        b"ok" => return Ok(Reply::Ok),
        b"err" => return Ok(Reply::Err),
        _ => {}
    }

    let fields = text.iter().filter(|&&b| b == b':').count() + 1;
    if fields > 3 {
        return Err(ReplyError::TooManyFields { fields });
    }
    let mut parts = text.split(|&b| b == b':');
    let status = parse_status(parts.next().unwrap_or_default())?;
    let Some(token) = parts.next() else {
        return Ok(Reply::Status(status));
    };
    let token = Token::decode(token).map_err(ReplyError::BadToken)?;
    let Some(third) = parts.next() else {
        return Ok(Reply::WithToken { status, token });
    };
    if is_success_code(status) {
        let bytes = parse_count(third)?;
        return Ok(Reply::Done { status, token, bytes });
    }
    if third.len() == COUNT_HEX_LEN {
        return Err(ReplyError::CountWithoutSuccess(status));
    }
    let psn = parse_psn(third)?;
    if status != REPLY_BIND_STATUS {
        return Err(ReplyError::PsnWithoutBind(status));
    }
    Ok(Reply::Bind { token, psn })
}

/// Exactly three ASCII digits, 100..=599.
fn parse_status(field: &[u8]) -> Result<u16, ReplyError> {
    let &[a, b, c] = field else {
        return Err(ReplyError::BadStatus);
    };
    if ![a, b, c].iter().all(u8::is_ascii_digit) {
        return Err(ReplyError::BadStatus);
    }
    let status = u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0');
    if (100..=599).contains(&status) {
        Ok(status)
    } else {
        Err(ReplyError::StatusOutOfRange(status))
    }
}

/// Exactly sixteen lowercase hex digits: a u64.
fn parse_count(field: &[u8]) -> Result<u64, ReplyError> {
    if field.len() != COUNT_HEX_LEN {
        return Err(ReplyError::BadCount);
    }
    field.iter().try_fold(0u64, |acc, &c| {
        let digit = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => return Err(ReplyError::BadCount),
        };
        Ok((acc << 4) | u64::from(digit))
    })
}

/// Exactly six hex digits in either case.
fn parse_psn(field: &[u8]) -> Result<u32, ReplyError> {
    if field.len() != PSN_HEX_LEN {
        return Err(ReplyError::BadPsn);
    }
    field.iter().try_fold(0u32, |acc, &c| {
        let digit = char::from(c).to_digit(16).ok_or(ReplyError::BadPsn)?;
        Ok((acc << 4) | digit)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::Transport;

    fn token() -> Token {
        Token {
            transport: Transport::Rc,
            qpn: 0x00ab_cdef,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3],
            rkey: 0x1234_5678,
            addr: 0x7f00_dead_beef_0000,
            len: 1 << 20,
            port: 1,
            lid: 0,
        }
    }

    fn hex() -> String {
        token().encode().to_string()
    }

    fn parse(s: &str) -> Result<Reply, ReplyError> {
        parse_reply(s.as_bytes())
    }

    #[test]
    fn legacy_tags() {
        assert_eq!(parse("ok"), Ok(Reply::Ok));
        assert_eq!(parse("err"), Ok(Reply::Err));
        for bad in [
            "OK", "Ok", "oK", "ERR", "Err", "o", "okk", "error", "ok:", "err:", " ok", "ok ",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(parse("ok:"), Err(ReplyError::BadStatus));
        assert_eq!(parse(&format!("ok:{}", hex())), Err(ReplyError::BadStatus));
    }

    #[test]
    fn bare_status_range() {
        for status in [100u16, 101, 200, 204, 206, 404, 409, 500, 501, 503, 599] {
            assert_eq!(parse(&status.to_string()), Ok(Reply::Status(status)));
        }
        for status in ["000", "001", "042", "099", "600", "700", "999"] {
            let value = status.parse::<u16>().unwrap_or(u16::MAX);
            assert_eq!(
                parse(status),
                Err(ReplyError::StatusOutOfRange(value)),
                "{status}"
            );
        }
    }

    #[test]
    fn status_must_be_exactly_three_digits() {
        for bad in [
            "2",
            "20",
            "2000",
            "0200",
            "00200",
            "+200",
            "-200",
            "+20",
            " 200",
            "200 ",
            "2 00",
            "20a",
            "2O0",
            "0x1",
            "2\u{0}0",
            "20\u{0}",
            "\u{0}200",
            "\t200",
            "200\t",
            "２００",
            "20é",
            "1e2",
        ] {
            assert_eq!(parse(bad), Err(ReplyError::BadStatus), "{bad:?}");
        }
    }

    #[test]
    fn empty_after_stripping() {
        for empty in ["", "\0", "\r", "\n", "\r\n", "\0\0\0", "\n\r\0\n"] {
            assert_eq!(parse(empty), Err(ReplyError::Empty), "{empty:?}");
        }
    }

    #[test]
    fn trailing_nul_cr_lf_ignored_in_any_mix() {
        let h = hex();
        for suffix in [
            "\0", "\r", "\n", "\r\n", "\n\r", "\0\r\n", "\r\n\0\0", "\n\n\n", "\0\n\0\r",
        ] {
            assert_eq!(parse(&format!("ok{suffix}")), Ok(Reply::Ok));
            assert_eq!(parse(&format!("err{suffix}")), Ok(Reply::Err));
            assert_eq!(parse(&format!("206{suffix}")), Ok(Reply::Status(206)));
            assert_eq!(
                parse(&format!("200:{h}{suffix}")),
                Ok(Reply::WithToken {
                    status: 200,
                    token: token()
                })
            );
            assert_eq!(
                parse(&format!("409:{h}:00abcd{suffix}")),
                Ok(Reply::Bind {
                    token: token(),
                    psn: 0xabcd
                })
            );
        }
    }

    #[test]
    fn leading_or_embedded_nul_cr_lf_rejected() {
        let h = hex();
        for bad in ["\0ok", "\rok", "\nok", "o\0k", "ok\0 ", "ok\r\nx", "2\r\n00"] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(parse("\n200"), Err(ReplyError::BadStatus));
        assert_eq!(
            parse(&format!("200:{}\0{}", &h[..44], &h[45..])),
            Err(ReplyError::BadToken(TokenError::BadHexDigit { index: 44 }))
        );
        assert_eq!(
            parse(&format!("200\0:{h}")),
            Err(ReplyError::BadStatus),
            "NUL inside the status field"
        );
        assert_eq!(parse(&format!("409:{h}:00\0abc")), Err(ReplyError::BadPsn));
    }

    #[test]
    fn trailing_whitespace_other_than_cr_lf_rejected() {
        let h = hex();
        assert_eq!(parse("200 "), Err(ReplyError::BadStatus));
        assert_eq!(parse("200\t"), Err(ReplyError::BadStatus));
        assert_eq!(parse("ok "), Err(ReplyError::BadStatus));
        assert_eq!(
            parse(&format!("200:{h} ")),
            Err(ReplyError::BadToken(TokenError::WrongLength { len: 89 }))
        );
        assert_eq!(
            parse(&format!("200:{h} \r\n")),
            Err(ReplyError::BadToken(TokenError::WrongLength { len: 89 }))
        );
        assert_eq!(parse(&format!("409:{h}:000001 ")), Err(ReplyError::BadPsn));
    }

    #[test]
    fn status_with_token() {
        let h = hex();
        for status in [100u16, 200, 204, 206, 409, 501, 599] {
            assert_eq!(
                parse(&format!("{status}:{h}")),
                Ok(Reply::WithToken {
                    status,
                    token: token()
                })
            );
        }
        let upper = h.to_ascii_uppercase();
        assert_eq!(
            parse(&format!("200:{upper}")),
            Ok(Reply::WithToken {
                status: 200,
                token: token()
            })
        );
        assert_eq!(parse(&format!("099:{h}")), Err(ReplyError::StatusOutOfRange(99)));
        assert_eq!(parse(&format!("600:{h}")), Err(ReplyError::StatusOutOfRange(600)));
        assert_eq!(parse(&format!("2000:{h}")), Err(ReplyError::BadStatus));
        assert_eq!(parse(&format!(":{h}")), Err(ReplyError::BadStatus));
        assert_eq!(parse(&format!("OK:{h}")), Err(ReplyError::BadStatus));
    }

    #[test]
    fn status_with_bad_token() {
        let h = hex();
        let wrong_len = |len| Err(ReplyError::BadToken(TokenError::WrongLength { len }));
        assert_eq!(parse("200:"), wrong_len(0));
        assert_eq!(parse("200:\r\n"), wrong_len(0));
        assert_eq!(parse(&format!("200:{}", &h[..87])), wrong_len(87));
        assert_eq!(parse(&format!("200:{h}0")), wrong_len(89));
        assert_eq!(
            parse(&format!("200: {}", &h[1..])),
            Err(ReplyError::BadToken(TokenError::BadHexDigit { index: 0 }))
        );
        assert_eq!(
            parse(&format!("200:0x{}", &h[2..])),
            Err(ReplyError::BadToken(TokenError::BadHexDigit { index: 1 }))
        );
        assert_eq!(
            parse(&format!("200:{}g", &h[..87])),
            Err(ReplyError::BadToken(TokenError::BadHexDigit { index: 87 }))
        );
        assert_eq!(
            parse(&format!("200:02{}", &h[2..])),
            Err(ReplyError::BadToken(TokenError::UnknownTransport(2)))
        );
        // Two tokens glued with a colon: the second is taken as the PSN.
        assert_eq!(parse(&format!("409:{h}:{h}")), Err(ReplyError::BadPsn));
    }

    #[test]
    fn binding_reply() {
        let h = hex();
        for (text, psn) in [
            ("000000", 0),
            ("000001", 1),
            ("abcdef", 0xab_cdef),
            ("ABCDEF", 0xab_cdef),
            ("ffffff", PSN_MAX),
            ("7a3F0c", 0x7a_3f0c),
        ] {
            assert_eq!(
                parse(&format!("409:{h}:{text}")),
                Ok(Reply::Bind { token: token(), psn }),
                "{text}"
            );
        }
        // Without the PSN a 409 is an ordinary status with a token.
        assert_eq!(
            parse(&format!("409:{h}")),
            Ok(Reply::WithToken {
                status: 409,
                token: token()
            })
        );
        assert_eq!(parse("409"), Ok(Reply::Status(409)));
    }

    #[test]
    fn binding_reply_bad_psn() {
        let h = hex();
        for bad in [
            "", "0", "00000", "0000000", "1000000", "fffffff", "00000g", "-00001", "+00001", " 00001",
            "00001 ", "0x0001", "00é01",
        ] {
            assert_eq!(
                parse(&format!("409:{h}:{bad}")),
                Err(ReplyError::BadPsn),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn psn_only_on_409() {
        let h = hex();
        for status in [408u16, 410, 501] {
            assert_eq!(
                parse(&format!("{status}:{h}:000001")),
                Err(ReplyError::PsnWithoutBind(status))
            );
        }
        // After a success status the third field is a count, and six digits
        // are not one.
        for status in [200u16, 204, 206] {
            assert_eq!(parse(&format!("{status}:{h}:000001")), Err(ReplyError::BadCount));
        }
        // The status is checked before the PSN's owner.
        assert_eq!(
            parse(&format!("999:{h}:000001")),
            Err(ReplyError::StatusOutOfRange(999))
        );
    }

    #[test]
    fn extra_colons_rejected() {
        let h = hex();
        assert_eq!(
            parse("200::"),
            Err(ReplyError::BadToken(TokenError::WrongLength { len: 0 }))
        );
        assert_eq!(parse(":::"), Err(ReplyError::TooManyFields { fields: 4 }));
        assert_eq!(
            parse(&format!("409:{h}:000001:")),
            Err(ReplyError::TooManyFields { fields: 4 })
        );
        assert_eq!(
            parse(&format!("409:{h}:000001:00")),
            Err(ReplyError::TooManyFields { fields: 4 })
        );
        assert_eq!(
            parse(&format!("409::{h}:000001")),
            Err(ReplyError::TooManyFields { fields: 4 })
        );
        assert_eq!(parse(&format!("200:{h}:")), Err(ReplyError::BadCount));
        assert_eq!(parse(&format!("409:{h}:")), Err(ReplyError::BadPsn));
        assert_eq!(
            parse(&format!("200:{h}::")),
            Err(ReplyError::TooManyFields { fields: 4 })
        );
        assert_eq!(parse(":"), Err(ReplyError::BadStatus));
        assert_eq!(
            parse("200:409"),
            Err(ReplyError::BadToken(TokenError::WrongLength { len: 3 }))
        );
    }

    #[test]
    fn non_ascii_rejected() {
        let h = hex();
        assert_eq!(parse_reply(&[0xff]), Err(ReplyError::BadStatus));
        assert_eq!(parse_reply(&[b'2', b'0', 0xb0]), Err(ReplyError::BadStatus));
        assert_eq!(parse_reply(b"ok\xc3\xa9"), Err(ReplyError::BadStatus));
        let mut bytes = format!("200:{h}").into_bytes();
        bytes[10] = 0xe9;
        assert_eq!(
            parse_reply(&bytes),
            Err(ReplyError::BadToken(TokenError::BadHexDigit { index: 6 }))
        );
    }

    #[test]
    fn success_with_count() {
        let h = hex();
        for (status, text, bytes) in [
            (200u16, "0000000000000000", 0u64),
            (200, "0000000000002000", 8192),
            (204, "0000000000000000", 0),
            (206, "0000000000000064", 100),
            (200, "ffffffffffffffff", u64::MAX),
            (200, "0123456789abcdef", 0x0123_4567_89ab_cdef),
        ] {
            let reply = parse(&format!("{status}:{h}:{text}\r\n"));
            assert_eq!(
                reply,
                Ok(Reply::Done {
                    status,
                    token: token(),
                    bytes
                }),
                "{text}"
            );
            let reply = reply.unwrap_or(Reply::Err);
            assert_eq!(reply.http_code(), status);
            assert!(reply.is_success());
            assert_eq!(reply.bytes(), Some(bytes));
            assert_eq!(reply.peer_token(), Some(&token()));
            assert_eq!(reply.to_string(), format!("{status}:{h}:{text}"));
        }
        // The token may be in either case; the count only in lowercase.
        let upper = h.to_ascii_uppercase();
        assert_eq!(
            parse(&format!("200:{upper}:0000000000000001")).map(|r| r.bytes()),
            Ok(Some(1))
        );
    }

    #[test]
    fn success_with_bad_count() {
        let h = hex();
        for bad in [
            "",
            "0",
            "000000000000000",
            "00000000000000000",
            "000000000000000A",
            "ABCDEF0123456789",
            "000000000000000g",
            "+000000000000001",
            "-000000000000001",
            " 000000000000001",
            "000000000000001 ",
            "0x00000000000001",
            "00000000000000é",
        ] {
            assert_eq!(
                parse(&format!("200:{h}:{bad}")),
                Err(ReplyError::BadCount),
                "{bad:?}"
            );
        }
        // A count belongs to a success only; the lengths keep it apart from a PSN.
        for status in [100u16, 404, 409, 500, 501] {
            assert_eq!(
                parse(&format!("{status}:{h}:0000000000000010")),
                Err(ReplyError::CountWithoutSuccess(status)),
                "{status}"
            );
        }
        assert_eq!(
            parse(&format!("200:{h}:0000000000000010:")),
            Err(ReplyError::TooManyFields { fields: 4 })
        );
    }

    #[test]
    fn http_codes_and_success() {
        let t = token();
        let cases = [
            (Reply::Ok, 200, true),
            (Reply::Err, 500, false),
            (Reply::Status(200), 200, true),
            (Reply::Status(204), 204, true),
            (Reply::Status(206), 206, true),
            (Reply::Status(201), 201, false),
            (Reply::Status(409), 409, false),
            (Reply::Status(501), 501, false),
            (
                Reply::WithToken {
                    status: 200,
                    token: t,
                },
                200,
                true,
            ),
            (
                Reply::WithToken {
                    status: 206,
                    token: t,
                },
                206,
                true,
            ),
            (
                Reply::WithToken {
                    status: 409,
                    token: t,
                },
                409,
                false,
            ),
            (Reply::Bind { token: t, psn: 7 }, 409, false),
            (
                Reply::Done {
                    status: 204,
                    token: t,
                    bytes: 0,
                },
                204,
                true,
            ),
        ];
        for (reply, code, success) in cases {
            assert_eq!(reply.http_code(), code, "{reply:?}");
            assert_eq!(reply.is_success(), success, "{reply:?}");
        }
        assert_eq!(SUCCESS_CODES.map(is_success_code), [true; 3]);
        assert!(!is_success_code(REPLY_NOT_IMPLEMENTED));
        assert!(!is_success_code(REPLY_BIND_STATUS));
    }

    #[test]
    fn peer_token() {
        let t = token();
        assert_eq!(Reply::Ok.peer_token(), None);
        assert_eq!(Reply::Err.peer_token(), None);
        assert_eq!(Reply::Status(200).peer_token(), None);
        assert_eq!(
            Reply::WithToken {
                status: 200,
                token: t
            }
            .peer_token(),
            Some(&t)
        );
        assert_eq!(Reply::Bind { token: t, psn: 0 }.peer_token(), Some(&t));
    }

    #[test]
    fn display_is_canonical() {
        let t = token();
        let h = hex();
        assert_eq!(Reply::Ok.to_string(), "ok");
        assert_eq!(Reply::Err.to_string(), "err");
        assert_eq!(Reply::Status(501).to_string(), "501");
        assert_eq!(
            Reply::WithToken {
                status: 200,
                token: t
            }
            .to_string(),
            format!("200:{h}")
        );
        assert_eq!(
            Reply::Bind { token: t, psn: 0 }.to_string(),
            format!("409:{h}:000000")
        );
        assert_eq!(
            Reply::Bind {
                token: t,
                psn: 0xab_cdef
            }
            .to_string(),
            format!("409:{h}:abcdef")
        );
        assert_eq!(
            Reply::Bind {
                token: t,
                psn: 0x0a_0b0c
            }
            .to_string(),
            format!("409:{h}:0a0b0c")
        );
        for reply in [
            Reply::Ok,
            Reply::Err,
            Reply::Status(100),
            Reply::Status(599),
            Reply::WithToken {
                status: 409,
                token: t,
            },
            Reply::Bind {
                token: t,
                psn: PSN_MAX,
            },
        ] {
            assert_eq!(parse(&reply.to_string()), Ok(reply));
        }
    }

    #[test]
    fn display_of_out_of_range_values_does_not_parse() {
        let t = token();
        assert_eq!(parse(&Reply::Status(42).to_string()), Err(ReplyError::BadStatus));
        assert_eq!(
            parse(&Reply::Status(600).to_string()),
            Err(ReplyError::StatusOutOfRange(600))
        );
        assert_eq!(
            parse(
                &Reply::Bind {
                    token: t,
                    psn: PSN_MAX + 1
                }
                .to_string()
            ),
            Err(ReplyError::BadPsn)
        );
    }

    #[test]
    fn errors_say_why() {
        assert_eq!(ReplyError::Empty.to_string(), "reply is empty");
        assert_eq!(
            ReplyError::StatusOutOfRange(600).to_string(),
            "reply status 600 is outside 100..=599"
        );
        assert_eq!(
            ReplyError::TooManyFields { fields: 4 }.to_string(),
            "reply has 4 `:`-separated fields, at most 3 are allowed"
        );
        assert_eq!(
            ReplyError::BadToken(TokenError::WrongLength { len: 3 }).to_string(),
            "reply carries a malformed peer token: token is 3 characters long, expected exactly 88 hex digits"
        );
        assert_eq!(
            ReplyError::BadPsn.to_string(),
            "reply PSN is not exactly 6 hex digits"
        );
        assert_eq!(
            ReplyError::PsnWithoutBind(200).to_string(),
            "reply status 200 carries a PSN, which only a 409 binding reply may"
        );
        assert_eq!(
            ReplyError::BadCount.to_string(),
            "reply byte count is not exactly 16 lowercase hex digits"
        );
        assert_eq!(
            ReplyError::CountWithoutSuccess(409).to_string(),
            "reply status 409 carries a byte count, which only 200, 204 and 206 may"
        );
    }
}
