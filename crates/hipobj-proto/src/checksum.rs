//! The CRC-64/NVME checksum a hipobj-rc-v2 READY answer carries, in the two
//! header forms found in the field (docs/protocol.md, "hipobj-rc-v2: the
//! server"): `x-amz-rdma-checksum: CRC64NVME <base64>` (hipObject upstream,
//! its MinIO bridge, versitygw) and `x-amz-rdma-checksum-crc64nvme:
//! <base64>` (the Ceph RGW fork). The base64 is of the checksum's eight
//! bytes, most significant first, as S3's `x-amz-checksum-crc64nvme`: 12
//! characters, the last one `=`.
//!
//! Only the canonical spelling parses: a value whose 11th character carries
//! bits past the 64 (which a lax decoder would map onto a valid checksum)
//! is malformed.

use std::fmt;

use base64_simd::STANDARD;

/// The algorithm name in the `x-amz-rdma-checksum` value.
pub(crate) const ALGORITHM: &str = "CRC64NVME";

/// A CRC-64/NVME value (the CRC of S3's `CRC64NVME` checksum algorithm).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Crc64Nvme(pub u64);

impl Crc64Nvme {
    /// Characters of the base64 form.
    pub const BASE64_LEN: usize = 12;

    /// Reads the base64 form: exactly 12 characters of the standard
    /// alphabet, padded, in its one canonical spelling.
    pub fn from_base64(value: &[u8]) -> Option<Crc64Nvme> {
        if value.len() != Self::BASE64_LEN {
            return None;
        }
        // `decode_to_vec`: `decode` into a fixed buffer panics when the text
        // would decode to more bytes than it holds (twelve unpadded
        // characters are nine bytes).
        let bytes: [u8; 8] = STANDARD.decode_to_vec(value).ok()?.try_into().ok()?;
        let crc = Crc64Nvme(u64::from_be_bytes(bytes));
        (crc.to_base64().as_bytes() == value).then_some(crc)
    }

    /// Reads the `x-amz-rdma-checksum` form: `CRC64NVME`, one space, and the
    /// base64 form.
    pub fn from_field(value: &[u8]) -> Option<Crc64Nvme> {
        let rest = value.strip_prefix(ALGORITHM.as_bytes())?.strip_prefix(b" ")?;
        Self::from_base64(rest)
    }

    /// The base64 form.
    pub fn to_base64(self) -> String {
        STANDARD.encode_to_string(self.0.to_be_bytes())
    }

    /// The `x-amz-rdma-checksum` form.
    pub fn to_field(self) -> String {
        format!("{ALGORITHM} {}", self.to_base64())
    }
}

impl fmt::Display for Crc64Nvme {
    /// The base64 form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_base64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // CRC-64/NVME("123456789") = 0xae8b14860a799888 (the catalogue's check
    // value), which S3 writes as below.
    const CHECK: u64 = 0xae8b_1486_0a79_9888;

    #[test]
    fn the_known_answer_reads_and_writes_in_both_forms() {
        assert_eq!(Crc64Nvme(CHECK).to_base64(), "rosUhgp5mIg=");
        assert_eq!(Crc64Nvme::from_base64(b"rosUhgp5mIg="), Some(Crc64Nvme(CHECK)));
        assert_eq!(Crc64Nvme(CHECK).to_field(), "CRC64NVME rosUhgp5mIg=");
        assert_eq!(
            Crc64Nvme::from_field(b"CRC64NVME rosUhgp5mIg="),
            Some(Crc64Nvme(CHECK))
        );
    }

    #[test]
    fn every_other_spelling_is_malformed() {
        for bad in [
            &b""[..],
            b"rosUhgp5mIg",
            b"rosUhgp5mIg==",
            b"rosUhgp5mIh=", // bits past the 64th: not canonical
            b"rosUhgp5mIg ",
            b"rosUhgp5m*g=",
            b"rosUhgp5mIgA",
            b"AAAAAAAAAAAAAAAA",
        ] {
            assert_eq!(
                Crc64Nvme::from_base64(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        for bad in [
            &b"rosUhgp5mIg="[..],
            b"CRC64NVME",
            b"CRC64NVME ",
            b"crc64nvme rosUhgp5mIg=",
            b"CRC64NVME  rosUhgp5mIg=",
            b"CRC32C rosUhgp5mIg=",
            b"CRC64NVME:rosUhgp5mIg=",
            b"CRC64NVME rosUhgp5mIh=",
        ] {
            assert_eq!(
                Crc64Nvme::from_field(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn every_value_survives_both_forms() {
        for v in [
            0,
            1,
            CHECK,
            u64::MAX,
            0x8000_0000_0000_0000,
            0x0123_4567_89ab_cdef,
        ] {
            let c = Crc64Nvme(v);
            assert_eq!(Crc64Nvme::from_base64(c.to_base64().as_bytes()), Some(c));
            assert_eq!(Crc64Nvme::from_field(c.to_field().as_bytes()), Some(c));
        }
    }
}
