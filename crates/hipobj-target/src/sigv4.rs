//! SigV4 verification of the `hipobj-rc-v2` control requests, which do not
//! pass through s3s (docs/protocol.md, "hipobj-rc-v2 server"). Pure: the
//! request comes as its method, path, query and header pairs, the time as
//! seconds since the epoch, so the fuzz target `rc_v2_control` reaches it
//! without the server.
//!
//! Accepted: `AWS4-HMAC-SHA256` in the `Authorization` header, a
//! credential scope `<date>/<region>/<service>/aws4_request` whose service
//! is `hipobj` (the upstream client) or `s3`, a configured access key, an
//! `x-amz-date` within 15 minutes of now and on the scope's date, a
//! signature over the canonical request with no query string and the
//! payload hash of the empty body (or the `x-amz-content-sha256` the
//! request sends, which must then be signed and be the empty body's hash or
//! `UNSIGNED-PAYLOAD`: the control requests have no body). `host`,
//! `x-amz-date` and every `x-amz-*` header the request carries must be
//! signed. Nothing else: no anonymous, SigV2, presigned or streaming form.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

/// The SHA-256 of the empty body, hex.
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// How far `x-amz-date` may be from now, in seconds.
pub const SKEW_SECS: u64 = 15 * 60;

/// The services a control request may be signed for.
const SERVICES: [&str; 2] = [hipobj_proto::rc_v2::SIGV4_SERVICE, "s3"];

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

fn sha256(data: &[u8]) -> Vec<u8> {
    Sha256::digest(data).to_vec()
}

/// HMAC-SHA256 (RFC 2104).
fn hmac(key: &[u8], msg: &[u8]) -> Vec<u8> {
    const BLOCK: usize = 64;
    let mut k = if key.len() > BLOCK {
        sha256(key)
    } else {
        key.to_vec()
    };
    k.resize(BLOCK, 0);
    let mut inner = Sha256::new();
    inner.update(k.iter().map(|b| b ^ 0x36).collect::<Vec<_>>());
    inner.update(msg);
    let inner = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(k.iter().map(|b| b ^ 0x5c).collect::<Vec<_>>());
    outer.update(inner);
    outer.finalize().to_vec()
}

/// A header value as text, under `http::HeaderValue::to_str`'s rule:
/// visible ASCII, space and tab only.
fn text(v: &[u8]) -> Option<&str> {
    if v.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b)) {
        std::str::from_utf8(v).ok()
    } else {
        None
    }
}

/// Every value of the header `name` (names compared without regard to
/// case), in order.
fn all<'h, 'v>(headers: &'h [(&str, &'v [u8])], name: &'h str) -> impl Iterator<Item = &'v [u8]> + 'h {
    headers
        .iter()
        .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| *v)
}

fn first<'v>(headers: &[(&str, &'v [u8])], name: &str) -> Option<&'v [u8]> {
    all(headers, name).next()
}

/// Parses `YYYYMMDDTHHMMSSZ` into seconds since the epoch.
pub fn parse_amz_date(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())
            .flatten()
    };
    let (y, mo, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (h, mi, se) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, mo) = (y as i64, mo as i64);
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days)
        .ok()
        .map(|d| d * 86_400 + h * 3600 + mi * 60 + se)
}

/// Checks a request's signature at `now` (seconds since the epoch): `Ok`
/// with the access key that signed it. `headers` are the request's
/// `(name, value)` pairs as an `http::HeaderMap` holds them (lowercase
/// names; one pair per value); `query` is the URI's query, if it has one.
pub fn verify_at(
    method: &str,
    path: &str,
    query: Option<&str>,
    headers: &[(&str, &[u8])],
    keys: &HashMap<String, String>,
    now: u64,
) -> Result<String, String> {
    if query.is_some() {
        return Err("a control request has no query string".into());
    }
    let auth = control_authorization(headers)?;
    let secret = keys.get(auth.access_key).ok_or("unknown access key")?;
    let amz_date = first(headers, "x-amz-date")
        .and_then(text)
        .ok_or("x-amz-date is missing")?;
    let when = parse_amz_date(amz_date).ok_or("x-amz-date is malformed")?;
    if !amz_date.starts_with(auth.date) || auth.date.len() != 8 {
        return Err("x-amz-date is not on the credential's date".into());
    }
    if now.abs_diff(when) > SKEW_SECS {
        return Err("x-amz-date is more than 15 minutes from now".into());
    }
    let names = control_signed_names(auth.signed, headers)?;
    let payload = control_payload(headers)?;
    let canonical = control_canonical(method, path, headers, &names, auth.signed, payload)?;
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{}/{}/{}/aws4_request\n{}",
        auth.date,
        auth.region,
        auth.service,
        hex(&sha256(canonical.as_bytes()))
    );
    let k_date = hmac(format!("AWS4{secret}").as_bytes(), auth.date.as_bytes());
    let k_region = hmac(&k_date, auth.region.as_bytes());
    let k_service = hmac(&k_region, auth.service.as_bytes());
    let k_signing = hmac(&k_service, b"aws4_request");
    let want = hex(&hmac(&k_signing, to_sign.as_bytes()));
    if !same_text(&want, auth.signature) {
        return Err("the signature does not match".into());
    }
    Ok(auth.access_key.to_owned())
}

