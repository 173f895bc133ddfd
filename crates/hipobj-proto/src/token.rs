//! The hipObject RDMA token: 44 bytes that name one side of a transfer.
//!
//! A token tells the peer which queue pair to talk to and which memory window
//! it may read or write. It travels in the `x-amz-rdma-token` request header,
//! and a server sends its own token back after a `NNN:` status in
//! `x-amz-rdma-reply`, always as 88 hexadecimal digits.
//!
//! # Layout
//!
//! All integers are little-endian; there is no padding and no version field.
//!
//! | Offset | Size | Field       | Encoding                       |
//! |-------:|-----:|-------------|--------------------------------|
//! | 0      | 1    | `transport` | `0` = DC, `1` = RC             |
//! | 1      | 4    | `qpn`       | u32 LE                         |
//! | 5      | 16   | `gid`       | raw bytes, copied verbatim     |
//! | 21     | 4    | `rkey`      | u32 LE                         |
//! | 25     | 8    | `addr`      | u64 LE                         |
//! | 33     | 8    | `len`       | u64 LE                         |
//! | 41     | 1    | `port`      | u8                             |
//! | 42     | 2    | `lid`       | u16 LE                         |
//!
//! Encoders write 88 lowercase digits; decoders accept either case, but
//! exactly 88 digits and nothing else, and only the two known transports.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// Size of a binary token, in bytes.
pub const TOKEN_LEN: usize = 44;

/// Size of a hex-encoded token, in characters (two per byte).
pub const TOKEN_HEX_LEN: usize = 2 * TOKEN_LEN;

// Field offsets, each derived from the previous field's end so that a change
// in one size moves everything after it.
const OFF_TRANSPORT: usize = 0;
const OFF_QPN: usize = OFF_TRANSPORT + 1;
const OFF_GID: usize = OFF_QPN + 4;
const OFF_RKEY: usize = OFF_GID + 16;
const OFF_ADDR: usize = OFF_RKEY + 4;
const OFF_LEN: usize = OFF_ADDR + 8;
const OFF_PORT: usize = OFF_LEN + 8;
const OFF_LID: usize = OFF_PORT + 1;
const END: usize = OFF_LID + 2;

// The wire layout is fixed; the build fails if the fields stop adding up to
// exactly TOKEN_LEN bytes or drift from the published offsets.
const _: () = {
    assert!(END == TOKEN_LEN);
    assert!(OFF_QPN == 1);
    assert!(OFF_GID == 5);
    assert!(OFF_RKEY == 21);
    assert!(OFF_ADDR == 25);
    assert!(OFF_LEN == 33);
    assert!(OFF_PORT == 41);
    assert!(OFF_LID == 42);
    assert!(TOKEN_HEX_LEN == 88);
};

/// How the peer reaches the queue pair a token names (token byte 0).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Dynamically Connected transport; `qpn` carries a DCT number.
    Dc = 0,
    /// Reliable Connected transport; `qpn` is an RC queue pair number.
    Rc = 1,
}

impl Transport {
    /// The byte that stands for this transport on the wire.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }
}

impl TryFrom<u8> for Transport {
    type Error = TokenError;

    /// Maps a wire byte to a transport; anything but 0 or 1 is
    /// [`TokenError::UnknownTransport`].
    fn try_from(byte: u8) -> Result<Self, TokenError> {
        match byte {
            0 => Ok(Transport::Dc),
            1 => Ok(Transport::Rc),
            other => Err(TokenError::UnknownTransport(other)),
        }
    }
}

/// Why a token could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The hex text was not exactly [`TOKEN_HEX_LEN`] bytes long.
    #[error("token is {len} characters long, expected exactly {TOKEN_HEX_LEN} hex digits")]
    WrongLength {
        /// The length that was found, in bytes.
        len: usize,
    },
    /// The byte at `index` is not a hexadecimal digit (`0-9`, `a-f`, `A-F`).
    #[error("token character at index {index} is not a hex digit")]
    BadHexDigit {
        /// Zero-based position of the first offending byte.
        index: usize,
    },
    /// Byte 0 names neither DC (0) nor RC (1).
    #[error("token names unknown transport {0:#04x} (expected 0 for DC or 1 for RC)")]
    UnknownTransport(u8),
}

