//! A small SigV4 signer for S3 requests written byte by byte (raw sockets
//! bound to a chosen source address, aws-chunked streams cut short): the
//! header signature of AWS's documentation, and the chunk signatures of
//! `STREAMING-AWS4-HMAC-SHA256-PAYLOAD`. The server's own verifier is
//! s3s's, which this must satisfy.

use sha2::{Digest, Sha256};

const REGION: &str = "us-east-1";
const SERVICE: &str = "s3";
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(data);
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().to_vec()
}

fn signing_key(secret: &str, date: &str) -> Vec<u8> {
    let k = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k = hmac(&k, REGION.as_bytes());
    let k = hmac(&k, SERVICE.as_bytes());
    hmac(&k, b"aws4_request")
}

/// A signed request head: the headers to send (`host`, `x-amz-date`,
/// `x-amz-content-sha256`, `extra`, `authorization`), and the signature
/// (the seed of a chunked stream).
pub(crate) struct Signed {
    pub headers: Vec<(String, String)>,
    pub signature: String,
    pub amz_date: String,
    secret: String,
}

/// Signs `method path` (path already URI-encoded, no query) with the
/// payload hash `payload` (a hex SHA-256, `UNSIGNED-PAYLOAD`, or
/// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD`), over `extra` headers too.
pub(crate) fn sign(
    method: &str,
    path: &str,
    host: &str,
    payload: &str,
    extra: &[(&str, String)],
    (access_key, secret): (&str, &str),
) -> Signed {
    let amz_date = hipobj_server::rdma::sigv4::amz_date_now();
    let date = &amz_date[..8];
    let mut h: Vec<(String, String)> = vec![
        ("host".into(), host.into()),
        ("x-amz-content-sha256".into(), payload.into()),
        ("x-amz-date".into(), amz_date.clone()),
    ];
    h.extend(
        extra
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v.trim().to_owned())),
    );
    h.sort();
    let names: Vec<&str> = h.iter().map(|(n, _)| n.as_str()).collect();
    let signed_names = names.join(";");
    let mut canonical = format!("{method}\n{path}\n\n");
    for (n, v) in &h {
        canonical.push_str(&format!("{n}:{v}\n"));
    }
    canonical.push_str(&format!("\n{signed_names}\n{payload}"));
    let scope = format!("{date}/{REGION}/{SERVICE}/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        sha256_hex(canonical.as_bytes())
    );
    let signature = hex(&hmac(&signing_key(secret, date), to_sign.as_bytes()));
    h.push((
        "authorization".into(),
        format!(
            "AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={signed_names}, Signature={signature}"
        ),
    ));
    Signed {
        headers: h,
        signature,
        amz_date,
        secret: secret.into(),
    }
}

impl Signed {
    /// The request head as text, with `more` headers that are not signed.
    pub(crate) fn head(&self, method: &str, path: &str, more: &[(&str, String)]) -> String {
        let mut s = format!("{method} {path} HTTP/1.1\r\n");
        for (n, v) in &self.headers {
            s.push_str(&format!("{n}: {v}\r\n"));
        }
        for (n, v) in more {
            s.push_str(&format!("{n}: {v}\r\n"));
        }
        s.push_str("\r\n");
        s
    }

    /// The aws-chunked encoding of `chunks` (each signed, chained from the
    /// seed signature); the final zero-length chunk is added only if
    /// `terminated`.
    pub(crate) fn chunked(&self, chunks: &[&[u8]], terminated: bool) -> Vec<u8> {
        let date = &self.amz_date[..8];
        let scope = format!("{date}/{REGION}/{SERVICE}/aws4_request");
        let key = signing_key(&self.secret, date);
        let mut prev = self.signature.clone();
        let mut out = Vec::new();
        let empty: &[u8] = b"";
        let all: Vec<&[u8]> = if terminated {
            chunks.iter().copied().chain(std::iter::once(empty)).collect()
        } else {
            chunks.to_vec()
        };
        for c in all {
            let to_sign = format!(
                "AWS4-HMAC-SHA256-PAYLOAD\n{}\n{scope}\n{prev}\n{EMPTY_SHA256}\n{}",
                self.amz_date,
                sha256_hex(c)
            );
            let sig = hex(&hmac(&key, to_sign.as_bytes()));
            out.extend_from_slice(format!("{:x};chunk-signature={sig}\r\n", c.len()).as_bytes());
            out.extend_from_slice(c);
            out.extend_from_slice(b"\r\n");
            prev = sig;
        }
        out
    }
}

/// The length of the aws-chunked encoding of chunks of these sizes.
pub(crate) fn chunked_len(sizes: &[usize], terminated: bool) -> usize {
    let one = |n: usize| format!("{n:x}").len() + ";chunk-signature=".len() + 64 + 2 + n + 2;
    sizes.iter().map(|&n| one(n)).sum::<usize>() + if terminated { one(0) } else { 0 }
}
