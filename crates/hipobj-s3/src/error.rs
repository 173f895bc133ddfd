//! The error of an S3 call over RDMA: a hipObject error code, the S3 side's
//! status and code when the server answered with an error, and a sentence.

use std::fmt;

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use hipobj::ErrorKind;

/// Why a call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    status: Option<u16>,
    s3_code: Option<String>,
    declined: bool,
    unreachable: bool,
    untrusted: bool,
    cut_off: bool,
    never_sent: bool,
    detail: String,
}

/// This crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A failure of `kind`, described by `detail`.
    pub fn new(kind: ErrorKind, detail: impl Into<String>) -> Self {
        Self {
            kind,
            status: None,
            s3_code: None,
            declined: false,
            unreachable: false,
            untrusted: false,
            cut_off: false,
            never_sent: false,
            detail: detail.into(),
        }
    }

    /// This error, as the server's answer of HTTP `status`.
    pub(crate) fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    pub(crate) fn declined(op: &str, why: String) -> Self {
        Self {
            declined: true,
            ..Self::new(
                ErrorKind::S3Error,
                format!("{op}: {why}, and falling back to HTTP is off"),
            )
        }
    }

    /// The body of `op`'s response broke off part way: the gateway or the
    /// connection died while sending it.
    pub(crate) fn cut_off(op: &str, e: &dyn fmt::Display) -> Self {
        Self {
            cut_off: true,
            ..Self::new(ErrorKind::S3Error, format!("reading the {op} body failed: {e}"))
        }
    }

    /// An SDK failure of `op`.
    pub fn from_sdk<E>(op: &str, e: &SdkError<E, HttpResponse>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        match e {
            SdkError::ServiceError(se) => {
                let status = Some(se.raw().status().as_u16());
                let err = se.err();
                let code = err.code().map(str::to_owned);
                let what = match (&code, err.message()) {
                    (Some(c), Some(m)) => format!("{c}: {m}"),
                    (Some(c), None) => c.clone(),
                    (None, Some(m)) => m.to_owned(),
                    (None, None) => "no error code".to_owned(),
                };
                Self {
                    status,
                    s3_code: code,
                    ..Self::new(
                        ErrorKind::S3Error,
                        format!(
                            "{op} failed with HTTP {}: {what}",
                            status.map_or_else(|| "error".into(), |s| s.to_string())
                        ),
                    )
                }
            }
            // The credentials, not the server: nothing was sent.
            SdkError::DispatchFailure(_) if crate::credentials::not_loaded(e).is_some() => Self::new(
                ErrorKind::S3Error,
                format!("{op}: {}", crate::credentials::not_loaded(e).unwrap_or_default()),
            ),
            SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) => match untrusted_certificate(e) {
                Some((why, wrong_name)) => Self {
                    unreachable: true,
                    untrusted: true,
                    ..Self::new(
                        ErrorKind::S3Error,
                        format!(
                            "{op}: the S3 server's TLS certificate is not trusted ({why}); {}",
                            if wrong_name {
                                "the endpoint URL must use a name or address the certificate was issued for"
                            } else {
                                "give the CA certificate that signed it as a CA bundle (--ca-bundle FILE or AWS_CA_BUNDLE)"
                            }
                        ),
                    )
                },
                None => Self {
                    unreachable: true,
                    never_sent: not_connected(e),
                    ..Self::new(ErrorKind::S3Error, format!("{op}: {}", unreachable_cause(e)))
                },
            },
            SdkError::ResponseError(_) if not_http(e) => Self {
                unreachable: true,
                ..Self::new(ErrorKind::S3Error, format!("{op}: {}", unreachable_cause(e)))
            },
            other => Self::new(ErrorKind::S3Error, format!("{op} failed: {}", causes(other))),
        }
    }

    /// The hipObject error code behind it.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The HTTP status of the S3 error response, if one came.
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// The S3 error code (`NoSuchKey`, `AccessDenied`, ...), if one came.
    pub fn s3_code(&self) -> Option<&str> {
        self.s3_code.as_deref()
    }

    /// Whether the server declined RDMA and fallback was off.
    pub fn is_declined(&self) -> bool {
        self.declined
    }

    /// Whether no response came at all: the connection was refused, timed
    /// out, or broke before the answer (a gateway that died while serving
    /// the request). In the last case the request may or may not have taken
    /// effect; it never reports a success.
    pub fn is_unreachable(&self) -> bool {
        self.unreachable
    }

    /// Whether the request never reached the server: no connection was
    /// made (refused, a name that did not resolve, a connect that failed or
    /// timed out), so the server did nothing for it.
    pub fn never_sent(&self) -> bool {
        self.never_sent
    }

    /// Whether the https endpoint's certificate was refused: it does not
    /// chain to the trusted roots (the CA bundle, or the system's), has
    /// expired, or does not name the host. Nothing was sent.
    pub fn is_untrusted(&self) -> bool {
        self.untrusted
    }

    /// Whether the failure is the endpoint's rather than the request's, so
    /// that another gateway over the same store may serve the call: no
    /// response at all ([`Error::is_unreachable`]), a plain GetObject body
    /// that broke off part way, or HTTP 502, 503 or 504.
    pub fn may_fail_over(&self) -> bool {
        self.unreachable || self.cut_off || matches!(self.status, Some(502..=504))
    }

    /// This error as the last of several tries, the earlier failures named.
    pub(crate) fn after_failover(mut self, earlier: &[(usize, Error)]) -> Self {
        if !earlier.is_empty() {
            let tries: Vec<String> = earlier
                .iter()
                .map(|(at, e)| format!("endpoint {at}: {e}"))
                .collect();
            self.detail = format!(
                "{} (after {} failed tries: {})",
                self.detail,
                earlier.len(),
                tries.join("; ")
            );
        }
        self
    }

    /// This error of the request `from` as one of `to`, the call it was
    /// sent for (the probe's GetObject of a PutObject).
    pub(crate) fn renamed(mut self, from: &str, to: &str) -> Self {
        if let Some(rest) = self.detail.strip_prefix(from) {
            self.detail = format!("{to}{rest}");
        }
        self
    }

    /// This error as the last of `tries` tries of one call (retry.rs).
    pub(crate) fn tried(mut self, tries: u32) -> Self {
        if tries > 1 {
            self.detail = format!("{} (after {tries} tries)", self.detail);
        }
        self
    }

    /// The sentence for people.
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

