//! Whether a range of this process's memory can be registered: a real NIC's
//! driver pins the pages of an MR and fails (`EFAULT`) on pages the process
//! cannot read and write, such as GPU memory reserved in the address space
//! without host access. The soft NIC answers the same way, by reading the
//! process's own memory map, so that registering GPU memory fails here as it
//! does on a NIC that cannot reach the GPU (and the library stages it).

use std::ops::Range;

/// The readable and writable ranges of a `/proc/<pid>/maps` text, merged.
fn rw_ranges(maps: &str) -> Vec<Range<u64>> {
    let mut out: Vec<Range<u64>> = Vec::new();
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(span), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        if !perms.starts_with("rw") {
            continue;
        }
        let Some((lo, hi)) = span.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) else {
            continue;
        };
        match out.last_mut() {
            Some(last) if last.end == lo => last.end = hi,
            _ => out.push(lo..hi),
        }
    }
    out
}

/// Whether every byte of `[addr, addr + len)` lies in readable, writable
/// memory according to `maps`.
pub fn covered(maps: &str, addr: u64, len: u64) -> bool {
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    if len == 0 {
        return true;
    }
    let mut at = addr;
    for r in rw_ranges(maps) {
        if r.start <= at && at < r.end {
            at = r.end;
            if at >= end {
                return true;
            }
        }
    }
    false
}

/// Whether this process can read and write `[addr, addr + len)`.
pub fn host_accessible(addr: u64, len: u64) -> bool {
    match std::fs::read_to_string("/proc/self/maps") {
        Ok(maps) => covered(&maps, addr, len),
        // Without a memory map to consult, trust the caller, as the soft NIC
        // did before this check.
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
1000-3000 rw-p 00000000 00:00 0
3000-4000 rw-p 00000000 00:00 0 [heap]
5000-6000 ---p 00000000 00:00 0
6000-7000 r--p 00000000 00:00 0 /lib/x
7000-8000 rw-s 00000000 00:05 1 /dev/zero
";

    #[test]
    fn ranges_must_be_readable_and_writable_throughout() {
        assert!(covered(MAPS, 0x1000, 0x3000), "adjacent rw mappings merge");
        assert!(covered(MAPS, 0x2fff, 2));
        assert!(!covered(MAPS, 0x3fff, 2), "a hole");
        assert!(!covered(MAPS, 0x5000, 1), "PROT_NONE, like reserved GPU memory");
        assert!(!covered(MAPS, 0x6000, 1), "read-only");
        assert!(covered(MAPS, 0x7000, 0x1000), "shared rw");
        assert!(!covered(MAPS, 0x0, 1));
        assert!(!covered(MAPS, u64::MAX, 2));
        assert!(covered(MAPS, 0x9999, 0));
    }

    #[test]
    fn this_process_heap_is_accessible_and_null_is_not() {
        let v = vec![0u8; 1 << 20];
        assert!(host_accessible(v.as_ptr() as u64, v.len() as u64));
        assert!(!host_accessible(0, 4096));
    }
}
