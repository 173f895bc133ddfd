//! parse_reply on arbitrary bytes: it must not panic, and a reply it accepts
//! must format (Display) to text that parses to the same reply and matches
//! the input, less trailing NUL/CR/LF, up to the case of the hex digits.
#![no_main]

use hipobj_proto::parse_reply;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(reply) = parse_reply(data) {
        let text = reply.to_string();
        assert_eq!(parse_reply(text.as_bytes()), Ok(reply));
        let end = data
            .iter()
            .rposition(|b| !matches!(b, 0 | b'\r' | b'\n'))
            .map_or(0, |i| i + 1);
        assert!(
            text.as_bytes().eq_ignore_ascii_case(&data[..end]),
            "{text:?} is not the canonical form of the input"
        );
    }
});