/// A control request's `Authorization` header, read.
struct ControlAuthorization<'h> {
    access_key: &'h str,
    date: &'h str,
    region: &'h str,
    service: &'h str,
    signed: &'h str,
    signature: &'h str,
}

/// The one `Authorization` header of `headers`: an `AWS4-HMAC-SHA256`
/// signature whose credential scope names one of [`SERVICES`].
fn control_authorization<'h>(headers: &[(&str, &'h [u8])]) -> Result<ControlAuthorization<'h>, String> {
    let auth = first(headers, "authorization").ok_or("the request is not signed")?;
    let auth = text(auth).ok_or("the Authorization header is not text")?;
    if all(headers, "authorization").count() != 1 {
        return Err("more than one Authorization header".into());
    }
    let rest = auth
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .ok_or("only AWS4-HMAC-SHA256 signatures are accepted")?;
    let (mut credential, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let part = part.trim();
        if let Some(v) = part.strip_prefix("Credential=") {
            credential = Some(v);
        } else if let Some(v) = part.strip_prefix("SignedHeaders=") {
            signed = Some(v);
        } else if let Some(v) = part.strip_prefix("Signature=") {
            signature = Some(v);
        } else {
            return Err(format!("unknown Authorization field {part:?}"));
        }
    }
    let (credential, signed, signature) = match (credential, signed, signature) {
        (Some(c), Some(h), Some(s)) => (c, h, s),
        _ => return Err("Authorization lacks Credential, SignedHeaders or Signature".into()),
    };
    let scope: Vec<&str> = credential.split('/').collect();
    let [access_key, date, region, service, terminator] = scope.as_slice() else {
        return Err("the credential scope is not key/date/region/service/aws4_request".into());
    };
    if *terminator != "aws4_request" || !SERVICES.contains(service) || region.is_empty() {
        return Err(format!(
            "the credential scope's service must be one of {SERVICES:?}"
        ));
    }
    Ok(ControlAuthorization {
        access_key,
        date,
        region,
        service,
        signed,
        signature,
    })
}

/// `SignedHeaders` as a list: sorted lowercase names that include `host`,
/// `x-amz-date` and every `x-amz-*` header the request carries.
fn control_signed_names<'s>(signed: &'s str, headers: &[(&str, &[u8])]) -> Result<Vec<&'s str>, String> {
    let names: Vec<&str> = signed.split(';').collect();
    if names
        .iter()
        .any(|n| n.is_empty() || n.bytes().any(|b| b.is_ascii_uppercase()))
        || names.windows(2).any(|w| w[0] >= w[1])
    {
        return Err("SignedHeaders is not a sorted list of lowercase names".into());
    }
    for must in ["host", "x-amz-date"] {
        if !names.contains(&must) {
            return Err(format!("{must} is not signed"));
        }
    }
    for (name, _) in headers {
        let n = name.to_ascii_lowercase();
        if n.starts_with("x-amz-") && !names.contains(&n.as_str()) {
            return Err(format!("{n} is not signed"));
        }
    }
    Ok(names)
}

