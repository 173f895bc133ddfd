//! Token::decode on arbitrary bytes: it must not panic, and a token it
//! accepts must encode to the same digits (up to case) and decode again to
//! the same token.
#![no_main]

use hipobj_proto::Token;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(token) = Token::decode(data) {
        let hex = token.encode();
        assert!(
            hex.as_bytes().eq_ignore_ascii_case(data),
            "re-encoding changed more than case"
        );
        assert_eq!(Token::decode(hex.as_bytes()), Ok(token));
        assert_eq!(Token::from_bytes(&token.to_bytes()), Ok(token));
    }
});