/// One side of an RDMA transfer: a queue pair and a memory window.
///
/// Build one with a struct literal, send it with [`Token::encode`], and read
/// one with [`Token::decode`]. See the [module docs](self) for the layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Token {
    /// Transport of the queue pair (byte 0).
    pub transport: Transport,
    /// Queue pair number, or DCT number for [`Transport::Dc`] (bytes 1..5).
    pub qpn: u32,
    /// Port GID, copied verbatim (bytes 5..21). RoCEv2 over IPv4 uses an
    /// IPv4-mapped address; see [`Token::client_ipv4`].
    pub gid: [u8; 16],
    /// Remote key of the memory region (bytes 21..25).
    pub rkey: u32,
    /// Start address of the window in the owner's address space (bytes 25..33).
    pub addr: u64,
    /// Length of the window in bytes (bytes 33..41).
    pub len: u64,
    /// Physical port number on the NIC (byte 41).
    pub port: u8,
    /// InfiniBand local identifier; 0 on RoCE (bytes 42..44).
    pub lid: u16,
}

impl Token {
    /// Serializes the token into its 44-byte wire form, field by field.
    pub fn to_bytes(&self) -> [u8; TOKEN_LEN] {
        let mut out = [0u8; TOKEN_LEN];
        out[OFF_TRANSPORT] = self.transport.as_u8();
        out[OFF_QPN..OFF_GID].copy_from_slice(&self.qpn.to_le_bytes());
        out[OFF_GID..OFF_RKEY].copy_from_slice(&self.gid);
        out[OFF_RKEY..OFF_ADDR].copy_from_slice(&self.rkey.to_le_bytes());
        out[OFF_ADDR..OFF_LEN].copy_from_slice(&self.addr.to_le_bytes());
        out[OFF_LEN..OFF_PORT].copy_from_slice(&self.len.to_le_bytes());
        out[OFF_PORT] = self.port;
        out[OFF_LID..END].copy_from_slice(&self.lid.to_le_bytes());
        out
    }

    /// Parses the 44-byte wire form.
    ///
    /// Every byte pattern is a valid token except a transport byte other
    /// than 0 or 1, which gives [`TokenError::UnknownTransport`].
    pub fn from_bytes(bytes: &[u8; TOKEN_LEN]) -> Result<Token, TokenError> {
        Ok(Token {
            transport: Transport::try_from(bytes[OFF_TRANSPORT])?,
            qpn: u32::from_le_bytes(field::<OFF_QPN, 4>(bytes)),
            gid: field::<OFF_GID, 16>(bytes),
            rkey: u32::from_le_bytes(field::<OFF_RKEY, 4>(bytes)),
            addr: u64::from_le_bytes(field::<OFF_ADDR, 8>(bytes)),
            len: u64::from_le_bytes(field::<OFF_LEN, 8>(bytes)),
            port: bytes[OFF_PORT],
            lid: u16::from_le_bytes(field::<OFF_LID, 2>(bytes)),
        })
    }

    /// Encodes the token as 88 lowercase hex digits, ready for a header.
    pub fn encode(&self) -> HexToken {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; TOKEN_HEX_LEN];
        for (pair, byte) in out.chunks_exact_mut(2).zip(self.to_bytes()) {
            pair[0] = DIGITS[usize::from(byte >> 4)];
            pair[1] = DIGITS[usize::from(byte & 0x0f)];
        }
        HexToken(out)
    }

    /// Decodes a hex token: exactly 88 hex digits in either case, with no
    /// whitespace, prefix, suffix or separator.
    ///
    /// The length is checked first ([`TokenError::WrongLength`]), then each
    /// digit in order ([`TokenError::BadHexDigit`] names the first bad one),
    /// then the transport byte ([`TokenError::UnknownTransport`]).
    pub fn decode(hex: &[u8]) -> Result<Token, TokenError> {
        if hex.len() != TOKEN_HEX_LEN {
            return Err(TokenError::WrongLength { len: hex.len() });
        }
        let mut bytes = [0u8; TOKEN_LEN];
        for (i, (byte, pair)) in bytes.iter_mut().zip(hex.chunks_exact(2)).enumerate() {
            let hi = nibble(pair[0]).ok_or(TokenError::BadHexDigit { index: 2 * i })?;
            let lo = nibble(pair[1]).ok_or(TokenError::BadHexDigit { index: 2 * i + 1 })?;
            *byte = (hi << 4) | lo;
        }
        Token::from_bytes(&bytes)
    }

    /// The IPv4 address in the GID, if the GID is IPv4-mapped
    /// (`::ffff:a.b.c.d`: ten zero bytes, `ff ff`, then the address), as on
    /// RoCEv2 over IPv4. Any other GID gives `None`.
    pub fn client_ipv4(&self) -> Option<Ipv4Addr> {
        Ipv6Addr::from(self.gid).to_ipv4_mapped()
    }
}

