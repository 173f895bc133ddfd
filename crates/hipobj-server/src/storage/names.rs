//! Which bucket names and object keys the server accepts.
//!
//! Every back end sees only names that pass these checks, so a key can never
//! name anything outside its bucket whatever the store does with it.

use s3s::{S3Error, S3ErrorCode};

/// Longest key S3 allows, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

/// Checks a bucket name against S3's rules for new buckets: 3 to 63
/// characters of lowercase letters, digits, `.` and `-`, starting and
/// ending with a letter or digit, no `..`, and not an IPv4 address.
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
    if name.parse::<std::net::Ipv4Addr>().is_ok() {
        return bad("must not be an IP address");
    }
    Ok(())
}

/// Checks an object key: 1 to 1024 bytes, no NUL or other control
/// character, no `.` or `..` path segment, no leading `/`.
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
    if key.starts_with('/') {
        return bad("must not start with '/'");
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
        for ok in ["abc", "my-bucket.1", "a1b", &"a".repeat(63)] {
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
            "/abs",
            "a\0b",
            "a\nb",
            &"k".repeat(1025),
        ] {
            assert!(check_key(bad).is_err(), "{bad:?}");
        }
    }
}
