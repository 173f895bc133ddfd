//! Which bucket names and object keys the server accepts.
//!
//! Every back end sees only names that pass these checks, so a key can never
//! name anything outside its bucket whatever the store does with it.

use s3s::{S3Error, S3ErrorCode};

/// Longest key S3 allows, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

/// Prefixes AWS reserves: a bucket name may not start with one.
const RESERVED_PREFIXES: [&str; 3] = ["xn--", "sthree-", "amzn-s3-demo-"];

/// Suffixes AWS reserves (access point aliases, Object Lambda, directory
/// buckets, table buckets, Multi-Region Access Points).
const RESERVED_SUFFIXES: [&str; 5] = ["-s3alias", "--ol-s3", "--x-s3", "--table-s3", ".mrap"];

/// Checks a bucket name against AWS's rules for general purpose buckets:
/// 3 to 63 characters of lowercase letters, digits, `.` and `-`, starting
/// and ending with a letter or digit, no `..`, `.-` or `-.`, not formatted
/// as an IPv4 address, none of AWS's reserved prefixes and suffixes.
pub fn check_bucket(name: &str) -> Result<(), S3Error> {
    let bad = |why: &str| {
        Err(S3Error::with_message(
            S3ErrorCode::InvalidBucketName,
            format!("bucket name {name:?}: {why}"),
        ))
    };
    if !(3..=63).contains(&name.len()) {
        return bad("must be 3 to 63 characters long");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
    {
        return bad("only lowercase letters, digits, '.' and '-' are allowed");
    }
    let edge_ok = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !name.bytes().next().is_some_and(edge_ok) || !name.bytes().last().is_some_and(edge_ok) {
        return bad("must start and end with a letter or digit");
    }
    if name.contains("..") {
        return bad("must not contain '..'");
    }
    if name.contains(".-") || name.contains("-.") {
        return bad("must not have '.' next to '-'");
    }
    let groups: Vec<&str> = name.split('.').collect();
    if groups.len() == 4
        && groups
            .iter()
            .all(|g| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit()))
    {
        return bad("must not be formatted as an IP address");
    }
    if let Some(p) = RESERVED_PREFIXES.iter().find(|p| name.starts_with(*p)) {
        return bad(&format!("the prefix {p:?} is reserved"));
    }
    if let Some(x) = RESERVED_SUFFIXES.iter().find(|x| name.ends_with(*x)) {
        return bad(&format!("the suffix {x:?} is reserved"));
    }
    Ok(())
}

/// Checks an object key: 1 to 1024 bytes, no NUL or other control
/// character, no `.` or `..` path segment. A key may start with `/`, hold
/// `//`, or be `/` alone, as in S3: no store maps a key onto a path (the fs
/// store names an object's file by the key's hex or hash).
pub fn check_key(key: &str) -> Result<(), S3Error> {
    let bad = |why: &str| {
        Err(S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            format!("object key: {why}"),
        ))
    };
    if key.is_empty() {
        return bad("must not be empty");
    }
    if key.len() > MAX_KEY_LEN {
        return Err(S3Error::with_message(
            S3ErrorCode::KeyTooLongError,
            format!("object key is {} bytes, the limit is {MAX_KEY_LEN}", key.len()),
        ));
    }
    if key.chars().any(char::is_control) {
        return bad("must not contain NUL or other control characters");
    }
    if key.split('/').any(|seg| seg == ".." || seg == ".") {
        return bad("must not contain a '.' or '..' path segment");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets() {
        for ok in [
            "abc",
            "my-bucket.1",
            "a1b",
            &"a".repeat(63),
            "xn-ab",
            "sthree",
            "a-s3alias-b",
            "1.2.3",
            "1.2.3.4.5",
            "1.2.3.a",
        ] {
            assert!(check_bucket(ok).is_ok(), "{ok}");
        }
        for bad in [
            "ab",
            "ABC",
            "a_b",
            "-ab",
            "ab-",
            ".ab",
            "a..b",
            "192.168.1.1",
            "",
            &"a".repeat(64),
            "a/b",
            "a\0b",
        ] {
            assert!(check_bucket(bad).is_err(), "{bad:?}");
        }
    }

    /// Issue 25, finding 5: names AWS reserves were created.
    #[test]
    fn aws_reserved_bucket_names_are_refused() {
        for bad in [
            "sthree-x",
            "sthree-configurator",
            "amzn-s3-demo-bucket",
            "xn--bcher-kva",
            "abc-s3alias",
            "abc--ol-s3",
            "abc--x-s3",
            "abc--table-s3",
            "abc.mrap",
            "a.-b",
            "a-.b",
            "192.168.5.4",
            "01.02.03.04",
            "999.1.1.1",
        ] {
            assert!(check_bucket(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn keys() {
        for ok in [
            "a",
            "a/b/c",
            "a..b",
            "...",
            "dir/",
            "ü/ñ",
            "a b",
            "/",
            "//",
            "/abs",
            "/etc/passwd",
            "a//b",
            "dir//",
            &"k".repeat(1024),
        ] {
            assert!(check_key(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "..",
            "../x",
            "a/../b",
            "a/..",
            "./a",
            "a/./b",
            "/../x",
            "/./x",
            "//..",
            "a\0b",
            "a\nb",
            &"k".repeat(1025),
        ] {
            assert!(check_key(bad).is_err(), "{bad:?}");
        }
    }
}
