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

/// The highest port number a token may name: ports are 1-based and 255 is
/// the verbs' "no port" value, so 1..=254 whatever the NIC.
pub(crate) const MAX_PORT: u8 = 254;

/// Why no client could own `gid` as the address of its QP, or `None` when
/// one could: a unicast address a host can have. IPv4-mapped GIDs must not
/// map `0.0.0.0/8`, multicast (`224.0.0.0/4`), the reserved `240.0.0.0/4`
/// (the broadcast address included); IPv4's documentation ranges pass, since
/// test networks (the rxe VM's 192.0.2.0/24) give them to real NICs; other GIDs
/// must be global unicast (`2000::/3`, not the documentation prefixes),
/// unique local (`fc00::/7`) or link-local (`fe80::/10`), which leaves out
/// `::`, `::1`, the IPv4-compatible `::a.b.c.d`, and multicast `ff00::/8`.
pub(crate) fn unowned_gid(gid: Gid) -> Option<String> {
    if let Some(v4) = gid.to_ipv4() {
        let [a, b, c, _] = v4.octets();
        let why = match (a, b, c) {
            (0, _, _) => Some("an unspecified (\"this network\") address"),
            (224..=239, _, _) => Some("a multicast address"),
            (240..=255, _, _) => Some("a reserved or broadcast address"),
            _ => None,
        };
        return why.map(|w| format!("the token's GID {gid} maps {v4}, {w}: no client QP has it"));
    }
    let g = &gid.0;
    let global = (g[0] & 0xe0) == 0x20;
    let documentation = (g[..4] == [0x20, 0x01, 0x0d, 0xb8]) || (g[0] == 0x3f && g[1] == 0xff && g[2] < 0x10);
    let unique_local = (g[0] & 0xfe) == 0xfc;
    let ok = (global && !documentation) || unique_local || gid.is_link_local();
    (!ok).then(|| {
        format!(
            "the token's GID {gid} is not a unicast address a client can own \
             (global, unique-local or link-local; not ::, loopback, IPv4-compatible, multicast, \
             documentation or reserved)"
        )
    })
}

/// Why a token may not name `port`, or `None` when it may: 1 to
/// [`MAX_PORT`], and for a caller on this host (loopback), at most `nic_ports`
/// (the NIC it shares with us has no more).
pub(crate) fn bad_port(caller: &Caller, port: u8, nic_ports: u8) -> Option<String> {
    if port == 0 || port > MAX_PORT {
        return Some(format!(
            "the token's port {port} is not a port number (1 to {MAX_PORT})"
        ));
    }
    let here = caller.address.is_some_and(|a| a.to_canonical().is_loopback());
    (here && port > nic_ports.max(1)).then(|| {
        format!(
            "the token names port {port}, but this host's NIC has {} port(s)",
            nic_ports.max(1)
        )
    })
}

