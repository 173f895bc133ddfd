//! Which server a reply may send the client's RDMA to.
//!
//! A binding reply (`409`) or a hipobj-rc-v2 PREPARE answer names the
//! server QP that the client's QP is then connected to. A party on the HTTP
//! path can write such a reply too, naming a QP on its own NIC, and would
//! then get the GET's proof-carrying WRITE or the PUT's READ of the whole
//! range. Where the application knows the endpoint it sent the request to,
//! the GID named must be one of that host's addresses: an IPv4-mapped GID's
//! IPv4 one of its IPv4 addresses (or their IPv4-mapped IPv6 spelling), any
//! other GID one of its IPv6 addresses. `HIPOBJ_ALLOW_PEER_GID`
//! ([`AllowPeer`]) lists more addresses for NAT and multi-homed servers, or
//! turns the check off. Where the endpoint is unknown (a C program that never
//! called `hipObjSetServerAddress`, a `Control` that does not say), nothing
//! is checked: docs/protocol.md §8 states what that leaves open.

use std::net::{IpAddr, Ipv6Addr, ToSocketAddrs};

use hipobj_platform::Gid;

use crate::error::{Error, ErrorKind, Result};

/// The server GIDs accepted beyond the endpoint's own addresses
/// (`HIPOBJ_ALLOW_PEER_GID`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllowPeer {
    /// These addresses too (default: none).
    Listed(Vec<IpAddr>),
    /// Any GID: the check is off.
    Any,
}

impl Default for AllowPeer {
    fn default() -> Self {
        AllowPeer::Listed(Vec::new())
    }
}

impl AllowPeer {
    /// Reads `HIPOBJ_ALLOW_PEER_GID`: `any` (or `*`) turns the check off;
    /// otherwise a comma-separated list of IPv4 and IPv6 addresses, of which
    /// entries that are not addresses are ignored.
    pub fn parse(value: &str) -> AllowPeer {
        let value = value.trim();
        if value.eq_ignore_ascii_case("any") || value == "*" {
            return AllowPeer::Any;
        }
        AllowPeer::Listed(
            value
                .split(',')
                .filter_map(|a| a.trim().parse::<IpAddr>().ok())
                .collect(),
        )
    }
}

/// The addresses of `host` (a name, an IPv4 address, or an IPv6 address
/// with or without brackets), resolved by the system's resolver. Empty if it
/// does not resolve.
pub fn resolve_host(host: &str) -> Vec<IpAddr> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return vec![ip];
    }
    let mut out: Vec<IpAddr> = (bare, 0u16)
        .to_socket_addrs()
        .map(|it| it.map(|s| s.ip()).collect())
        .unwrap_or_default();
    out.sort();
    out.dedup();
    out
}

/// What a transfer checks a server's GID against.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Servers<'a> {
    /// The endpoint's addresses; `None` when unknown.
    pub endpoint: Option<&'a [IpAddr]>,
    /// The switch.
    pub allow: &'a AllowPeer,
}

impl Servers<'_> {
    /// Whether the server token's `gid` may be connected to.
    pub(crate) fn check(&self, gid: Gid) -> Result<()> {
        let extra = match self.allow {
            AllowPeer::Any => return Ok(()),
            AllowPeer::Listed(a) => a.as_slice(),
        };
        let Some(endpoint) = self.endpoint else {
            return Ok(());
        };
        if endpoint.iter().chain(extra).any(|&a| names(a, gid)) {
            return Ok(());
        }
        let list: Vec<String> = endpoint.iter().map(IpAddr::to_string).collect();
        Err(Error::new(
            ErrorKind::RdmaError,
            format!(
                "the server's token names GID {gid}, which is not an address of the server the request went to ({}): refusing to connect to it (for a server behind NAT or with its RDMA NIC on another address, list that address in HIPOBJ_ALLOW_PEER_GID)",
                list.join(", ")
            ),
        ))
    }
}

/// Whether `gid` is the address `a`.
fn names(a: IpAddr, gid: Gid) -> bool {
    match (gid.to_ipv4(), a) {
        (Some(v4), IpAddr::V4(b)) => v4 == b,
        (Some(v4), IpAddr::V6(b)) => b.to_ipv4_mapped() == Some(v4),
        (None, IpAddr::V6(b)) => b == Ipv6Addr::from(gid.0),
        (None, IpAddr::V4(_)) => false,
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> Gid {
        Gid::from_ipv4(Ipv4Addr::new(a, b, c, d))
    }

    #[test]
    fn only_the_endpoints_addresses_pass_unless_listed_or_off() {
        let ep = vec![IpAddr::V4(Ipv4Addr::LOCALHOST)];
        let none = AllowPeer::default();
        let s = Servers {
            endpoint: Some(&ep),
            allow: &none,
        };
        assert!(s.check(v4(127, 0, 0, 1)).is_ok());
        let e = s.check(v4(127, 0, 0, 2)).expect_err("another loopback address");
        assert_eq!(e.kind(), ErrorKind::RdmaError);
        assert!(e.to_string().contains("HIPOBJ_ALLOW_PEER_GID"), "{e}");
        // A non-mapped GID must be an IPv6 address of the endpoint.
        assert!(s.check(Gid(Ipv6Addr::LOCALHOST.octets())).is_err());
        let listed = AllowPeer::parse("192.0.2.1, ::1, nonsense");
        assert_eq!(
            listed,
            AllowPeer::Listed(vec![
                IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
                IpAddr::V6(Ipv6Addr::LOCALHOST)
            ])
        );
        let s = Servers {
            endpoint: Some(&ep),
            allow: &listed,
        };
        assert!(s.check(v4(192, 0, 2, 1)).is_ok());
        assert!(s.check(Gid(Ipv6Addr::LOCALHOST.octets())).is_ok());
        assert!(s.check(v4(192, 0, 2, 2)).is_err());
        let any = AllowPeer::parse("any");
        assert_eq!(any, AllowPeer::Any);
        let s = Servers {
            endpoint: Some(&ep),
            allow: &any,
        };
        assert!(s.check(v4(10, 1, 2, 3)).is_ok());
        // Unknown endpoint: nothing to check against.
        let s = Servers {
            endpoint: None,
            allow: &none,
        };
        assert!(s.check(v4(10, 1, 2, 3)).is_ok());
    }

    #[test]
    fn mapped_spellings_of_an_ipv4_endpoint_match() {
        let ep = vec![IpAddr::V6(Ipv4Addr::new(10, 0, 0, 7).to_ipv6_mapped())];
        let none = AllowPeer::default();
        let s = Servers {
            endpoint: Some(&ep),
            allow: &none,
        };
        assert!(s.check(v4(10, 0, 0, 7)).is_ok());
        assert!(s.check(v4(10, 0, 0, 8)).is_err());
    }

    #[test]
    fn hosts_resolve_to_their_addresses() {
        assert_eq!(resolve_host("127.0.0.1"), vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]);
        assert_eq!(resolve_host("[::1]"), vec![IpAddr::V6(Ipv6Addr::LOCALHOST)]);
        assert!(resolve_host("localhost").iter().all(|a| a.is_loopback()));
    }
}
