//! A certificate authority made for one test (rcgen), and the server
//! certificates it signs: the tests' https runs trust it by a CA bundle,
//! exactly as a user's client trusts their own CA. Shared with the tests of
//! hipobj-s3 and the CLI (`#[path]`).
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A CA: its certificate (PEM) and what signs with its key.
pub(crate) struct TestCa {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A server certificate and its key, as PEM files.
#[derive(Clone, Debug)]
pub(crate) struct ServerFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The certificate's DER, to compare with what a handshake served.
    pub der: Vec<u8>,
}

impl TestCa {
    /// A fresh CA named `name` (ECDSA P-256).
    pub(crate) fn new(name: &str) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = p.self_signed(&key).unwrap();
        Self {
            pem: cert.pem(),
            issuer: Issuer::new(p, key),
        }
    }

    /// The CA certificate, PEM.
    pub(crate) fn pem(&self) -> &str {
        &self.pem
    }

    /// Writes the CA certificate (a one-certificate CA bundle) to `path`.
    pub(crate) fn write_bundle(&self, path: &Path) -> PathBuf {
        std::fs::write(path, &self.pem).unwrap();
        path.to_path_buf()
    }

    /// A server certificate for `names` (DNS names or IP addresses),
    /// signed by this CA: (certificate PEM, key PEM, certificate DER).
    pub(crate) fn server_cert(&self, names: &[&str]) -> (String, String, Vec<u8>) {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut p = CertificateParams::new(names).unwrap();
        p.distinguished_name
            .push(DnType::CommonName, "hipobj-server test");
        p.is_ca = IsCa::NoCa;
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem(), cert.der().to_vec())
    }

    /// A certificate for 127.0.0.1 and localhost written as `<stem>.crt`
    /// and `<stem>.key` in `dir`.
    pub(crate) fn write_server(&self, dir: &Path, stem: &str) -> ServerFiles {
        let (cert, key, der) = self.server_cert(&["127.0.0.1", "localhost"]);
        let files = ServerFiles {
            cert: dir.join(format!("{stem}.crt")),
            key: dir.join(format!("{stem}.key")),
            der,
        };
        std::fs::write(&files.cert, cert).unwrap();
        std::fs::write(&files.key, key).unwrap();
        files
    }
}

impl ServerFiles {
    /// Puts this pair where `other` is (as a certificate renewal would:
    /// each file replaced by a rename, so no reader sees half a file).
    pub(crate) fn install_over(&self, other: &ServerFiles) {
        for (from, to) in [(&self.cert, &other.cert), (&self.key, &other.key)] {
            let tmp = to.with_extension("new");
            std::fs::copy(from, &tmp).unwrap();
            std::fs::rename(&tmp, to).unwrap();
        }
    }
}
