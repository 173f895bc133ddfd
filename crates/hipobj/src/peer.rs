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
//!
//! Where the request went over TLS with the endpoint's certificate verified
//! ([`ControlChannel::VerifiedTls`]), nobody on the path can write the reply:
//! only the server can, and it may name any unicast GID (a multi-homed
//! server's RDMA NIC on another network than its S3 endpoint), except a
//! loopback one when the endpoint is not on the client's own host.

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

/// How the request that a server's answer came back on reached the server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ControlChannel {
    /// Plain HTTP, TLS whose certificate was not verified, or not known: a
    /// party on the path could have written the answer.
    #[default]
    Unauthenticated,
    /// TLS with the endpoint's certificate verified against the trusted
    /// roots: only the server could have written the answer.
    VerifiedTls,
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
    /// How the answer came back.
    pub channel: ControlChannel,
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
        if self.channel == ControlChannel::VerifiedTls {
            // Only the server wrote this answer: its RDMA NIC may be on any
            // address, but not on this host's loopback unless the server is
            // on this host too (the callers refused non-unicast GIDs).
            if !is_loopback(gid) || endpoint.iter().any(IpAddr::is_loopback) {
                return Ok(());
            }
            return Err(Error::new(
                ErrorKind::RdmaError,
                format!(
                    "the server's token names the loopback GID {gid}, but the server the request went to ({}) is not on this host: refusing to connect to it (list the address in HIPOBJ_ALLOW_PEER_GID if this is meant)",
                    list.join(", ")
                ),
            ));
        }
        Err(Error::new(
            ErrorKind::RdmaError,
            format!(
                "the server's token names GID {gid}, which is not an address of the server the request went to ({}): refusing to connect to it (for a server behind NAT or with its RDMA NIC on another address, list that address in HIPOBJ_ALLOW_PEER_GID, or reach the endpoint by https with a verified certificate)",
                list.join(", ")
            ),
        ))
    }
}

/// Whether `gid` is a loopback address (`::1`, or an IPv4-mapped 127/8).
fn is_loopback(gid: Gid) -> bool {
    match gid.to_ipv4() {
        Some(v4) => v4.is_loopback(),
        None => Ipv6Addr::from(gid.0).is_loopback(),
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
            channel: ControlChannel::Unauthenticated,
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
            channel: ControlChannel::Unauthenticated,
        };
        assert!(s.check(v4(192, 0, 2, 1)).is_ok());
        assert!(s.check(Gid(Ipv6Addr::LOCALHOST.octets())).is_ok());
        assert!(s.check(v4(192, 0, 2, 2)).is_err());
        let any = AllowPeer::parse("any");
        assert_eq!(any, AllowPeer::Any);
        let s = Servers {
            endpoint: Some(&ep),
            allow: &any,
            channel: ControlChannel::Unauthenticated,
        };
        assert!(s.check(v4(10, 1, 2, 3)).is_ok());
        // Unknown endpoint: nothing to check against.
        let s = Servers {
            endpoint: None,
            allow: &none,
            channel: ControlChannel::Unauthenticated,
        };
        assert!(s.check(v4(10, 1, 2, 3)).is_ok());
    }

    #[test]
    fn over_verified_tls_any_unicast_gid_passes_but_loopback_only_for_a_local_endpoint() {
        let none = AllowPeer::default();
        let remote = vec![IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7))];
        let s = Servers {
            endpoint: Some(&remote),
            allow: &none,
            channel: ControlChannel::VerifiedTls,
        };
        // A multi-homed server: its RDMA NIC on another network.
        assert!(s.check(v4(192, 0, 2, 1)).is_ok());
        assert!(
            s.check(Gid(Ipv6Addr::new(0xfe80, 0, 0, 0, 1, 2, 3, 4).octets()))
                .is_ok()
        );
        // A remote server naming this host's loopback is refused, in
        // both spellings, unless the switch lists it.
        for gid in [v4(127, 0, 0, 1), Gid(Ipv6Addr::LOCALHOST.octets())] {
            let e = s.check(gid).expect_err("a loopback GID from a remote server");
            assert_eq!(e.kind(), ErrorKind::RdmaError);
            assert!(e.to_string().contains("loopback"), "{e}");
        }
        let listed = AllowPeer::parse("127.0.0.1");
        let s = Servers { allow: &listed, ..s };
        assert!(s.check(v4(127, 0, 0, 1)).is_ok());
        // A server on this host may put its NIC on another loopback address.
        let local = vec![IpAddr::V4(Ipv4Addr::LOCALHOST)];
        let s = Servers {
            endpoint: Some(&local),
            allow: &none,
            channel: ControlChannel::VerifiedTls,
        };
        assert!(s.check(v4(127, 0, 0, 2)).is_ok());
        assert!(s.check(v4(192, 0, 2, 1)).is_ok());
        // The same answers over an unauthenticated channel are refused.
        let s = Servers {
            channel: ControlChannel::Unauthenticated,
            ..s
        };
        let e = s
            .check(v4(127, 0, 0, 2))
            .expect_err("plain HTTP, another address");
        assert!(e.to_string().contains("not an address of the server"), "{e}");
        assert!(s.check(v4(192, 0, 2, 1)).is_err());
    }

    #[test]
    fn mapped_spellings_of_an_ipv4_endpoint_match() {
        let ep = vec![IpAddr::V6(Ipv4Addr::new(10, 0, 0, 7).to_ipv6_mapped())];
        let none = AllowPeer::default();
        let s = Servers {
            endpoint: Some(&ep),
            allow: &none,
            channel: ControlChannel::Unauthenticated,
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
