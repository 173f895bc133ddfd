//! The S3 service and the server's own endpoints in front of it.

use std::sync::Arc;

use hyper::body::Incoming;
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::{Body, HttpError};

use crate::config::Config;
use crate::metrics::{Metrics, inc};
use crate::rdma::RdmaLayer;
use crate::s3::access::Policy;
use crate::s3::errors::{finish, xml_text};

/// Builds the s3s service over the RDMA layer, with auth and policy;
/// `owners` is the server's one set of ownership rules, `keys` the access
/// keys in service (`crate::keys`).
pub(crate) fn s3_service(
    layer: RdmaLayer,
    config: &Config,
    owners: crate::s3::owners::Owners,
    keys: Arc<crate::keys::Keys>,
) -> S3Service {
    let mut b = S3ServiceBuilder::new(layer);
    b.set_auth(crate::keys::LiveAuth(keys));
    b.set_access(Policy {
        anonymous: config.anonymous,
        owners,
        sse_c_over_http: config.encryption.sse_c_over_http,
        acls: matches!(config.storage, crate::config::StorageConfig::Fs { .. }),
        public_access: config.public_access,
    });
    b.build()
}

/// What every connection serves: `/.hipobj/metrics`, the health paths
/// (`crate::health`), and S3 for everything else. Bucket names cannot
/// start with `.`, so the server's paths never hide a bucket.
#[derive(Clone, Debug)]
pub(crate) struct Front {
    /// The S3 service.
    pub s3: S3Service,
    /// The counters.
    pub metrics: Arc<Metrics>,
    /// Whether `/.hipobj/*` is served.
    pub endpoints: bool,
    /// The `hipobj-rc-v2` control path, `/.hipobj-rc/*`.
    pub v2: crate::rdma::rc_v2::V2,
    /// What every request body is held to (`crate::front::body`).
    pub bodies: crate::front::body::BodyLimits,
    /// Memory for chunked bodies without a length (`crate::front::unsized_body`).
    pub unsized_bodies: Arc<crate::front::unsized_body::Budget>,
    /// What `/.hipobj/metrics` reads.
    pub scrape: crate::metrics_http::Source,
    /// Who may read it (`metrics_token`).
    pub metrics_access: crate::metrics_http::Access,
    /// Whether this port serves it (not when `metrics_listen` is set).
    pub metrics_here: bool,
    /// Liveness, readiness and the drain flag (`crate::health`).
    pub health: Arc<crate::health::Health>,
}

impl Front {
    /// Serves one request, and writes its access log line and counts it
    /// when its response is done (`crate::access_log`).
    pub(crate) async fn call(
        &self,
        mut req: http::Request<Incoming>,
    ) -> Result<http::Response<Body>, HttpError> {
        let id = crate::access_log::new_request_id();
        // The `<Resource>` of an S3 error (`crate::s3::errors`).
        let resource = req.uri().path().to_owned();
        let mut record = crate::access_log::Record::begin(&req, id.clone(), self.metrics.clone());
        req.extensions_mut().insert(record.slot());
        let mut resp = self.answer(req, &mut record).await?;
        finish(&mut resp, &resource, &id);
        record.set_status(resp.status());
        let (parts, body) = resp.into_parts();
        Ok(http::Response::from_parts(
            parts,
            Body::http_body(crate::access_log::Logged::new(body, record)),
        ))
    }

