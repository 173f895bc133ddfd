//! Trusting an https endpoint: a CA bundle as the AWS CLI takes one
//! (`--ca-bundle FILE`, or the `AWS_CA_BUNDLE` environment variable), and
//! the aws-sdk-s3 HTTP client that trusts it.
//!
//! With a bundle, the client trusts the certificates in it and nothing
//! else (the system's roots are not consulted), as botocore does with
//! `verify=FILE`. Without one, it trusts the system's roots. There is no
//! way to turn verification off: an endpoint whose certificate does not
//! chain to what the client trusts, or does not name the host, is refused
//! at the handshake, and the error says so ([`Error::is_untrusted`]).
//!
//! ```no_run
//! # fn demo() -> Result<(), hipobj_s3::tls::CaBundleError> {
//! use hipobj_s3::tls::{CaBundle, http_client};
//! let ca = CaBundle::resolve(None)?; // AWS_CA_BUNDLE, if set
//! let conf = aws_sdk_s3::Config::builder()
//!     .http_client(http_client(ca.as_ref())?)
//!     .endpoint_url("https://127.0.0.1:9000")
//!     // ... region, credentials
//!     .build();
//! # let _ = conf; Ok(()) }
//! ```
//!
//! [`Error::is_untrusted`]: crate::Error::is_untrusted

use std::path::{Path, PathBuf};

use aws_smithy_http_client::tls::{self, TlsContext, TrustStore};
use aws_smithy_runtime_api::client::http::SharedHttpClient;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// The environment variable the AWS CLI and the SDKs read a CA bundle from.
pub const CA_BUNDLE_ENV: &str = "AWS_CA_BUNDLE";

/// Why a CA bundle cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaBundleError(String);

impl std::fmt::Display for CaBundleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CaBundleError {}

/// PEM certificates that an https endpoint's certificate must chain to.
#[derive(Clone)]
pub struct CaBundle {
    source: String,
    /// The usable certificates, as PEM.
    pem: Vec<u8>,
    count: usize,
    skipped: usize,
}

impl std::fmt::Debug for CaBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaBundle")
            .field("source", &self.source)
            .field("certificates", &self.count)
            .field("skipped", &self.skipped)
            .finish()
    }
}

impl CaBundle {
    /// The certificates of a PEM file (every `CERTIFICATE` block; other
    /// blocks are ignored). A file that is not PEM, or with no certificate
    /// usable as a trust anchor, is an error, never an empty trust store;
    /// certificates that are not usable are left out ([`CaBundle::skipped`]).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, CaBundleError> {
        let path = path.as_ref();
        let pem = std::fs::read(path)
            .map_err(|e| CaBundleError(format!("the CA bundle {} cannot be read: {e}", path.display())))?;
        Self::parse(path.display().to_string(), pem)
    }

    /// The certificates of PEM text (see [`CaBundle::from_file`]).
    pub fn from_pem(pem: impl Into<Vec<u8>>) -> Result<Self, CaBundleError> {
        Self::parse("the PEM text given".into(), pem.into())
    }

    /// The bundle `AWS_CA_BUNDLE` names, if it is set and not empty.
    pub fn from_env() -> Result<Option<Self>, CaBundleError> {
        match std::env::var_os(CA_BUNDLE_ENV) {
            Some(p) if !p.is_empty() => Self::from_file(PathBuf::from(p)).map(Some),
            _ => Ok(None),
        }
    }

    /// The bundle a user gave: `explicit` (a `--ca-bundle` flag) when set,
    /// else `AWS_CA_BUNDLE`, else none (the system's roots).
    pub fn resolve(explicit: Option<&Path>) -> Result<Option<Self>, CaBundleError> {
        match explicit {
            Some(p) => Self::from_file(p).map(Some),
            None => Self::from_env(),
        }
    }

    fn parse(source: String, pem: Vec<u8>) -> Result<Self, CaBundleError> {
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| CaBundleError(format!("the CA bundle {source} is not valid PEM: {e}")))?;
        if certs.is_empty() {
            return Err(CaBundleError(format!(
                "the CA bundle {source} holds no CERTIFICATE block"
            )));
        }
        // The check the TLS client makes when it builds its trust store,
        // where a certificate that fails it panics: only those that pass go
        // on, written out again as PEM. One that fails is not trusted (a
        // system bundle may hold a root rustls cannot use), and a bundle
        // with none left is an error.
        let mut out = Vec::new();
        let mut count = 0;
        let mut last_error = None;
        for c in &certs {
            match rustls::RootCertStore::empty().add(c.clone()) {
                Ok(()) => {
                    out.extend_from_slice(b"-----BEGIN CERTIFICATE-----\n");
                    let b64 = base64_simd::STANDARD.encode_to_string(c.as_ref());
                    for line in b64.as_bytes().chunks(64) {
                        out.extend_from_slice(line);
                        out.push(b'\n');
                    }
                    out.extend_from_slice(b"-----END CERTIFICATE-----\n");
                    count += 1;
                }
                Err(e) => last_error = Some(e),
            }
        }
        if count == 0 {
            return Err(CaBundleError(format!(
                "no certificate of the CA bundle {source} can be trusted ({})",
                last_error.map_or_else(String::new, |e| e.to_string())
            )));
        }
        Ok(Self {
            source,
            count,
            skipped: certs.len() - count,
            pem: out,
        })
    }

    /// How many certificates it trusts.
    pub fn len(&self) -> usize {
        self.count
    }

    /// How many of its certificates could not be used as trust anchors and
    /// are not trusted.
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// Never true: a bundle holds at least one certificate.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Where it came from (a file name), for messages.
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// The HTTP client for aws-sdk-s3 (hyper 1, rustls with aws-lc, HTTP/1.1
/// and HTTP/2 by ALPN): trusting only `ca` when given, else the system's
/// roots.
pub fn http_client(ca: Option<&CaBundle>) -> Result<SharedHttpClient, CaBundleError> {
    let store = match ca {
        Some(b) => TrustStore::empty()
            .with_native_roots(false)
            .with_pem_certificate(b.pem.clone()),
        None => TrustStore::default(),
    };
    let context = TlsContext::builder()
        .with_trust_store(store)
        .build()
        .map_err(|e| CaBundleError(format!("the TLS settings are unusable: {e}")))?;
    Ok(aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(tls::rustls_provider::CryptoMode::AwsLc))
        .tls_context(context)
        .build_https())
}