/// The payload hash a control request signs: its `x-amz-content-sha256`
/// (the empty body's hash or `UNSIGNED-PAYLOAD`), or without one (the
/// upstream client sends none) the empty body's hash.
fn control_payload<'h>(headers: &[(&str, &'h [u8])]) -> Result<&'h str, String> {
    match first(headers, "x-amz-content-sha256") {
        None => Ok(EMPTY_SHA256),
        Some(v) => match text(v) {
            Some(v @ (EMPTY_SHA256 | "UNSIGNED-PAYLOAD")) => Ok(v),
            _ => Err("x-amz-content-sha256 must be the empty body's hash or UNSIGNED-PAYLOAD".into()),
        },
    }
}

/// The canonical request of a control request (no query string).
fn control_canonical(
    method: &str,
    path: &str,
    headers: &[(&str, &[u8])],
    names: &[&str],
    signed: &str,
    payload: &str,
) -> Result<String, String> {
    let mut canonical = format!("{method}\n{path}\n\n");
    for n in names {
        let values: Vec<String> = all(headers, n)
            .map(|v| {
                String::from_utf8_lossy(v)
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        if values.is_empty() {
            return Err(format!("signed header {n} is missing"));
        }
        canonical.push_str(n);
        canonical.push(':');
        canonical.push_str(&values.join(","));
        canonical.push('\n');
    }
    canonical.push('\n');
    canonical.push_str(signed);
    canonical.push('\n');
    canonical.push_str(payload);
    Ok(canonical)
}

/// Whether two signatures are the same text, in constant time: the
/// comparison does not say how much matched.
fn same_text(want: &str, got: &str) -> bool {
    want.len() == got.len()
        && want
            .bytes()
            .zip(got.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// Seconds since the epoch, now.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Signs a control request as the upstream client does (service `hipobj`,
/// no payload hash header, every header in `headers` signed): for tests
/// and fuzz targets that play that client.
pub fn sign(
    method: &str,
    path: &str,
    headers: &[(String, String)],
    access_key: &str,
    secret: &str,
    amz_date: &str,
) -> String {
    let mut sorted: Vec<(String, String)> = headers
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    sorted.sort();
    let signed: Vec<&str> = sorted.iter().map(|(n, _)| n.as_str()).collect();
    let signed = signed.join(";");
    let mut canonical = format!("{method}\n{path}\n\n");
    for (n, v) in &sorted {
        canonical.push_str(&format!("{n}:{v}\n"));
    }
    canonical.push_str(&format!("\n{signed}\n{EMPTY_SHA256}"));
    let date = amz_date.get(..8).unwrap_or_default();
    let region = "us-east-1";
    let service = hipobj_proto::rc_v2::SIGV4_SERVICE;
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{date}/{region}/{service}/aws4_request\n{}",
        hex(&sha256(canonical.as_bytes()))
    );
    let k = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k = hmac(&k, region.as_bytes());
    let k = hmac(&k, service.as_bytes());
    let k = hmac(&k, b"aws4_request");
    format!(
        "AWS4-HMAC-SHA256 Credential={access_key}/{date}/{region}/{service}/aws4_request, SignedHeaders={signed}, Signature={}",
        hex(&hmac(&k, to_sign.as_bytes()))
    )
}

/// `secs` since the epoch as `YYYYMMDDTHHMMSSZ`.
pub fn amz_date(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Now as `YYYYMMDDTHHMMSSZ`.
pub fn amz_date_now() -> String {
    amz_date(now_secs())
}

/// Why an S3 request's signature was refused from its head alone, before
/// any of its body was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadRefusal {
    /// The access key is not one of the server's (S3's
    /// `InvalidAccessKeyId`).
    UnknownKey,
    /// The signature is not the one the key would make (S3's
    /// `SignatureDoesNotMatch`); why, for the log.
    BadSignature(String),
    /// Not a signature that could verify: malformed, not SigV4, out of
    /// date or expired (S3's `AccessDenied`); why.
    Refused(String),
}

/// S3's SigV4 URI encoding: unreserved bytes as they are, `/` too unless
/// `slash`, everything else `%XX` in upper case.
fn uri_encode(out: &mut String, s: &str, slash: bool) {
    use std::fmt::Write as _;
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            b'/' if !slash => out.push('/'),
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
}

/// Percent-decoding (`plus`: `+` is a space, as in a query); `None` for
/// a bad escape or bytes that are not UTF-8.
fn percent_decode(s: &str, plus: bool) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let h = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(h, 16).ok()?);
                i += 3;
            }
            b'+' if plus => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// A query's `(name, value)` pairs, decoded as a form is.
fn query_pairs(query: &str) -> Option<Vec<(String, String)>> {
    query
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (n, v) = kv.split_once('=').unwrap_or((kv, ""));
            Some((percent_decode(n, true)?, percent_decode(v, true)?))
        })
        .collect()
}

