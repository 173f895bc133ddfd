//! Collecting a message's headers (each at most once) and reading the
//! numbers and escapes of their values.

use super::*;

/// The values of the headers one message reads, each seen at most once.
pub(super) struct Fields<'v> {
    names: &'static [&'static str],
    values: Vec<Option<&'v [u8]>>,
}

impl<'v> Fields<'v> {
    pub(super) fn collect<'n>(
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

    pub(super) fn get(&self, name: &'static str) -> Option<&'v [u8]> {
        let i = self.names.iter().position(|n| *n == name)?;
        self.values[i]
    }

    pub(super) fn check_protocol(&self) -> Result<(), V2Error> {
        match self.get(PROTOCOL_HEADER) {
            Some(v) if v == PROTOCOL.as_bytes() => Ok(()),
            _ => Err(V2Error::Unsupported),
        }
    }

    pub(super) fn required(&self, name: &'static str) -> Result<&'v [u8], V2Error> {
        self.get(name).ok_or(V2Error::Missing(name))
    }

    pub(super) fn parse<T>(
        &self,
        name: &'static str,
        f: impl FnOnce(&[u8]) -> Option<T>,
    ) -> Result<T, V2Error> {
        f(self.required(name)?).ok_or(V2Error::Malformed(name))
    }

    pub(super) fn optional<T>(
        &self,
        name: &'static str,
        f: impl FnOnce(&[u8]) -> Option<T>,
    ) -> Result<Option<T>, V2Error> {
        self.get(name)
            .map(|v| f(v).ok_or(V2Error::Malformed(name)))
            .transpose()
    }

    /// The checksum of either form; both, when both come, must agree.
    pub(super) fn checksum(&self) -> Result<Option<Crc64Nvme>, V2Error> {
        let field = self.optional(CHECKSUM_HEADER, Crc64Nvme::from_field)?;
        let plain = self.optional(CHECKSUM_CRC64NVME_HEADER, Crc64Nvme::from_base64)?;
        match (field, plain) {
            (Some(a), Some(b)) if a != b => Err(V2Error::Malformed(CHECKSUM_HEADER)),
            (a, b) => Ok(a.or(b)),
        }
    }

    pub(super) fn client_mr_all_or_none(&self) -> Result<Option<(RemoteMr, Qpn)>, V2Error> {
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

pub(super) fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// 1 to `max` hex digits, either case, nothing else.
pub(super) fn parse_hex_var(value: &[u8], max: usize) -> Option<u64> {
    if value.is_empty() || value.len() > max || max > 16 {
        return None;
    }
    value
        .iter()
        .try_fold(0u64, |acc, &c| Some((acc << 4) | u64::from(nibble(c)?)))
}

/// Exactly `len` hex digits.
pub(super) fn parse_hex_exact(value: &[u8], len: usize) -> Option<u64> {
    if value.len() != len {
        return None;
    }
    parse_hex_var(value, len)
}

/// A decimal `u64`: 1 to 20 digits, no sign, no leading zero except "0".
pub(super) fn parse_decimal(value: &[u8]) -> Option<u64> {
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
pub(super) fn percent_decode(raw: &[u8]) -> Option<String> {
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