/// Why a token may not name its GID, or `None` when it may. An IPv4-mapped
/// GID must be the caller's address or, for a caller on loopback, an
/// address of this host (`local`). Any other GID (IPv6, link-local) must be
/// the caller's IPv6 address or, for a caller on loopback, one of this
/// host's GIDs (`ours`). Callers of unknown address are not checked.
pub(crate) fn gid_mismatch(
    caller: &Caller,
    gid: Gid,
    local: &dyn LocalAddresses,
    ours: &dyn Fn(Gid) -> bool,
) -> Option<String> {
    let from = caller.address?.to_canonical();
    let (ok, claimed) = match gid.to_ipv4() {
        Some(claimed) => (
            match from {
                IpAddr::V4(a) if a == claimed => true,
                a if a.is_loopback() => local.is_local(claimed),
                _ => false,
            },
            claimed.to_string(),
        ),
        None => (
            match from {
                IpAddr::V6(a) if a.octets() == gid.0 => true,
                a if a.is_loopback() => ours(gid),
                _ => false,
            },
            gid.to_string(),
        ),
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
        let none = |_: Gid| false;
        let m = |c: &Caller, g: Gid| gid_mismatch(c, g, &LoopbackOnly, &none);
        assert_eq!(m(&caller("10.0.0.7"), gid), None);
        assert_eq!(m(&caller("::ffff:10.0.0.7"), gid), None);
        assert!(m(&caller("10.0.0.8"), gid).is_some());
        assert!(m(&caller("fd00::1"), gid).is_some());
        // From loopback: the GID must be an address of this host.
        assert!(m(&caller("127.0.0.1"), gid).is_some());
        let lo = Gid::from_ipv4(Ipv4Addr::new(127, 4, 5, 6));
        assert_eq!(m(&caller("127.0.0.1"), lo), None);
        assert_eq!(m(&caller("::1"), lo), None);
        // Unknown sender: not checked.
        assert_eq!(m(&Caller::key("k"), gid), None);
    }

    fn gid(s: &str) -> Gid {
        Gid(s.parse::<std::net::Ipv6Addr>().expect("an IPv6 address").octets())
    }

    /// Issue 25, finding 4: addresses `bind` accepts but no client QP can
    /// have passed as "local" from loopback.
    #[test]
    fn only_unicast_addresses_a_client_could_own_are_tokens_gids() {
        for bad in [
            "::ffff:224.0.0.1",
            "::ffff:239.1.2.3",
            "::ffff:255.255.255.255",
            "::ffff:0.0.0.0",
            "::ffff:0.1.2.3",
            "::ffff:240.0.0.1",
            "2001:db8::1",
            "::a01:203",
            "::",
            "::1",
            "ff02::1",
            "ff0e::1234",
            "4000::1",
        ] {
            assert!(unowned_gid(gid(bad)).is_some(), "{bad} passed as a client's GID");
        }
        for good in [
            "::ffff:192.0.2.1",
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::ffff:169.254.1.1",
            "2a00:1450::1",
            "fd12:3456::1",
            "fe80::1234",
        ] {
            assert_eq!(unowned_gid(gid(good)), None, "{good} refused");
        }
    }

    /// Issue 25, finding 4: GIDs that are not IPv4-mapped skipped the
    /// address check entirely.
    #[test]
    fn a_gid_that_is_not_ipv4_mapped_must_be_the_callers_too() {
        let ours = |g: Gid| g == gid("fe80::aa:bbff:fecc:dd01");
        let m = |c: &str, g: &str| gid_mismatch(&caller(c), gid(g), &LoopbackOnly, &ours);
        // Not the sender's: refused, link-local included.
        assert!(m("10.0.0.8", "fe80::1").is_some());
        assert!(m("127.0.0.1", "fe80::1234").is_some());
        assert!(m("::1", "2a00:1450::1").is_some());
        assert!(m("2a00:1450::2", "2a00:1450::1").is_some());
        // The sender's own IPv6 address, or one of this host's GIDs for a
        // sender on this host.
        assert_eq!(m("2a00:1450::1", "2a00:1450::1"), None);
        assert_eq!(m("fe80::1", "fe80::1"), None);
        assert_eq!(m("127.0.0.1", "fe80::aa:bbff:fecc:dd01"), None);
        assert_eq!(m("::1", "fe80::aa:bbff:fecc:dd01"), None);
    }

    /// Issue 25, finding 4: tokens naming port 0 or 255 were bound.
    #[test]
    fn a_port_outside_the_protocol_or_the_nic_is_refused() {
        let lo = caller("127.0.0.1");
        assert!(bad_port(&lo, 0, 1).is_some());
        assert!(bad_port(&lo, 255, 1).is_some());
        assert!(bad_port(&lo, 2, 1).is_some(), "a port this host's NIC lacks");
        assert_eq!(bad_port(&lo, 1, 1), None);
        assert_eq!(bad_port(&lo, 2, 2), None);
        let remote = caller("10.0.0.8");
        assert!(bad_port(&remote, 0, 1).is_some());
        assert!(bad_port(&remote, 255, 1).is_some());
        assert_eq!(
            bad_port(&remote, 2, 1),
            None,
            "another host's NIC may have more ports"
        );
    }
}