impl FromStr for Token {
    type Err = TokenError;

    /// Same as [`Token::decode`] on the string's bytes.
    fn from_str(s: &str) -> Result<Token, TokenError> {
        Token::decode(s.as_bytes())
    }
}

/// Copies `N` bytes at offset `AT` out of a wire token.
fn field<const AT: usize, const N: usize>(bytes: &[u8; TOKEN_LEN]) -> [u8; N] {
    const { assert!(AT + N <= TOKEN_LEN) };
    let mut out = [0u8; N];
    out.copy_from_slice(&bytes[AT..AT + N]);
    out
}

/// Value of one hex digit in either case, or `None`.
fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// A token encoded as 88 lowercase hex digits, made by [`Token::encode`].
///
/// It lives on the stack and is `Copy`; use [`HexToken::as_str`] for a header
/// value or [`HexToken::as_bytes`] for raw bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct HexToken([u8; TOKEN_HEX_LEN]);

impl HexToken {
    /// The digits as a string slice (always 88 ASCII characters).
    pub fn as_str(&self) -> &str {
        // Only Token::encode builds a HexToken and it writes ASCII hex digits
        // alone, so this conversion cannot fail; the fallback is never taken.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// The digits as bytes (always 88 ASCII hex digits).
    pub fn as_bytes(&self) -> &[u8; TOKEN_HEX_LEN] {
        &self.0
    }
}

impl fmt::Display for HexToken {
    /// Writes the 88 digits with nothing around them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for HexToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("HexToken").field(&self.as_str()).finish()
    }
}

