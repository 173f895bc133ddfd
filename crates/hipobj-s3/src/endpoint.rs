//! The addresses of the host a request went to, which are the only ones a
//! server token may name (docs/protocol.md §8, "An on-path party"): the
//! host of the request the SDK sent (its endpoint resolved), resolved by the
//! system's resolver, once per host for a client and its clones.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// The resolved hosts, shared by a client's clones.
#[derive(Clone, Debug, Default)]
pub(crate) struct EndpointAddrs(Arc<Mutex<HashMap<String, Vec<IpAddr>>>>);

impl EndpointAddrs {
    /// The addresses of `host`. A host that does not resolve gives none, so
    /// every server token is refused.
    pub(crate) fn resolve(&self, host: &str) -> Vec<IpAddr> {
        let mut known = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        known
            .entry(host.to_owned())
            .or_insert_with(|| hipobj::resolve_host(host))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_resolve_once_to_their_addresses() {
        let e = EndpointAddrs::default();
        assert_eq!(
            e.resolve("127.0.0.1"),
            vec![IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)]
        );
        assert_eq!(
            e.resolve("[::1]"),
            vec![IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)]
        );
        assert_eq!(e.0.lock().map(|m| m.len()).unwrap_or(0), 2);
    }
}
