//! Settings read from the environment once, at init.
//!
//! Every variable keeps its default when it is unset, empty, or not a value
//! it accepts; nothing here fails init.

use std::time::Duration;

use crate::peer::AllowPeer;

/// The environment variables the library reads.
pub const ENV_VARS: [&str; 7] = [
    "HIPOBJ_MAX_TRANSFERS",
    "HIPOBJ_STAGE_TIMEOUT_MS",
    "HIPOBJ_DMABUF",
    "HIPOBJ_REQUIRE_GPU_DIRECT",
    "HIPOBJ_RDMA_DEBUG",
    "HIPOBJ_REQUIRE_MW",
    "HIPOBJ_ALLOW_PEER_GID",
];

/// The library's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Connections in the pool, so how many transfers run at once (1..=1024, default 16).
    pub max_transfers: u32,
    /// How long a staging copy may take (1 ms ..= 24 h, default 30 s).
    pub stage_timeout: Duration,
    /// Whether GPU memory is registered as a dma-buf when the NIC supports it (default on).
    pub dmabuf: bool,
    /// Whether falling back to a host staging buffer is a failure (default off).
    pub require_gpu_direct: bool,
    /// Whether failed dma-buf exports are reported on stderr (default off).
    pub rdma_debug: bool,
    /// Whether a device without type-2 memory windows is refused at init
    /// rather than used with the per-lease access-flag fallback (default off).
    pub require_mw: bool,
    /// Server GIDs accepted beyond the endpoint's addresses, or none of the
    /// check (`HIPOBJ_ALLOW_PEER_GID`: a comma-separated address list, or
    /// `any`; default: none beyond the endpoint's).
    pub allow_peer: AllowPeer,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            max_transfers: Self::DEFAULT_MAX_TRANSFERS,
            stage_timeout: Duration::from_millis(Self::DEFAULT_STAGE_TIMEOUT_MS),
            dmabuf: true,
            require_gpu_direct: false,
            rdma_debug: false,
            require_mw: false,
            allow_peer: AllowPeer::default(),
        }
    }
}

/// A whole decimal number: ASCII digits only, at least one.
fn whole_number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Only overflow can fail here, and an overflowing number is out of every range.
    s.parse().ok()
}

/// Whether a switch's value turns it off: it starts with 0, n or N.
fn says_no(s: &str) -> bool {
    matches!(s.as_bytes().first(), Some(b'0' | b'n' | b'N'))
}

impl Options {
    /// Default of `HIPOBJ_MAX_TRANSFERS`.
    pub const DEFAULT_MAX_TRANSFERS: u32 = 16;
    /// Largest `HIPOBJ_MAX_TRANSFERS`.
    pub const MAX_TRANSFERS_LIMIT: u32 = 1024;
    /// Default of `HIPOBJ_STAGE_TIMEOUT_MS`.
    pub const DEFAULT_STAGE_TIMEOUT_MS: u64 = 30_000;
    /// Largest `HIPOBJ_STAGE_TIMEOUT_MS`: 24 hours.
    pub const STAGE_TIMEOUT_LIMIT_MS: u64 = 24 * 60 * 60 * 1000;

    /// Reads the process environment.
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads settings through `lookup`, which maps a variable's name to its value.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let mut o = Self::default();
        let get = |name: &str| lookup(name).filter(|v| !v.is_empty());
        if let Some(n) = get("HIPOBJ_MAX_TRANSFERS").as_deref().and_then(whole_number)
            && (1..=u64::from(Self::MAX_TRANSFERS_LIMIT)).contains(&n)
        {
            // In range 1..=1024, so it fits.
            o.max_transfers = n as u32;
        }
        if let Some(ms) = get("HIPOBJ_STAGE_TIMEOUT_MS").as_deref().and_then(whole_number)
            && (1..=Self::STAGE_TIMEOUT_LIMIT_MS).contains(&ms)
        {
            o.stage_timeout = Duration::from_millis(ms);
        }
        if let Some(v) = get("HIPOBJ_DMABUF") {
            o.dmabuf = !says_no(&v);
        }
        if let Some(v) = get("HIPOBJ_REQUIRE_GPU_DIRECT") {
            o.require_gpu_direct = !says_no(&v);
        }
        if let Some(v) = get("HIPOBJ_RDMA_DEBUG") {
            o.rdma_debug = !v.starts_with('0');
        }
        if let Some(v) = get("HIPOBJ_REQUIRE_MW") {
            o.require_mw = !says_no(&v);
        }
        if let Some(v) = get("HIPOBJ_ALLOW_PEER_GID") {
            o.allow_peer = AllowPeer::parse(&v);
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str)]) -> Options {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Options::from_lookup(move |name| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_when_unset() {
        let o = with(&[]);
        assert_eq!(o, Options::default());
        assert_eq!(o.max_transfers, 16);
        assert_eq!(o.stage_timeout, Duration::from_secs(30));
        assert!(o.dmabuf && !o.require_gpu_direct && !o.rdma_debug);
    }

    #[test]
    fn max_transfers_bounds() {
        for (v, want) in [
            ("1", 1),
            ("1024", 1024),
            ("016", 16),
            ("64", 64),
            ("0", 16),
            ("1025", 16),
            ("-1", 16),
            ("+4", 16),
            (" 4", 16),
            ("4 ", 16),
            ("4x", 16),
            ("", 16),
            ("99999999999999999999999", 16),
        ] {
            assert_eq!(
                with(&[("HIPOBJ_MAX_TRANSFERS", v)]).max_transfers,
                want,
                "value {v:?}"
            );
        }
    }

    #[test]
    fn stage_timeout_bounds() {
        let t = |v: &str| with(&[("HIPOBJ_STAGE_TIMEOUT_MS", v)]).stage_timeout;
        assert_eq!(t("1"), Duration::from_millis(1));
        assert_eq!(t("86400000"), Duration::from_secs(86_400));
        assert_eq!(t("86400001"), Duration::from_secs(30));
        assert_eq!(t("0"), Duration::from_secs(30));
        assert_eq!(t("1.5"), Duration::from_secs(30));
    }

    #[test]
    fn switches() {
        let d = |v: &str| with(&[("HIPOBJ_DMABUF", v)]).dmabuf;
        assert!(!d("0") && !d("no") && !d("N") && !d("nope"));
        assert!(d("1") && d("yes") && d("off"));
        let r = |v: &str| with(&[("HIPOBJ_REQUIRE_GPU_DIRECT", v)]).require_gpu_direct;
        assert!(r("1") && r("y") && r("true"));
        assert!(!r("0") && !r("n") && !r("No") && !r(""));
        let m = |v: &str| with(&[("HIPOBJ_REQUIRE_MW", v)]).require_mw;
        assert!(m("1") && !m("0") && !Options::default().require_mw);
        let g = |v: &str| with(&[("HIPOBJ_RDMA_DEBUG", v)]).rdma_debug;
        assert!(g("1") && g("n") && g("yes"));
        assert!(!g("0") && !g("00") && !g(""));
        let a = |v: &str| with(&[("HIPOBJ_ALLOW_PEER_GID", v)]).allow_peer;
        assert_eq!(a("any"), AllowPeer::Any);
        assert_eq!(a("10.0.0.1"), AllowPeer::Listed(vec![[10, 0, 0, 1].into()]));
        assert_eq!(Options::default().allow_peer, AllowPeer::Listed(Vec::new()));
    }
}