/// The canonical query string of `pairs`, without `X-Amz-Signature`.
fn canonical_query(pairs: &[(String, String)]) -> String {
    let mut enc: Vec<(String, String)> = pairs
        .iter()
        .filter(|(n, _)| n != "X-Amz-Signature")
        .map(|(n, v)| {
            let (mut en, mut ev) = (String::new(), String::new());
            uri_encode(&mut en, n, true);
            uri_encode(&mut ev, v, true);
            (en, ev)
        })
        .collect();
    // Stable, by name only: values of one name stay in the request's order.
    enc.sort_by(|a, b| a.0.cmp(&b.0));
    enc.iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// The canonical headers and the signed-header list of `names` (sorted):
/// those the request carries, values trimmed, inner runs of white space
/// one space, repeated ones joined by commas.
fn canonical_headers(headers: &[(&str, &[u8])], names: &[&str]) -> Result<(String, String), HeadRefusal> {
    let mut lines = String::new();
    let mut list: Vec<&str> = Vec::new();
    for n in names {
        if *n == "authorization" {
            continue;
        }
        let mut values = Vec::new();
        for v in all(headers, n) {
            let v = text(v).ok_or_else(|| HeadRefusal::Refused(format!("signed header {n} is not text")))?;
            values.push(v.split_whitespace().collect::<Vec<_>>().join(" "));
        }
        if values.is_empty() {
            continue;
        }
        lines.push_str(n);
        lines.push(':');
        lines.push_str(&values.join(","));
        lines.push('\n');
        list.push(n);
    }
    Ok((lines, list.join(";")))
}

/// What a SigV4 signature covers, however it travels.
struct Signed<'a> {
    access_key: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
    amz_date: &'a str,
    names: Vec<&'a str>,
    signature: &'a str,
}

/// The credential scope `key/date/region/service/aws4_request`.
fn scope(credential: &str) -> Result<[&str; 4], HeadRefusal> {
    let parts: Vec<&str> = credential.split('/').collect();
    match parts.as_slice() {
        [key, date, region, service, "aws4_request"] if date.len() == 8 && !region.is_empty() => {
            Ok([key, date, region, service])
        }
        _ => Err(HeadRefusal::Refused(
            "the credential scope is not key/date/region/service/aws4_request".into(),
        )),
    }
}

/// Checks the signature of an S3 request from its head alone (method,
/// path as sent, query, headers) at `now`, as far as it can be checked
/// before the body: a SigV4 `Authorization` header over the headers and the
/// literal `x-amz-content-sha256` (which, for a streaming body, is the
/// seed of the chunk signatures), or a presigned URL's query signature.
/// `Ok(None)`: the request carries no signature at all; `Ok(Some(key))`:
/// signed by `key`. The body's own hash is left to the S3 layer, which
/// checks the whole request again.
pub fn verify_s3_head_at(
    method: &str,
    path: &str,
    query: Option<&str>,
    headers: &[(&str, &[u8])],
    keys: &HashMap<String, String>,
    now: u64,
) -> Result<Option<String>, HeadRefusal> {
    let refused = |why: &str| HeadRefusal::Refused(why.to_owned());
    let pairs = match query {
        Some(q) => query_pairs(q).ok_or_else(|| refused("the query string is not well encoded"))?,
        None => Vec::new(),
    };
    let param = |name: &str| pairs.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    let presigned = param("X-Amz-Signature").is_some();
    let auth = first(headers, "authorization");
    if !presigned && auth.is_none() {
        if pairs
            .iter()
            .any(|(n, _)| n == "Signature" || n == "AWSAccessKeyId")
        {
            return Err(refused("SigV2 signatures are not accepted"));
        }
        return Ok(None);
    }
    let (signed, payload) = if presigned {
        presigned_head(&pairs, now)?
    } else {
        header_head(headers, keys, now)?
    };
    let secret = keys.get(signed.access_key).ok_or(HeadRefusal::UnknownKey)?;
    if signed.service != "s3" {
        return Err(refused("the credential scope's service must be s3"));
    }
    if !signed.amz_date.starts_with(signed.date) {
        return Err(HeadRefusal::BadSignature(
            "the credential's date is not the request's".into(),
        ));
    }
    let query = canonical_query(&pairs);
    if signs_head(&signed, secret, method, path, &query, headers, payload)? {
        return Ok(Some(signed.access_key.to_owned()));
    }
    Err(HeadRefusal::BadSignature("the signature does not match".into()))
}

