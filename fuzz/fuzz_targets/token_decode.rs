//! Token::decode on arbitrary bytes: it must not panic, and a token it
//! accepts must encode to the same digits (up to case) and decode again to
//! the same token.
//!
//! The same bytes, split at each newline, are also the values of a
//! request's `x-amz-rdma-token` header as the server reads them
//! (`token_from_header`): no value is no token, two or more are refused
//! whatever they say, and one is exactly what `Token::decode` makes of it.
#![no_main]

use hipobj_proto::{Token, TokenHeaderError, token_from_header};
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
    let values: Vec<&[u8]> = if data.is_empty() {
        Vec::new()
    } else {
        data.split(|&b| b == b'\n').collect()
    };
    let got = token_from_header(values.iter().copied());
    match values.as_slice() {
        [] => assert_eq!(got, Ok(None)),
        [one] => assert_eq!(
            got,
            Token::decode(one)
                .map(Some)
                .map_err(TokenHeaderError::Malformed)
        ),
        _ => assert_eq!(got, Err(TokenHeaderError::Repeated)),
    }
});