    /// The response to one request.
    async fn answer(
        &self,
        req: http::Request<Incoming>,
        record: &mut crate::access_log::Record,
    ) -> Result<http::Response<Body>, HttpError> {
        inc(&self.metrics.http_requests);
        // Before s3s, which would take `.hipobj-rc` for a bucket name.
        if req.uri().path().starts_with(hipobj_proto::rc_v2::PATH_PREFIX) {
            record.set_operation(crate::operation::RC_V2);
            return Ok(self.v2.handle(req).await);
        }
        // Served whatever `endpoints` says: they tell nothing but one word.
        if let Some(resp) = self.health.answer(&req).await {
            record.set_operation(crate::operation::HEALTH);
            return Ok(resp);
        }
        if self.endpoints && req.method() == http::Method::GET && req.uri().path() == "/.hipobj/metrics" {
            record.set_operation(crate::operation::METRICS);
            if !self.metrics_here {
                let mut resp = http::Response::new(Body::empty());
                *resp.status_mut() = http::StatusCode::NOT_FOUND;
                return Ok(resp);
            }
            return Ok(crate::metrics_http::answer(&self.scrape, &self.metrics_access, req.headers()).await);
        }
        // s3s's own request log is off (it would log secrets, see
        // `crate::logging`): this line stands for it, with no query string
        // (a presigned URL's signature), no headers and no body.
        let (method, path) = (req.method().clone(), req.uri().path().to_owned());
        // GetObjectAttributes is GET on an object with `?attributes`.
        let attributes = req.uri().query().is_some_and(|q| {
            q.split('&')
                .any(|kv| kv == "attributes" || kv.starts_with("attributes="))
        });
        let mut req = req;
        let uri = req.uri().clone();
        if req.method() == http::Method::OPTIONS {
            record.set_operation(crate::operation::PREFLIGHT);
            return Ok(preflight(req.headers()));
        }
        if crate::s3::access::presign_expired_at_signing(&uri) {
            return Ok(error_response(
                http::StatusCode::FORBIDDEN,
                "AccessDenied",
                "Request has expired: X-Amz-Expires is negative",
            ));
        }
        crate::s3::access::date_for_sigv4(req.headers_mut(), &uri);
        let conn = req
            .extensions()
            .get::<crate::front::conn::ConnHandle>()
            .map(|c| c.0.clone());
        let (parts, body) = req.into_parts();
        let body = record.count_request(crate::front::body::Checked::new(
            &parts,
            body,
            self.bodies,
            conn,
            self.metrics.clone(),
        ));
        let body = if crate::front::unsized_body::is_unsized(&parts, &body) {
            // The signature first: no body byte is held for a request that
            // cannot verify (`crate::front::unsized_body::check_signature`).
            let held = match crate::front::unsized_body::check_signature(&parts, &self.v2.keys.current()) {
                Ok(()) => self.unsized_bodies.collect(Box::pin(body)).await,
                Err(e) => Err(e),
            };
            match held {
                Ok(held) => Body::http_body(held),
                Err(e) => {
                    if !matches!(e, crate::front::unsized_body::Refused::Body(_)) {
                        self.metrics.limit_acted(
                            &self.metrics.http_unsized_bodies_refused,
                            "unsized_body",
                            || format!("a chunked body without a length was refused: {e}"),
                        );
                    }
                    let resp = unsized_refusal(&e);
                    tracing::debug!(%method, %path, status = resp.status().as_u16(), "request: {e}");
                    return Ok(resp);
                }
            }
        } else {
            Body::http_body(body)
        };
        let req = http::Request::from_parts(parts, body);
        let resp = self.s3.call(req).await;
        match &resp {
            Ok(r) => tracing::debug!(%method, %path, status = r.status().as_u16(), "request"),
            Err(_) => tracing::debug!(%method, %path, "request failed before a response"),
        }
        let mut resp = resp?;
        if method == http::Method::GET && attributes {
            bare_etag(&mut resp);
        }
        Ok(resp)
    }
}

/// The S3 error for a chunked body without a length that was not taken.
fn unsized_refusal(e: &crate::front::unsized_body::Refused) -> http::Response<Body> {
    use crate::front::unsized_body::Refused;
    let (status, code) = match e {
        Refused::TooLong(_) => (http::StatusCode::LENGTH_REQUIRED, "MissingContentLength"),
        Refused::Busy => (http::StatusCode::SERVICE_UNAVAILABLE, "SlowDown"),
        Refused::Body(_) => (http::StatusCode::BAD_REQUEST, "IncompleteBody"),
        Refused::Signature(code, _) => (http::StatusCode::FORBIDDEN, *code),
    };
    let mut resp = error_response(status, code, &e.to_string());
    // The rest of a refused body is not read: the connection cannot carry
    // another request.
    resp.headers_mut()
        .insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    resp
}

/// A CORS preflight (`OPTIONS`): this server has no CORS configuration,
/// so S3's answers for a bucket without one: `400` for a preflight that
/// lacks `Origin` or `Access-Control-Request-Method`, `403` for one that
/// has them.
fn preflight(headers: &http::HeaderMap) -> http::Response<Body> {
    let complete = headers.contains_key(http::header::ORIGIN)
        && headers.contains_key(http::header::ACCESS_CONTROL_REQUEST_METHOD);
    if complete {
        error_response(
            http::StatusCode::FORBIDDEN,
            "AccessForbidden",
            "CORSResponse: CORS is not enabled for this bucket",
        )
    } else {
        error_response(
            http::StatusCode::BAD_REQUEST,
            "BadRequest",
            "Insufficient information. Origin request header needed.",
        )
    }
}

/// An S3 error answered before s3s.
fn error_response(status: http::StatusCode, code: &str, message: &str) -> http::Response<Body> {
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>{}</Message></Error>",
        xml_text(message)
    );
    let mut resp = http::Response::new(Body::from(xml));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/xml"),
    );
    resp
}

/// GetObjectAttributes returns its `<ETag>` without the quotes every other
/// S3 ETag has (AWS's documented form; boto3 hands the text over as is),
/// where s3s writes them as everywhere else.
fn bare_etag(resp: &mut http::Response<Body>) {
    if resp.status() != http::StatusCode::OK || resp.body().bytes().is_none() {
        return;
    }
    let Some(body) = resp.body_mut().take_bytes() else {
        return;
    };
    let text = String::from_utf8_lossy(&body)
        .replace("<ETag>\"", "<ETag>")
        .replace("\"</ETag>", "</ETag>");
    if let Ok(v) = http::HeaderValue::from_str(&text.len().to_string()) {
        resp.headers_mut().insert(http::header::CONTENT_LENGTH, v);
    }
    *resp.body_mut() = Body::from(text);
}