/// The signature of a presigned URL's query: `X-Amz-*` parameters, a
/// date not in the future and not expired; its payload is unsigned.
fn presigned_head(pairs: &[(String, String)], now: u64) -> Result<(Signed<'_>, &'static str), HeadRefusal> {
    let refused = |why: &str| HeadRefusal::Refused(why.to_owned());
    let param = |name: &str| pairs.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    if param("X-Amz-Algorithm") != Some("AWS4-HMAC-SHA256") {
        return Err(refused("X-Amz-Algorithm must be AWS4-HMAC-SHA256"));
    }
    let credential = param("X-Amz-Credential").ok_or_else(|| refused("X-Amz-Credential is missing"))?;
    let [access_key, date, region, service] = scope(credential)?;
    let amz_date = param("X-Amz-Date").ok_or_else(|| refused("X-Amz-Date is missing"))?;
    let names = param("X-Amz-SignedHeaders")
        .ok_or_else(|| refused("X-Amz-SignedHeaders is missing"))?
        .split(';')
        .collect();
    let expires: u64 = param("X-Amz-Expires")
        .and_then(|e| e.parse().ok())
        .ok_or_else(|| refused("X-Amz-Expires is missing or not a number of seconds"))?;
    let when = parse_amz_date(amz_date).ok_or_else(|| refused("X-Amz-Date is malformed"))?;
    if when > now.saturating_add(SKEW_SECS) {
        return Err(refused("X-Amz-Date is too far in the future"));
    }
    if now.saturating_sub(when) > expires {
        return Err(refused("the presigned URL has expired"));
    }
    let signature = param("X-Amz-Signature").unwrap_or_default();
    Ok((
        Signed {
            access_key,
            date,
            region,
            service,
            amz_date,
            names,
            signature,
        },
        "UNSIGNED-PAYLOAD",
    ))
}

/// The signature of an `Authorization` header, and the payload hash it
/// signs (`x-amz-content-sha256`, as sent).
fn header_head<'h>(
    headers: &[(&str, &'h [u8])],
    keys: &HashMap<String, String>,
    now: u64,
) -> Result<(Signed<'h>, &'h str), HeadRefusal> {
    let refused = |why: &str| HeadRefusal::Refused(why.to_owned());
    let auth = first(headers, "authorization");
    if all(headers, "authorization").count() != 1 {
        return Err(refused("more than one Authorization header"));
    }
    let auth = auth
        .and_then(text)
        .ok_or_else(|| refused("the Authorization header is not text"))?;
    let rest = auth
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .ok_or_else(|| refused("only AWS4-HMAC-SHA256 signatures are accepted"))?;
    let (mut credential, mut names, mut signature) = (None, None, None);
    for part in rest.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if let Some(v) = part.strip_prefix("Credential=") {
            credential = Some(v);
        } else if let Some(v) = part.strip_prefix("SignedHeaders=") {
            names = Some(v);
        } else if let Some(v) = part.strip_prefix("Signature=") {
            signature = Some(v);
        } else {
            return Err(refused("the Authorization header has an unknown field"));
        }
    }
    let (Some(credential), Some(names), Some(signature)) = (credential, names, signature) else {
        return Err(refused(
            "Authorization lacks Credential, SignedHeaders or Signature",
        ));
    };
    let [access_key, date, region, service] = scope(credential)?;
    let amz_date = first(headers, "x-amz-date")
        .and_then(text)
        .ok_or_else(|| refused("x-amz-date is missing"))?;
    let payload = first(headers, "x-amz-content-sha256")
        .and_then(text)
        .ok_or_else(|| refused("x-amz-content-sha256 is missing"))?;
    let when = parse_amz_date(amz_date).ok_or_else(|| refused("x-amz-date is malformed"))?;
    if now.abs_diff(when) > SKEW_SECS {
        // Checked after the key below: an unknown key is told so first.
        if !keys.contains_key(access_key) {
            return Err(HeadRefusal::UnknownKey);
        }
        return Err(refused("x-amz-date is more than 15 minutes from now"));
    }
    let mut names: Vec<&str> = names.split(';').collect();
    names.sort_unstable();
    Ok((
        Signed {
            access_key,
            date,
            region,
            service,
            amz_date,
            names,
            signature,
        },
        payload,
    ))
}

