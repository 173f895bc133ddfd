//! The PROXY protocol (HAProxy's; version 2, binary, and version 1, text)
//! on connections from a trusted load balancer (docs/server.md,
//! "Behind a load balancer").
//!
//! A load balancer that forwards TCP hides each client behind its own
//! address: every client would share one address's share of the
//! connections (`crate::front::shares`), and logs and the RDMA layer would see the
//! balancer. With `http.proxy_protocol_from`, a connection from one of
//! those networks must begin with a PROXY header naming the client, and the
//! server takes the client's address from it; a connection from anywhere
//! else is never read for one (a client cannot claim another's address).
//!
//! Only the header is read off the socket, byte-exact: what follows it
//! (the HTTP request, or the TLS handshake) is left for the server.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;
use ppp::{HeaderResult, v1, v2};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Version 2's signature: the first 12 bytes of every v2 header.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// A version 2 header is its 16 fixed bytes plus the length they give.
const V2_FIXED: usize = 16;
/// The longest version 1 header, `\r\n` included (HAProxy's definition).
const V1_MAX: usize = 107;

/// The networks whose connections carry a PROXY header.
#[derive(Clone, Debug, Default)]
pub(crate) struct Trusted(Vec<IpNet>);

impl Trusted {
    /// The networks `from` names (addresses or CIDR prefixes, as
    /// `http.proxy_protocol_from` holds them).
    pub(crate) fn parse(from: &[String]) -> Result<Self, String> {
        from.iter()
            .map(|s| {
                s.parse::<IpNet>()
                    .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| {
                        format!("http.proxy_protocol_from: {s:?} is neither an address nor a CIDR prefix")
                    })
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// Whether a connection from `ip` carries a PROXY header.
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|n| n.contains(&ip))
    }
}

/// Who a PROXY header says the connection is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Proxied {
    /// A client, at this address.
    Client(SocketAddr),
    /// The balancer itself (v2 `LOCAL`, such as its health checks, or an
    /// address family without one: `UNKNOWN`, UNIX sockets): the
    /// connection's own peer stands.
    Local,
}

/// Why a connection that had to carry a PROXY header is dropped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProxyError {
    /// It does not start with one.
    #[error("the connection does not start with a PROXY protocol header")]
    Missing,
    /// It starts with one that does not parse.
    #[error("the PROXY protocol header is malformed: {0}")]
    Malformed(String),
    /// The socket failed or closed before the header's end.
    #[error("reading the PROXY protocol header: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads one PROXY header off `r`, exactly its bytes, and says whom it
/// names. The caller bounds the time it may take.
pub(crate) async fn read_header<R: AsyncRead + Unpin>(r: &mut R) -> Result<Proxied, ProxyError> {
    let mut buf = vec![0u8; V2_SIGNATURE.len()];
    r.read_exact(&mut buf).await?;
    if buf == V2_SIGNATURE {
        buf.resize(V2_FIXED, 0);
        r.read_exact(&mut buf[V2_SIGNATURE.len()..]).await?;
        let len = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
        buf.resize(V2_FIXED + len, 0);
        r.read_exact(&mut buf[V2_FIXED..]).await?;
    } else if buf.starts_with(b"PROXY ") {
        // Byte by byte up to the line's end, so that nothing past it is
        // taken from the request.
        while !buf.ends_with(b"\r\n") {
            if buf.len() >= V1_MAX {
                return Err(ProxyError::Malformed(
                    "a version 1 line longer than 107 bytes".into(),
                ));
            }
            buf.push(r.read_u8().await?);
        }
    } else {
        return Err(ProxyError::Missing);
    }
    parse(&buf)
}

