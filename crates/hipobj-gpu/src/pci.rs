//! PCI addresses as the runtimes spell them, and as the seam wants them.

/// Rewrites a PCI address such as `"0000:3B:00.0"` or `"00000000:3b:00.0"`
/// (CUDA pads the domain to 8 digits in some places, HIP to 4; either may
/// use upper case) as `"dddd:bb:dd.f"` in lower case. A missing domain is 0.
/// `None` when the text is not a PCI address.
pub(crate) fn normalize_bus_id(raw: &str) -> Option<String> {
    let raw = raw.trim_end_matches('\0').trim();
    let mut parts: Vec<&str> = raw.split(':').collect();
    if parts.len() == 2 {
        parts.insert(0, "0");
    }
    let [domain, bus, devfn] = parts.as_slice() else {
        return None;
    };
    let (dev, func) = devfn.split_once('.')?;
    let hex = |s: &str, max: u32| {
        (!s.is_empty() && s.len() <= 8)
            .then(|| u32::from_str_radix(s, 16).ok())
            .flatten()
            .filter(|&v| v <= max)
    };
    let domain = hex(domain, 0xffff)?;
    let bus = hex(bus, 0xff)?;
    let dev = hex(dev, 0x1f)?;
    let func = hex(func, 0x7)?;
    Some(format!("{domain:04x}:{bus:02x}:{dev:02x}.{func:x}"))
}

#[cfg(test)]
mod tests {
    use super::normalize_bus_id;

    #[test]
    fn spellings_of_one_address_agree() {
        for raw in ["0000:3B:00.0", "00000000:3b:00.0", "3b:00.0", "0000:3b:00.0\0\0"] {
            assert_eq!(normalize_bus_id(raw).as_deref(), Some("0000:3b:00.0"), "{raw}");
        }
        assert_eq!(normalize_bus_id("0001:C1:1F.7").as_deref(), Some("0001:c1:1f.7"));
    }

    #[test]
    fn rejects_what_is_not_an_address() {
        for raw in [
            "",
            "gpu0",
            "0000:3b:00",
            "0000:3b:20.0",
            "0000:3b:00.8",
            "x:3b:00.0",
            "1:2:3:4.0",
        ] {
            assert_eq!(normalize_bus_id(raw), None, "{raw}");
        }
    }
}
