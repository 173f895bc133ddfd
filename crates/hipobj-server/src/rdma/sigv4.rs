//! SigV4 verification of the `hipobj-rc-v2` control requests: the checks
//! themselves are [`hipobj_target::sigv4`] (pure, so the fuzz target
//! `rc_v2_control` reaches them); this maps an HTTP request onto them.

use std::collections::HashMap;

pub use hipobj_target::sigv4::{amz_date_now, sign};

/// A request's headers as the `(name, value)` pairs the checks take.
pub fn header_pairs(headers: &http::HeaderMap) -> Vec<(&str, &[u8])> {
    headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())).collect()
}

/// Checks the request's signature now; `Ok` with the access key that
/// signed it.
pub fn verify(
    method: &http::Method,
    uri: &http::Uri,
    headers: &http::HeaderMap,
    keys: &HashMap<String, String>,
) -> Result<String, String> {
    hipobj_target::sigv4::verify_at(
        method.as_str(),
        uri.path(),
        uri.query(),
        &header_pairs(headers),
        keys,
        hipobj_target::sigv4::now_secs(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The HeaderMap form: what the server hands the checks.
    #[test]
    fn a_signed_header_map_verifies_and_a_changed_one_does_not() {
        let date = amz_date_now();
        let base = vec![
            ("host".to_owned(), "127.0.0.1".to_owned()),
            ("x-amz-date".to_owned(), date.clone()),
            ("x-amz-rdma-protocol".to_owned(), "hipobj-rc-v2".to_owned()),
            ("x-amz-rdma-session".to_owned(), "00".repeat(16)),
        ];
        let auth = sign("POST", "/.hipobj-rc/cancel", &base, "k", "s", &date);
        let mut h = http::HeaderMap::new();
        for (n, v) in &base {
            h.append(
                http::HeaderName::from_bytes(n.as_bytes()).expect("name"),
                http::HeaderValue::from_str(v).expect("value"),
            );
        }
        h.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_str(&auth).expect("auth"),
        );
        let keys = HashMap::from([("k".to_owned(), "s".to_owned())]);
        let uri: http::Uri = "/.hipobj-rc/cancel".parse().expect("uri");
        assert_eq!(verify(&http::Method::POST, &uri, &h, &keys).as_deref(), Ok("k"));
        let query: http::Uri = "/.hipobj-rc/cancel?x=1".parse().expect("uri");
        assert!(verify(&http::Method::POST, &query, &h, &keys).is_err());
        h.insert(
            "x-amz-rdma-session",
            http::HeaderValue::from_static("11111111111111111111111111111111"),
        );
        assert!(verify(&http::Method::POST, &uri, &h, &keys).is_err());
    }
}