/// Whom a whole header names.
fn parse(header: &[u8]) -> Result<Proxied, ProxyError> {
    let bad = |e: &dyn std::fmt::Display| ProxyError::Malformed(e.to_string());
    match HeaderResult::parse(header) {
        HeaderResult::V2(Ok(h)) => Ok(match (h.command, h.addresses) {
            (v2::Command::Local, _) => Proxied::Local,
            (v2::Command::Proxy, v2::Addresses::IPv4(a)) => {
                Proxied::Client(SocketAddr::from((a.source_address, a.source_port)))
            }
            (v2::Command::Proxy, v2::Addresses::IPv6(a)) => {
                Proxied::Client(SocketAddr::from((a.source_address, a.source_port)))
            }
            (v2::Command::Proxy, v2::Addresses::Unspecified | v2::Addresses::Unix(_)) => Proxied::Local,
        }),
        HeaderResult::V2(Err(e)) => Err(bad(&e)),
        HeaderResult::V1(Ok(h)) => Ok(match h.addresses {
            v1::Addresses::Tcp4(a) => Proxied::Client(SocketAddr::from((a.source_address, a.source_port))),
            v1::Addresses::Tcp6(a) => Proxied::Client(SocketAddr::from((a.source_address, a.source_port))),
            v1::Addresses::Unknown => Proxied::Local,
        }),
        HeaderResult::V1(Err(e)) => Err(bad(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(command: u8, from: SocketAddr, to: SocketAddr) -> Vec<u8> {
        v2::Builder::with_addresses(0x20 | command, v2::Protocol::Stream, (from, to))
            .build()
            .unwrap_or_default()
    }

    async fn read(bytes: &[u8]) -> (Result<Proxied, ProxyError>, Vec<u8>) {
        let mut r = bytes;
        let got = read_header(&mut r).await;
        (got, r.to_vec())
    }

    #[tokio::test]
    async fn a_v2_header_names_the_client_and_leaves_the_request() {
        let client: SocketAddr = "203.0.113.7:41000"
            .parse()
            .unwrap_or(SocketAddr::from(([0; 4], 0)));
        let lb: SocketAddr = "10.0.0.1:9000".parse().unwrap_or(SocketAddr::from(([0; 4], 0)));
        let mut wire = v2(1, client, lb);
        assert!(!wire.is_empty());
        wire.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        let (got, rest) = read(&wire).await;
        assert_eq!(got.ok(), Some(Proxied::Client(client)));
        assert_eq!(rest, b"GET / HTTP/1.1\r\n\r\n");

        let six: SocketAddr = "[2001:db8::5]:443"
            .parse()
            .unwrap_or(SocketAddr::from(([0; 4], 0)));
        let mut wire = v2(1, six, "[2001:db8::1]:80".parse().unwrap_or(six));
        wire.push(0x16); // a TLS record starts here
        let (got, rest) = read(&wire).await;
        assert_eq!(got.ok(), Some(Proxied::Client(six)));
        assert_eq!(rest, [0x16]);

        // LOCAL: the balancer's own connection.
        let (got, _) = read(&v2(0, client, lb)).await;
        assert_eq!(got.ok(), Some(Proxied::Local));
    }

    #[tokio::test]
    async fn a_v1_line_names_the_client_and_leaves_the_request() {
        let (got, rest) = read(b"PROXY TCP4 198.51.100.9 10.0.0.1 5555 80\r\nGET /").await;
        assert_eq!(
            got.ok(),
            Some(Proxied::Client(
                "198.51.100.9:5555"
                    .parse()
                    .unwrap_or(SocketAddr::from(([0; 4], 0)))
            ))
        );
        assert_eq!(rest, b"GET /");
        let (got, rest) = read(b"PROXY UNKNOWN\r\nX").await;
        assert_eq!(got.ok(), Some(Proxied::Local));
        assert_eq!(rest, b"X");
    }

    #[tokio::test]
    async fn anything_else_is_refused() {
        // A plain request from a trusted address: no header.
        assert!(matches!(
            read(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.0,
            Err(ProxyError::Missing)
        ));
        // A v1 line that never ends within its limit.
        let long = [b"PROXY TCP4 ".as_slice(), &[b'1'; 200]].concat();
        assert!(matches!(read(&long).await.0, Err(ProxyError::Malformed(_))));
        // Garbage addresses.
        assert!(matches!(
            read(b"PROXY TCP4 999.1.1.1 10.0.0.1 1 2\r\n").await.0,
            Err(ProxyError::Malformed(_))
        ));
        // A v2 header cut short: the socket ends first.
        let client: SocketAddr = "203.0.113.7:41000"
            .parse()
            .unwrap_or(SocketAddr::from(([0; 4], 0)));
        let wire = v2(1, client, client);
        assert!(matches!(
            read(&wire[..wire.len() - 2]).await.0,
            Err(ProxyError::Io(_))
        ));
        // A v2 header of another version.
        let mut wire = v2(1, client, client);
        wire[12] = 0x31;
        assert!(matches!(read(&wire).await.0, Err(ProxyError::Malformed(_))));
    }

    #[test]
    fn trusted_networks_parse_and_match() {
        let t = Trusted::parse(&["10.0.0.0/8".into(), "192.0.2.1".into(), "2001:db8::/32".into()]);
        let Ok(t) = t else {
            panic!("parse failed");
        };
        assert!(t.contains(IpAddr::from([10, 1, 2, 3])));
        assert!(t.contains(IpAddr::from([192, 0, 2, 1])));
        assert!(!t.contains(IpAddr::from([192, 0, 2, 2])));
        assert!(t.contains("::ffff:10.9.9.9".parse().unwrap_or(IpAddr::from([0; 4]))));
        assert!(t.contains("2001:db8:1::1".parse().unwrap_or(IpAddr::from([0; 4]))));
        assert!(Trusted::parse(&["not-a-net".into()]).is_err());
        assert!(!Trusted::default().contains(IpAddr::from([10, 1, 2, 3])));
    }
}