/// Whether `signed` signs this request head with `secret`: its path as S3
/// canonicalizes it (decoded, then encoded), or as sent.
fn signs_head(
    signed: &Signed<'_>,
    secret: &str,
    method: &str,
    path: &str,
    query: &str,
    headers: &[(&str, &[u8])],
    payload: &str,
) -> Result<bool, HeadRefusal> {
    let (header_lines, header_list) = canonical_headers(headers, &signed.names)?;
    let k_date = hmac(format!("AWS4{secret}").as_bytes(), signed.date.as_bytes());
    let k_region = hmac(&k_date, signed.region.as_bytes());
    let k_service = hmac(&k_region, signed.service.as_bytes());
    let k_signing = hmac(&k_service, b"aws4_request");
    // The path as S3 canonicalizes it (decoded, then encoded), and as sent.
    let mut paths = Vec::with_capacity(2);
    if let Some(decoded) = percent_decode(path, false) {
        let mut p = String::new();
        uri_encode(&mut p, &decoded, false);
        paths.push(p);
    }
    paths.push(path.to_owned());
    for p in &paths {
        let canonical = format!("{method}\n{p}\n{query}\n{header_lines}\n{header_list}\n{payload}");
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{}\n{}/{}/{}/aws4_request\n{}",
            signed.amz_date,
            signed.date,
            signed.region,
            signed.service,
            hex(&sha256(canonical.as_bytes()))
        );
        let want = hex(&hmac(&k_signing, to_sign.as_bytes()));
        if same_text(&want, signed.signature) {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> HashMap<String, String> {
        HashMap::from([("hipobj-test-key".to_owned(), "hipobj-test-secret".to_owned())])
    }

    fn with_auth<'a>(pairs: &[(&'a str, &'a str)], auth: &'a str) -> Vec<(&'a str, &'a [u8])> {
        let mut h: Vec<(&str, &[u8])> = pairs.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
        h.push(("authorization", auth.as_bytes()));
        h
    }

    #[test]
    fn the_upstream_form_verifies_and_every_weakening_does_not() {
        let now = 1_796_064_060;
        let date = amz_date(now);
        let base = vec![
            ("host".to_owned(), "127.0.0.1".to_owned()),
            ("x-amz-date".to_owned(), date.clone()),
            ("x-amz-rdma-protocol".to_owned(), "hipobj-rc-v2".to_owned()),
            ("x-amz-rdma-session".to_owned(), "00".repeat(16)),
        ];
        let path = "/.hipobj-rc/cancel";
        let auth = sign(
            "POST",
            path,
            &base,
            "hipobj-test-key",
            "hipobj-test-secret",
            &date,
        );
        let pairs: Vec<(&str, &str)> = base.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        let v = |m: &str, p: &str, q: Option<&str>, h: &[(&str, &[u8])], t: u64| {
            verify_at(m, p, q, h, &keys(), t)
        };
        assert_eq!(
            v("POST", path, None, &with_auth(&pairs, &auth), now).as_deref(),
            Ok("hipobj-test-key")
        );
        // Within the skew either way, and not beyond it.
        assert!(v("POST", path, None, &with_auth(&pairs, &auth), now + SKEW_SECS).is_ok());
        assert!(v("POST", path, None, &with_auth(&pairs, &auth), now - SKEW_SECS).is_ok());
        assert!(v("POST", path, None, &with_auth(&pairs, &auth), now + SKEW_SECS + 1).is_err());

        // A changed header value, an added unsigned x-amz header, another
        // path or method, another secret, a query, a second Authorization:
        // all refused.
        let mut changed = pairs.clone();
        changed[3].1 = "11111111111111111111111111111111";
        assert!(v("POST", path, None, &with_auth(&changed, &auth), now).is_err());
        let mut added = pairs.clone();
        added.push(("x-amz-rdma-cookie", "1a2b3c4d"));
        assert!(v("POST", path, None, &with_auth(&added, &auth), now).is_err());
        assert!(v("POST", "/.hipobj-rc/ready", None, &with_auth(&pairs, &auth), now).is_err());
        assert!(v("PUT", path, None, &with_auth(&pairs, &auth), now).is_err());
        assert!(v("POST", path, Some("x=1"), &with_auth(&pairs, &auth), now).is_err());
        let mut twice = with_auth(&pairs, &auth);
        twice.push(("authorization", auth.as_bytes()));
        assert!(v("POST", path, None, &twice, now).is_err());
        let wrong = sign("POST", path, &base, "hipobj-test-key", "nope", &date);
        assert!(v("POST", path, None, &with_auth(&pairs, &wrong), now).is_err());
        // An x-amz-rdma header left out of the signature.
        let unsigned_rdma = sign(
            "POST",
            path,
            &base[..3],
            "hipobj-test-key",
            "hipobj-test-secret",
            &date,
        );
        assert!(v("POST", path, None, &with_auth(&pairs, &unsigned_rdma), now).is_err());
    }

    /// AWS's documented SigV4 examples (GET /test.txt with a Range, header
    /// and presigned forms), and what changes them.
    #[test]
    fn s3_heads_verify_as_aws_documents_them() {
        let keys = HashMap::from([(
            "AKIAIOSFODNN7EXAMPLE".to_owned(),
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".to_owned(),
        )]);
        let now = parse_amz_date("20130524T000000Z").unwrap_or_default();
        let auth = "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
        let pairs = [
            ("host", "examplebucket.s3.amazonaws.com"),
            ("range", "bytes=0-9"),
            ("x-amz-content-sha256", EMPTY_SHA256),
            ("x-amz-date", "20130524T000000Z"),
        ];
        let v = |path: &str, q: Option<&str>, h: &[(&str, &[u8])], t: u64| {
            verify_s3_head_at("GET", path, q, h, &keys, t)
        };
        assert_eq!(
            v("/test.txt", None, &with_auth(&pairs, auth), now),
            Ok(Some("AKIAIOSFODNN7EXAMPLE".to_owned()))
        );
        let mut range = pairs;
        range[1].1 = "bytes=0-10";
        assert!(matches!(
            v("/test.txt", None, &with_auth(&range, auth), now),
            Err(HeadRefusal::BadSignature(_))
        ));
        let stranger = auth.replace("AKIAIOSFODNN7EXAMPLE", "STRANGER");
        assert_eq!(
            v("/test.txt", None, &with_auth(&pairs, &stranger), now),
            Err(HeadRefusal::UnknownKey)
        );
        assert!(matches!(
            v("/test.txt", None, &with_auth(&pairs, auth), now + SKEW_SECS + 1),
            Err(HeadRefusal::Refused(_))
        ));
        // No signature at all: left to the rules for unsigned requests.
        let bare: Vec<(&str, &[u8])> = pairs.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
        assert_eq!(v("/test.txt", None, &bare, now), Ok(None));

        let query = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";
        let host: [(&str, &[u8]); 1] = [("host", b"examplebucket.s3.amazonaws.com")];
        assert_eq!(
            v("/test.txt", Some(query), &host, now + 3600),
            Ok(Some("AKIAIOSFODNN7EXAMPLE".to_owned()))
        );
        assert!(matches!(
            v("/test.txt", Some(query), &host, now + 86_401),
            Err(HeadRefusal::Refused(_))
        ));
        assert!(matches!(
            v("/other.txt", Some(query), &host, now),
            Err(HeadRefusal::BadSignature(_))
        ));
        let sigv2 = "AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Expires=1&Signature=x";
        assert!(matches!(
            v("/test.txt", Some(sigv2), &host, now),
            Err(HeadRefusal::Refused(_))
        ));
    }

    /// RFC 4231 test case 2.
    #[test]
    fn hmac_is_rfc_4231() {
        assert_eq!(
            hex(&hmac(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(hex(&sha256(b"")), EMPTY_SHA256);
    }

    #[test]
    fn dates_parse_to_epoch_seconds_and_print_back() {
        assert_eq!(parse_amz_date("19700101T000000Z"), Some(0));
        assert_eq!(parse_amz_date("20261130T184100Z"), Some(1_796_064_060));
        assert_eq!(amz_date(1_796_064_060), "20261130T184100Z");
        assert_eq!(parse_amz_date(&amz_date_now()).map(|_| ()), Some(()));
        assert_eq!(parse_amz_date("20261330T184100Z"), None);
    }
}
