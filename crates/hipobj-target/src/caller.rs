//! Who sent a token, and whether the token may name the client QP it names.

use std::net::{IpAddr, Ipv4Addr};

use hipobj_platform::Gid;

/// What the layer that carried the token (HTTP) knows of its sender. A
/// binding belongs to one caller: a token from another access key never
/// finds it (docs/protocol.md §4).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Caller {
    /// The access key that signed the request; empty for an anonymous one.
    /// (The key id, never its secret.)
    pub access_key: String,
    /// The address the request came from, when known. A token whose GID is
    /// IPv4-mapped must name this address (see [`Target`](crate::Target)'s
    /// `check_peer_address`).
    pub address: Option<IpAddr>,
}

impl Caller {
    /// A caller known by its access key only (in-process doubles, tests).
    pub fn key(access_key: impl Into<String>) -> Self {
        Self {
            access_key: access_key.into(),
            address: None,
        }
    }
}

/// Which IPv4 addresses belong to this host. A caller that connected over
/// loopback runs on this host, so its token's GID is one of this host's
/// addresses rather than the loopback address it connected from.
pub trait LocalAddresses: Send + Sync + std::fmt::Debug {
    /// Whether `ip` is an address of this host.
    fn is_local(&self, ip: Ipv4Addr) -> bool;
}

/// Only 127.0.0.0/8 is local: the default, which touches nothing outside.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoopbackOnly;

impl LocalAddresses for LoopbackOnly {
    fn is_local(&self, ip: Ipv4Addr) -> bool {
        ip.is_loopback()
    }
}

/// Why a token may not name its GID, or `None` when it may: an IPv4-mapped
/// GID must be the caller's address, or, for a caller on loopback, an
/// address of this host. Other GIDs (IPv6, link-local) and callers of
/// unknown address are not checked.
pub(crate) fn gid_mismatch(caller: &Caller, gid: Gid, local: &dyn LocalAddresses) -> Option<String> {
    let claimed = gid.to_ipv4()?;
    let from = caller.address?.to_canonical();
    let ok = match from {
        IpAddr::V4(a) if a == claimed => true,
        a if a.is_loopback() => local.is_local(claimed),
        _ => false,
    };
    (!ok).then(|| {
        format!("the token names a QP at {claimed}, but the request came from {from}: a token may only name the sender's own QPs")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(ip: &str) -> Caller {
        Caller {
            access_key: "k".into(),
            address: Some(ip.parse().expect("an address")),
        }
    }

    #[test]
    fn an_ipv4_mapped_gid_must_be_the_callers_address() {
        let gid = Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 7));
        assert_eq!(gid_mismatch(&caller("10.0.0.7"), gid, &LoopbackOnly), None);
        assert_eq!(gid_mismatch(&caller("::ffff:10.0.0.7"), gid, &LoopbackOnly), None);
        assert!(gid_mismatch(&caller("10.0.0.8"), gid, &LoopbackOnly).is_some());
        assert!(gid_mismatch(&caller("fd00::1"), gid, &LoopbackOnly).is_some());
        // From loopback: the GID must be an address of this host.
        assert!(gid_mismatch(&caller("127.0.0.1"), gid, &LoopbackOnly).is_some());
        let lo = Gid::from_ipv4(Ipv4Addr::new(127, 4, 5, 6));
        assert_eq!(gid_mismatch(&caller("127.0.0.1"), lo, &LoopbackOnly), None);
        assert_eq!(gid_mismatch(&caller("::1"), lo, &LoopbackOnly), None);
        // Unknown sender, or a GID that is not IPv4-mapped: not checked.
        assert_eq!(gid_mismatch(&Caller::key("k"), gid, &LoopbackOnly), None);
        let mut v6 = [0u8; 16];
        v6[0] = 0xfe;
        v6[1] = 0x80;
        v6[15] = 1;
        assert_eq!(gid_mismatch(&caller("10.0.0.8"), Gid(v6), &LoopbackOnly), None);
    }
}