impl std::error::Error for Error {}

/// The messages of `e` and the errors that caused it, outermost first,
/// joined by `": "`, each once (an error that repeats its cause's message
/// adds nothing). Never a `Debug` form: these are for people.
pub(crate) fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut at = Some(e);
    while let Some(err) = at {
        let msg = err.to_string();
        let msg = msg.trim();
        if !msg.is_empty() && !out.iter().any(|m| m.contains(msg)) {
            out.push(msg.to_owned());
        }
        at = next_cause(err);
    }
    out.join(": ")
}

/// The cause of `err`: an `io::Error`'s inner error (which its `source()`
/// skips), else `source()`.
fn next_cause<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a (dyn std::error::Error + 'static)> {
    match err
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
    {
        Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
        None => err.source(),
    }
}

/// Whether an `io::Error` of `kind` is somewhere in `e`'s causes.
fn has_io_kind(e: &(dyn std::error::Error + 'static), kind: std::io::ErrorKind) -> bool {
    let mut at = Some(e);
    while let Some(err) = at {
        if err
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == kind)
        {
            return true;
        }
        at = next_cause(err);
    }
    false
}

/// Whether no connection was made for the request: refused, a name that
/// did not resolve, or a TCP connect that failed (hyper's connector says
/// "tcp connect error" for those, and only for those).
fn not_connected(e: &(dyn std::error::Error + 'static)) -> bool {
    let all = causes(e);
    has_io_kind(e, std::io::ErrorKind::ConnectionRefused)
        || all.contains("tcp connect error")
        || all.contains("failed to lookup address")
        || all.contains("dns error")
}

/// Whether the answer was not HTTP at all (hyper could not parse it): most
/// often a TLS server spoken to with `http://`.
fn not_http(e: &(dyn std::error::Error + 'static)) -> bool {
    let all = causes(e);
    all.contains("invalid HTTP version")
        || all.contains("invalid HTTP status")
        || all.contains("error parsing HTTP")
}

/// One sentence for a request that got no HTTP answer: the cause and what
/// to do about it.
fn unreachable_cause(e: &(dyn std::error::Error + 'static)) -> String {
    use std::io::ErrorKind as Io;
    let all = causes(e);
    if has_io_kind(e, Io::ConnectionRefused) {
        "the S3 server refused the connection (nothing listens at the endpoint's address and port): check the endpoint URL and that the server is running".into()
    } else if not_http(e) {
        format!(
            "the endpoint did not answer in HTTP ({all}): if it serves TLS, the endpoint URL must start with https://"
        )
    } else if all.contains("failed to lookup address") || all.contains("dns error") {
        format!("the endpoint's host name could not be resolved ({all}): check the endpoint URL")
    } else if has_io_kind(e, Io::TimedOut) || all.contains("timed out") || all.contains("timeout") {
        format!("the S3 server did not answer in time ({all}): check the endpoint URL and the network")
    } else if has_io_kind(e, Io::ConnectionReset)
        || all.contains("connection closed before message completed")
    {
        format!("the S3 server closed the connection before it answered ({all})")
    } else {
        format!("the S3 server could not be reached: {all}")
    }
}

/// Why a TLS client refused the server's certificate, when it did somewhere
/// in the chain of `e`'s causes, and whether it was for naming another host. rustls reports it inside `io::Error`s (nested,
/// whose `source()` skips the error they wrap), so those are opened with
/// `get_ref`.
pub(crate) fn untrusted_certificate(e: &(dyn std::error::Error + 'static)) -> Option<(String, bool)> {
    use rustls::CertificateError::{NotValidForName, NotValidForNameContext};
    let mut at = Some(e);
    while let Some(err) = at {
        if let Some(r) = err.downcast_ref::<rustls::Error>() {
            return match r {
                rustls::Error::InvalidCertificate(c) => Some((
                    r.to_string(),
                    matches!(c, NotValidForName | NotValidForNameContext { .. }),
                )),
                _ => None,
            };
        }
        at = match err
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    None
}

impl From<hipobj::Error> for Error {
    fn from(e: hipobj::Error) -> Self {
        Self::new(e.kind(), e.to_string())
    }
}
