//! hipobj-rc-v2's values: sequence numbers, cookies, session ids, sizes,
//! queue pair numbers, memory regions and the object a transfer names, each
//! with its one wire form.

use std::fmt;
use std::str::FromStr;

use super::fields::{nibble, parse_decimal, parse_hex_exact, parse_hex_var, percent_decode};
use super::*;

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