impl AsRef<str> for HexToken {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<[u8]> for HexToken {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Why the [`crate::TOKEN_HEADER`] of a request could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenHeaderError {
    /// The header appears more than once.
    #[error("more than one x-amz-rdma-token header")]
    Repeated,
    /// Its one value is not a token.
    #[error("x-amz-rdma-token: {0}")]
    Malformed(TokenError),
}

/// The token a request carries, from every value of its
/// [`crate::TOKEN_HEADER`] in order: `None` without one, an error unless
/// there is exactly one and it is a well-formed token ([`Token::decode`]).
/// What a server runs on the header a peer sends with each RDMA request.
pub fn token_from_header<'v>(
    values: impl IntoIterator<Item = &'v [u8]>,
) -> Result<Option<Token>, TokenHeaderError> {
    let mut all = values.into_iter();
    let Some(v) = all.next() else { return Ok(None) };
    if all.next().is_some() {
        return Err(TokenHeaderError::Repeated);
    }
    Token::decode(v).map(Some).map_err(TokenHeaderError::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token whose every field has a distinct, recognisable value.
    fn sample() -> Token {
        Token {
            transport: Transport::Rc,
            qpn: 0x0403_0201,
            gid: [
                0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e,
                0x1f,
            ],
            rkey: 0xa4a3_a2a1,
            addr: 0xb8b7_b6b5_b4b3_b2b1,
            len: 0xc8c7_c6c5_c4c3_c2c1,
            port: 0xd1,
            lid: 0xe2e1,
        }
    }

    /// The hex of `sample()`, written out by hand from the layout table:
    /// every multi-byte integer appears low byte first.
    const SAMPLE_HEX: &str = concat!(
        "01",                               // transport RC
        "01020304",                         // qpn 0x04030201 LE
        "101112131415161718191a1b1c1d1e1f", // gid verbatim
        "a1a2a3a4",                         // rkey LE
        "b1b2b3b4b5b6b7b8",                 // addr LE
        "c1c2c3c4c5c6c7c8",                 // len LE
        "d1",                               // port
        "e1e2",                             // lid LE
    );

    #[test]
    fn known_answer_bytes() {
        let expected: [u8; TOKEN_LEN] = [
            0x01, // transport
            0x01, 0x02, 0x03, 0x04, // qpn
            0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e,
            0x1f, // gid
            0xa1, 0xa2, 0xa3, 0xa4, // rkey
            0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, // addr
            0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, // len
            0xd1, // port
            0xe1, 0xe2, // lid
        ];
        assert_eq!(sample().to_bytes(), expected);
        assert_eq!(Token::from_bytes(&expected), Ok(sample()));
    }

    #[test]
    fn known_answer_hex() {
        assert_eq!(SAMPLE_HEX.len(), TOKEN_HEX_LEN);
        let hex = sample().encode();
        assert_eq!(hex.as_str(), SAMPLE_HEX);
        assert_eq!(hex.as_bytes(), SAMPLE_HEX.as_bytes());
        assert_eq!(hex.to_string(), SAMPLE_HEX);
        assert_eq!(format!("{hex:?}"), format!("HexToken({SAMPLE_HEX:?})"));
        assert_eq!(Token::decode(SAMPLE_HEX.as_bytes()), Ok(sample()));
        assert_eq!(SAMPLE_HEX.parse::<Token>(), Ok(sample()));
    }

    #[test]
    fn dc_transport_and_zero_token() {
        let zero = Token {
            transport: Transport::Dc,
            qpn: 0,
            gid: [0; 16],
            rkey: 0,
            addr: 0,
            len: 0,
            port: 0,
            lid: 0,
        };
        assert_eq!(zero.to_bytes(), [0u8; TOKEN_LEN]);
        assert_eq!(zero.encode().as_str(), "0".repeat(TOKEN_HEX_LEN));
        assert_eq!(Token::decode("0".repeat(TOKEN_HEX_LEN).as_bytes()), Ok(zero));
    }

    #[test]
    fn decode_accepts_uppercase_and_mixed_case() {
        let upper = SAMPLE_HEX.to_ascii_uppercase();
        assert_eq!(Token::decode(upper.as_bytes()), Ok(sample()));
        let mixed: String = SAMPLE_HEX
            .chars()
            .enumerate()
            .map(|(i, c)| if i % 2 == 0 { c.to_ascii_uppercase() } else { c })
            .collect();
        assert_eq!(Token::decode(mixed.as_bytes()), Ok(sample()));
    }

    #[test]
    fn decode_rejects_wrong_lengths() {
        for len in [0, 1, 2, 43, 44, 86, 87, 89, 90, 176] {
            let text = "0".repeat(len);
            assert_eq!(
                Token::decode(text.as_bytes()),
                Err(TokenError::WrongLength { len }),
                "len {len}"
            );
        }
    }

    #[test]
    fn decode_rejects_surrounding_text() {
        let cases = [
            format!(" {SAMPLE_HEX}"),
            format!("{SAMPLE_HEX} "),
            format!("{SAMPLE_HEX}\n"),
            format!("{SAMPLE_HEX}\r\n"),
            format!("{SAMPLE_HEX}\0"),
            format!("0x{SAMPLE_HEX}"),
            format!("{SAMPLE_HEX}:"),
        ];
        for case in &cases {
            assert_eq!(
                Token::decode(case.as_bytes()),
                Err(TokenError::WrongLength { len: case.len() }),
                "{case:?}"
            );
        }
    }

    #[test]
    fn decode_rejects_bad_digits_at_their_index() {
        let good = SAMPLE_HEX.as_bytes();
        for bad in [
            b'g', b'G', b'z', b' ', b'\0', b'\n', b'-', b'+', b':', b'x', 0x80, 0xff,
        ] {
            for index in [0, 1, 2, 43, 86, 87] {
                let mut text = good.to_vec();
                text[index] = bad;
                assert_eq!(
                    Token::decode(&text),
                    Err(TokenError::BadHexDigit { index }),
                    "byte {bad:#x} at {index}"
                );
            }
        }
        // Prefix "0x" padded to 88 digits: caught as a bad digit at index 1.
        let prefixed = format!("0x{}", &SAMPLE_HEX[2..]);
        assert_eq!(
            Token::decode(prefixed.as_bytes()),
            Err(TokenError::BadHexDigit { index: 1 })
        );
        // The first bad digit is the one reported.
        let mut two_bad = good.to_vec();
        two_bad[10] = b'q';
        two_bad[5] = b'q';
        assert_eq!(Token::decode(&two_bad), Err(TokenError::BadHexDigit { index: 5 }));
    }

    #[test]
    fn decode_rejects_non_ascii_of_right_length() {
        // 86 ASCII digits plus a two-byte UTF-8 character: 88 bytes in all.
        let text = format!("{}é", &SAMPLE_HEX[..86]);
        assert_eq!(text.len(), TOKEN_HEX_LEN);
        assert_eq!(
            Token::decode(text.as_bytes()),
            Err(TokenError::BadHexDigit { index: 86 })
        );
    }

    #[test]
    fn unknown_transports_are_rejected() {
        for t in [2u8, 3, 0x10, 0x7f, 0x80, 0xff] {
            let mut bytes = sample().to_bytes();
            bytes[0] = t;
            assert_eq!(Token::from_bytes(&bytes), Err(TokenError::UnknownTransport(t)));
            let hex = format!("{t:02x}{}", &SAMPLE_HEX[2..]);
            assert_eq!(
                Token::decode(hex.as_bytes()),
                Err(TokenError::UnknownTransport(t))
            );
        }
        assert_eq!(Transport::try_from(0), Ok(Transport::Dc));
        assert_eq!(Transport::try_from(1), Ok(Transport::Rc));
        assert_eq!(Transport::Dc.as_u8(), 0);
        assert_eq!(Transport::Rc.as_u8(), 1);
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert_eq!(
            TokenError::WrongLength { len: 3 }.to_string(),
            "token is 3 characters long, expected exactly 88 hex digits"
        );
        assert_eq!(
            TokenError::BadHexDigit { index: 7 }.to_string(),
            "token character at index 7 is not a hex digit"
        );
        assert_eq!(
            TokenError::UnknownTransport(2).to_string(),
            "token names unknown transport 0x02 (expected 0 for DC or 1 for RC)"
        );
    }

    #[test]
    fn client_ipv4_from_mapped_gid() {
        let mut token = sample();
        token.gid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 7, 42];
        assert_eq!(token.client_ipv4(), Some(Ipv4Addr::new(192, 168, 7, 42)));
        token.gid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0];
        assert_eq!(token.client_ipv4(), Some(Ipv4Addr::UNSPECIFIED));
    }

