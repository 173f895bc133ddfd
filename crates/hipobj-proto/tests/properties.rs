//! Property tests of the token codec and the reply grammar, through the
//! public API only.

use hipobj_proto::{PSN_MAX, Reply, TOKEN_HEX_LEN, Token, Transport, parse_reply};
use proptest::prelude::*;

fn any_transport() -> impl Strategy<Value = Transport> {
    prop_oneof![Just(Transport::Dc), Just(Transport::Rc)]
}

prop_compose! {
    fn any_token()(
        transport in any_transport(),
        qpn in any::<u32>(),
        gid in any::<[u8; 16]>(),
        rkey in any::<u32>(),
        addr in any::<u64>(),
        len in any::<u64>(),
        port in any::<u8>(),
        lid in any::<u16>(),
    ) -> Token {
        Token { transport, qpn, gid, rkey, addr, len, port, lid }
    }
}

/// Every reply that `Display` writes in a form `parse_reply` accepts.
fn any_valid_reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        Just(Reply::Ok),
        Just(Reply::Err),
        (100u16..=599).prop_map(Reply::Status),
        (100u16..=599, any_token()).prop_map(|(status, token)| Reply::WithToken { status, token }),
        (any_token(), 0..=PSN_MAX).prop_map(|(token, psn)| Reply::Bind { token, psn }),
        (
            prop_oneof![Just(200u16), Just(204), Just(206)],
            any_token(),
            any::<u64>()
        )
            .prop_map(|(status, token, bytes)| Reply::Done { status, token, bytes }),
    ]
}

/// Inputs built from the grammar's own pieces, so that near misses (a
/// colon too many, a digit too few, a stray space) come up often.
fn near_miss() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"ok".to_vec()),
        Just(b"err".to_vec()),
        Just(b":".to_vec()),
        Just(b"409".to_vec()),
        Just(b"200".to_vec()),
        Just(b"abcdef".to_vec()),
        Just(b"\0".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b" ".to_vec()),
        any_token().prop_map(|t| t.encode().as_bytes().to_vec()),
        any::<u8>().prop_map(|b| vec![b]),
        proptest::collection::vec(any::<u8>(), 0..8),
    ];
    proptest::collection::vec(piece, 0..6).prop_map(|pieces| pieces.concat())
}

/// The input as `parse_reply` sees it: trailing NUL, CR and LF dropped.
fn trimmed(bytes: &[u8]) -> &[u8] {
    let end = bytes
        .iter()
        .rposition(|b| !matches!(b, 0 | b'\r' | b'\n'))
        .map_or(0, |i| i + 1);
    &bytes[..end]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn token_bytes_round_trip(token in any_token()) {
        prop_assert_eq!(Token::from_bytes(&token.to_bytes()), Ok(token));
    }

    #[test]
    fn token_hex_round_trip(token in any_token()) {
        let hex = token.encode();
        prop_assert_eq!(hex.as_str().len(), TOKEN_HEX_LEN);
        prop_assert!(hex.as_bytes().iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')));
        prop_assert_eq!(hex.to_string(), hex.as_str());
        prop_assert_eq!(Token::decode(hex.as_bytes()), Ok(token));
    }

    #[test]
    fn uppercase_hex_decodes_to_the_same_token(token in any_token(), mask in any::<u128>()) {
        let hex = token.encode();
        let upper = hex.as_str().to_ascii_uppercase();
        prop_assert_eq!(Token::decode(upper.as_bytes()), Ok(token));
        // Any mix of cases, one bit of `mask` per digit (wrapping after 128).
        let mixed: Vec<u8> = hex
            .as_bytes()
            .iter()
            .enumerate()
            .map(|(i, c)| if mask >> (i % 128) & 1 == 1 { c.to_ascii_uppercase() } else { *c })
            .collect();
        prop_assert_eq!(Token::decode(&mixed), Ok(token));
    }

    #[test]
    fn reply_display_round_trips(reply in any_valid_reply()) {
        let text = reply.to_string();
        prop_assert_eq!(parse_reply(text.as_bytes()), Ok(reply));
        let with_crlf = format!("{text}\r\n\0");
        prop_assert_eq!(parse_reply(with_crlf.as_bytes()), Ok(reply));
    }

    #[test]
    fn token_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = Token::decode(&bytes);
    }

    #[test]
    fn token_decode_of_any_88_bytes_is_consistent(bytes in any::<[u8; 88]>()) {
        // Either it is rejected, or it was hex and re-encodes to the same
        // digits up to case.
        if let Ok(token) = Token::decode(&bytes) {
            prop_assert!(token.encode().as_bytes().eq_ignore_ascii_case(&bytes));
        }
    }

    #[test]
    fn parse_reply_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = parse_reply(&bytes);
    }

    #[test]
    fn accepted_replies_are_canonical_up_to_case(bytes in near_miss()) {
        if let Ok(reply) = parse_reply(&bytes) {
            let text = reply.to_string();
            // The canonical form is the input, less its trailing NUL/CR/LF,
            // with the hex in lowercase; and it parses to the same reply.
            prop_assert!(text.as_bytes().eq_ignore_ascii_case(trimmed(&bytes)), "{:?} vs {:?}", text, bytes);
            prop_assert_eq!(parse_reply(text.as_bytes()), Ok(reply));
        }
    }
}
