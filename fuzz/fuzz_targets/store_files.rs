//! What the fs store parses from its data directory, on arbitrary bytes
//! (a damaged disk, a hand-edited file): an object file (trailer,
//! metadata, block checksums checked against the data), an owner record,
//! a multipart upload's state (`upload.json`), and block checksums against
//! the bytes they claim to describe. None may panic; an owner record that
//! parses must encode and parse back to itself, and so must an upload;
//! sums made from bytes must accept exactly those bytes.
#![no_main]

use hipobj_store::blocks::{BlockHasher, BlockSums};
use hipobj_store::fs::{parse_object_file, parse_upload_file};
use hipobj_store::owner_record::OwnerRecord;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((key, size)) = parse_object_file(data) {
        assert!(size <= data.len() as u64 || key.len() <= data.len(), "an object bigger than its file");
    }
    if let Err(why) = parse_upload_file(data) {
        assert!(!why.contains("reads back"), "{why}");
    }
    if let Ok(text) = std::str::from_utf8(data)
        && let Some(r) = OwnerRecord::parse(text)
    {
        assert_eq!(OwnerRecord::parse(&r.encode()), Some(r.clone()));
        assert!(!r.key.is_empty());
    }
    // The first 8 bytes: a stored length; the rest: the sums' text.
    if data.len() >= 8 {
        let len = u64::from_le_bytes(data[..8].try_into().unwrap_or([0; 8])) % (4 << 20);
        let sums = BlockSums {
            block: hipobj_store::blocks::BLOCK,
            crc32c: String::from_utf8_lossy(&data[8..]).into_owned(),
        };
        if let Ok(c) = sums.checker(len) {
            let _ = c.check(0, &data[8..]);
            let (from, n) = c.covering(len / 3, len / 2);
            assert!(from <= len && from + n <= len);
        }
    }
    let mut h = BlockHasher::default();
    h.update(data);
    let c = h.finish().checker(data.len() as u64).expect("sums of the bytes fit them");
    assert!(c.check(0, data).is_ok(), "sums refuse the bytes they were made from");
    if let Some(first) = data.first() {
        let mut bad = data.to_vec();
        bad[0] = first ^ 1;
        assert!(c.check(0, &bad).is_err(), "a flipped byte passed");
    }
});