    #[test]
    fn client_ipv4_none_for_other_gids() {
        let mapped = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1];
        let mut token = sample();
        // The sample's own GID is not mapped.
        assert_eq!(token.client_ipv4(), None);
        // All zero, and the IPv4-compatible (not mapped) form ::a.b.c.d.
        token.gid = [0; 16];
        assert_eq!(token.client_ipv4(), None);
        token.gid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1];
        assert_eq!(token.client_ipv4(), None);
        // A link-local RoCE v1 / IB style GID.
        token.gid = [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55,
        ];
        assert_eq!(token.client_ipv4(), None);
        // Any one byte of the ::ffff: prefix changed.
        for i in 0..12 {
            let mut gid = mapped;
            gid[i] ^= 0x01;
            token.gid = gid;
            assert_eq!(token.client_ipv4(), None, "byte {i} changed");
        }
    }

    #[test]
    fn the_token_header_is_one_token_or_none() {
        let t = Token {
            transport: Transport::Rc,
            qpn: 0x11,
            gid: [1; 16],
            rkey: 2,
            addr: 3,
            len: 4,
            port: 1,
            lid: 0,
        };
        let hex = t.encode();
        let v: &[u8] = hex.as_bytes();
        assert_eq!(token_from_header([]), Ok(None));
        assert_eq!(token_from_header([v]), Ok(Some(t)));
        assert_eq!(token_from_header([v, v]), Err(TokenHeaderError::Repeated));
        assert_eq!(
            token_from_header([&v[1..]]),
            Err(TokenHeaderError::Malformed(TokenError::WrongLength { len: 87 }))
        );
        assert_eq!(
            TokenHeaderError::Repeated.to_string(),
            "more than one x-amz-rdma-token header"
        );
    }
}
