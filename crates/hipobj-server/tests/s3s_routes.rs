//! Can s3s's own signature check take the server's own paths as `S3Route`s
//! (issue 40, "The gateway keeps the front")? This asks s3s 0.14.1 itself:
//! a bare `S3Service` (no store behind it) with a route for the
//! `hipobj-rc-v2` control path and one for `/.hipobj/*`, and requests as
//! their clients send them.
//!
//! What it shows (docs/architecture.md, "Why the front routes before
//! s3s"):
//!
//! * a control request signed as the upstream client signs it (SigV4 with
//!   service `hipobj`, no `x-amz-content-sha256`) never reaches the route:
//!   s3s reads `.hipobj-rc` as a bucket name and refuses it, and with a
//!   validation that lets the name through, refuses the service `hipobj`;
//! * the route does get a verified identity when a request is signed for
//!   `s3` with a payload hash, which is not how the control path is
//!   signed in the field;
//! * the health and metrics paths are refused the same way, and a metrics
//!   scrape's `Authorization: Bearer` token is refused by s3s before any
//!   route sees it.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::{Arc, Mutex};

use hyper::http::Extensions;
use hyper::{HeaderMap, Method, Uri};
use s3s::route::S3Route;
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::{Body, S3Request, S3Response, S3Result};

const KEY: (&str, &str) = ("route-key", "route-secret");
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// No store: every S3 operation is s3s's default `NotImplemented`.
struct NoStore;

#[async_trait::async_trait]
impl s3s::S3 for NoStore {}

/// The server's own paths as one route; records the access key of every
/// request it is handed (`None`: anonymous).
#[derive(Clone, Default)]
struct OwnPaths {
    reached: Arc<Mutex<Vec<Option<String>>>>,
}

#[async_trait::async_trait]
impl S3Route for OwnPaths {
    fn is_match(
        &self,
        _method: &Method,
        uri: &Uri,
        _headers: &HeaderMap,
        _extensions: &mut Extensions,
    ) -> bool {
        uri.path().starts_with("/.hipobj-rc/") || uri.path().starts_with("/.hipobj/")
    }

    async fn check_access(&self, _req: &mut S3Request<Body>) -> S3Result<()> {
        Ok(())
    }

    async fn call(&self, req: S3Request<Body>) -> S3Result<S3Response<Body>> {
        let who = req.credentials.as_ref().map(|c| c.access_key.clone());
        self.reached.lock().unwrap().push(who);
        Ok(S3Response::new(Body::from("route".to_owned())))
    }
}

/// Lets every bucket name through, `.hipobj-rc` and `.hipobj` included.
struct AnyName;

impl s3s::validation::NameValidation for AnyName {
    fn validate_bucket_name(&self, _name: &str) -> bool {
        true
    }
}

fn service(route: &OwnPaths, any_name: bool) -> S3Service {
    let mut b = S3ServiceBuilder::new(NoStore);
    b.set_auth(s3s::auth::SimpleAuth::from_single(KEY.0, KEY.1));
    b.set_route(route.clone());
    if any_name {
        b.set_validation(AnyName);
    }
    b.build()
}

/// A `hipobj-rc-v2` CANCEL as the upstream client signs it (service
/// `hipobj`, no `x-amz-content-sha256`; docs/protocol.md).
fn control_as_signed_in_the_field() -> http::Request<Body> {
    let path = "/.hipobj-rc/cancel";
    let date = hipobj_server::rdma::sigv4::amz_date_now();
    let headers = vec![
        ("host".to_owned(), "127.0.0.1".to_owned()),
        ("x-amz-date".to_owned(), date.clone()),
        ("x-amz-rdma-protocol".to_owned(), "hipobj-rc-v2".to_owned()),
        ("x-amz-rdma-session".to_owned(), "00".repeat(16)),
    ];
    let auth = hipobj_server::rdma::sigv4::sign("POST", path, &headers, KEY.0, KEY.1, &date);
    assert!(
        auth.contains("/hipobj/aws4_request"),
        "signed for service hipobj: {auth}"
    );
    let mut b = http::Request::builder().method("POST").uri(path);
    for (n, v) in &headers {
        b = b.header(n, v);
    }
    b.header("authorization", auth).body(Body::empty()).unwrap()
}

/// The same request signed as S3 requests are (service `s3`, with the
/// empty payload's hash).
fn control_signed_for_s3() -> http::Request<Body> {
    let path = "/.hipobj-rc/cancel";
    let extra = [
        ("x-amz-rdma-protocol", "hipobj-rc-v2".to_owned()),
        ("x-amz-rdma-session", "00".repeat(16)),
    ];
    let s = support::sigv4::sign("POST", path, "127.0.0.1", EMPTY_SHA256, &extra, KEY);
    let mut b = http::Request::builder().method("POST").uri(path);
    for (n, v) in &s.headers {
        b = b.header(n, v);
    }
    b.body(Body::empty()).unwrap()
}

async fn answer(s: &S3Service, req: http::Request<Body>) -> (u16, String) {
    let resp = s.call(req).await.unwrap();
    let status = resp.status().as_u16();
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn s3s_takes_the_control_path_for_a_bucket_name_it_refuses() {
    let route = OwnPaths::default();
    let (status, body) = answer(&service(&route, false), control_as_signed_in_the_field()).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("<Code>InvalidBucketName</Code>"), "{body}");
    assert!(route.reached.lock().unwrap().is_empty(), "the route never saw it");
}

#[tokio::test]
async fn s3s_refuses_the_service_name_the_upstream_client_signs_with() {
    let route = OwnPaths::default();
    let (status, body) = answer(&service(&route, true), control_as_signed_in_the_field()).await;
    assert_eq!(status, 501, "{body}");
    assert!(body.contains("<Code>NotImplemented</Code>"), "{body}");
    assert!(body.contains("unknown service &apos;hipobj&apos;"), "{body}");
    assert!(route.reached.lock().unwrap().is_empty(), "the route never saw it");
}

#[tokio::test]
async fn a_route_gets_a_verified_key_only_for_requests_signed_like_s3() {
    let route = OwnPaths::default();
    let (status, body) = answer(&service(&route, true), control_signed_for_s3()).await;
    assert_eq!((status, body.as_str()), (200, "route"));
    assert_eq!(*route.reached.lock().unwrap(), vec![Some(KEY.0.to_owned())]);
}

#[tokio::test]
async fn health_and_metrics_paths_are_bucket_names_to_s3s() {
    let route = OwnPaths::default();
    let s = service(&route, false);
    for path in ["/.hipobj/live", "/.hipobj/ready", "/.hipobj/metrics"] {
        let req = http::Request::builder()
            .uri(path)
            .header("host", "127.0.0.1")
            .body(Body::empty())
            .unwrap();
        let (status, body) = answer(&s, req).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(body.contains("<Code>InvalidBucketName</Code>"), "{path}: {body}");
    }
    assert!(route.reached.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_metrics_token_is_refused_before_any_route() {
    let route = OwnPaths::default();
    let req = http::Request::builder()
        .uri("/.hipobj/metrics")
        .header("host", "127.0.0.1")
        .header("authorization", "Bearer s3cret-token")
        .body(Body::empty())
        .unwrap();
    let (status, body) = answer(&service(&route, true), req).await;
    assert_ne!(status, 200, "{body}");
    assert!(
        route.reached.lock().unwrap().is_empty(),
        "the route never saw it: {body}"
    );
}
