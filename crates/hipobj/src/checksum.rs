//! The CRC-64/NVME of bytes that landed in registered host memory, to check
//! a hipobj-rc-v2 READY answer's checksum against what arrived.
//!
//! The memory is read through raw pointers in chunks copied out, as
//! `Registration::read_into` does: no `&[u8]` is ever formed over memory a
//! NIC may write.
#![allow(unsafe_code)]

use crc_fast::{CrcAlgorithm, Digest};
use hipobj_proto::rc_v2::Crc64Nvme;

/// Bytes copied out per step.
const CHUNK: usize = 64 * 1024;

/// The CRC-64/NVME of the `len` bytes at `addr`.
///
/// The range must lie inside host memory registered with the instance
/// (so allocated while the registration lives, by the promise of the
/// `MemRegion` it was registered with) and the caller must hold a use of
/// that registration for the whole call (an `Arc` of its entry), so that it
/// cannot be deregistered and freed meanwhile.
pub(crate) fn crc64nvme_at(addr: usize, len: usize) -> Crc64Nvme {
    let mut digest = Digest::new(CrcAlgorithm::Crc64Nvme);
    let mut chunk = vec![0u8; CHUNK.min(len)];
    let mut done = 0;
    while done < len {
        let n = CHUNK.min(len - done);
        // SAFETY: `addr + done .. + n` lies inside the registered range
        // (the caller's contract), which stays allocated while the caller
        // holds the registration; the bytes are copied through raw pointers
        // into `chunk`, which no NIC can reach, so no reference to memory a
        // device may write is ever formed.
        unsafe {
            std::ptr::copy_nonoverlapping(
                std::ptr::with_exposed_provenance::<u8>(addr + done),
                chunk.as_mut_ptr(),
                n,
            );
        }
        digest.update(&chunk[..n]);
        done += n;
    }
    Crc64Nvme(digest.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_known_answer_and_chunking() {
        let check = b"123456789";
        let c = crc64nvme_at(check.as_ptr().expose_provenance(), check.len());
        assert_eq!(c.to_base64(), "rosUhgp5mIg=");
        // Across chunk boundaries the digest is that of the whole.
        let big: Vec<u8> = (0..CHUNK * 2 + 17).map(|i| (i * 7 % 251) as u8).collect();
        let whole = crc_fast::checksum(CrcAlgorithm::Crc64Nvme, &big);
        assert_eq!(
            crc64nvme_at(big.as_ptr().expose_provenance(), big.len()),
            Crc64Nvme(whole)
        );
    }
}
