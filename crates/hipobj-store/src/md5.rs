//! MD5, the ETag of a plain S3 object, by AWS-LC's assembler
//! implementation (on x86-64) through its EVP digest interface
//! (`aws-lc-sys`, the library that aws-lc-rs and the TLS stack already
//! link). It hashes faster than the portable Rust MD5 that
//! s3s uses: `cargo bench -p hipobj-server --bench md5`, with the latest
//! figures in docs/performance.md. Every PUT hashes its whole body with it,
//! and on an RDMA PUT that is most of the server's own CPU.
//!
//! The same interface as `s3s::crypto::Md5`. The unit tests check it
//! against RFC 1321's test suite, and against RustCrypto's `md-5` (through
//! s3s) for every split of an input into two updates.

#![allow(unsafe_code)]

use std::alloc::{Layout, handle_alloc_error};
use std::ptr::{NonNull, null_mut};

use aws_lc_sys::{
    EVP_DigestFinal_ex, EVP_DigestInit_ex, EVP_DigestUpdate, EVP_MD_CTX, EVP_MD_CTX_free, EVP_MD_CTX_new,
    EVP_md5,
};

/// A running MD5: an AWS-LC digest context that this value owns alone.
pub struct Md5(NonNull<EVP_MD_CTX>);

// SAFETY: the context is reached only through this value (`&mut self` to
// change it), and AWS-LC's digest contexts have no tie to a thread.
unsafe impl Send for Md5 {}

impl Default for Md5 {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Md5 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Md5")
    }
}

impl Md5 {
    /// A digest of nothing yet.
    pub fn new() -> Self {
        // SAFETY: EVP_MD_CTX_new has no preconditions; it returns a new
        // context or null when it cannot allocate.
        let Some(ctx) = NonNull::new(unsafe { EVP_MD_CTX_new() }) else {
            handle_alloc_error(Layout::new::<EVP_MD_CTX>())
        };
        // SAFETY: `ctx` is a fresh context; EVP_md5 returns a static
        // descriptor; a null engine is the default. Initialising a fresh
        // context with MD5 fails only if it cannot allocate MD5's state.
        if unsafe { EVP_DigestInit_ex(ctx.as_ptr(), EVP_md5(), null_mut()) } != 1 {
            // SAFETY: `ctx` came from EVP_MD_CTX_new and is freed once.
            unsafe { EVP_MD_CTX_free(ctx.as_ptr()) };
            handle_alloc_error(Layout::new::<[u32; 4]>())
        }
        Self(ctx)
    }

    /// Adds `data` to the digest.
    pub fn update(&mut self, data: &[u8]) {
        // SAFETY: the context was initialised with MD5 by `new`; `data` is
        // valid for reads of `data.len()` bytes, which are only read. MD5's
        // update cannot fail.
        unsafe { EVP_DigestUpdate(self.0.as_ptr(), data.as_ptr().cast(), data.len()) };
    }

    /// The digest of everything added.
    pub fn finalize(self) -> [u8; 16] {
        let mut out = [0u8; 16];
        let mut n = 0;
        // SAFETY: `out` has room for MD5's 16 bytes; the context was
        // initialised by `new`, and `self` is dropped (freeing it) after.
        unsafe { EVP_DigestFinal_ex(self.0.as_ptr(), out.as_mut_ptr(), &mut n) };
        debug_assert_eq!(n, 16);
        out
    }

    /// The digest of `data`.
    pub fn checksum(data: &[u8]) -> [u8; 16] {
        let mut m = Self::new();
        m.update(data);
        m.finalize()
    }
}

impl Drop for Md5 {
    fn drop(&mut self) {
        // SAFETY: the context came from EVP_MD_CTX_new and this is the one
        // place that frees it.
        unsafe { EVP_MD_CTX_free(self.0.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use s3s::crypto::Checksum as _;

    use super::Md5;

    fn hex(d: [u8; 16]) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn rfc_1321s_test_suite() {
        let suite: [(&[u8], &str); 7] = [
            (b"", "d41d8cd98f00b204e9800998ecf8427e"),
            (b"a", "0cc175b9c0f1b6a831c399e269772661"),
            (b"abc", "900150983cd24fb0d6963f7d28e17f72"),
            (b"message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
            (b"abcdefghijklmnopqrstuvwxyz", "c3fcd3d76192e4007dfb496cca67e13b"),
            (
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                "d174ab98d277d9f5a5611c2c9f419d9f",
            ),
            (
                b"12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "57edf4a22be3c955ac49da2e2107b67a",
            ),
        ];
        for (input, want) in suite {
            assert_eq!(hex(Md5::checksum(input)), want, "{input:?}");
        }
    }

    #[test]
    fn agrees_with_rustcryptos_md5_for_every_split_into_two_updates() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for n in [0, 1, 55, 56, 63, 64, 65, 127, 128, 200, 300] {
            let input = &data[..n];
            let want = s3s::crypto::Md5::checksum(input);
            for split in 0..=n {
                let mut m = Md5::new();
                m.update(&input[..split]);
                m.update(&input[split..]);
                assert_eq!(m.finalize(), want, "{n} bytes split at {split}");
            }
        }
    }
}
