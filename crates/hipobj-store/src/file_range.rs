//! A GET's bytes where they lie in a file, for a reader that can take them
//! straight into its own memory.
//!
//! The RDMA mover sends a GET from a registered slot. Read through the
//! body stream, each chunk is read from the file into a buffer of the
//! stream's (a hop to the blocking pool) and then copied into the slot. A
//! store whose object is a plain range of a file can say so instead: the
//! RDMA layer asks with [`WantsFileRange`] in the request's extensions,
//! and the store answers with a [`FileRange`] in the response's and an
//! empty body. The mover then reads each chunk with one `pread` into the
//! slot: one copy (the kernel's, out of the page cache) instead of two,
//! and no hop.
//!
//! A store only answers so when the bytes in the file are the object's
//! bytes (not encrypted), and the range is the one the body would have
//! held; otherwise it returns the body as for any GET. The file is the one the store opened for
//! this GET: a later PUT of the key writes another file and renames it
//! over, and this one keeps reading the version it opened.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::blocks::Checker;

/// Put in a GetObject request's extensions by a reader that would take a
/// [`FileRange`].
#[derive(Clone, Copy, Debug)]
pub struct WantsFileRange;

/// `len` bytes at `start` of an open file: the whole body of a GET.
#[derive(Clone, Debug)]
pub struct FileRange {
    file: Arc<File>,
    start: u64,
    len: u64,
    /// Checks the blocks each read touches (the file's data starts at
    /// offset 0); `None` for an object with no block sums.
    checker: Option<Arc<Checker>>,
}

impl FileRange {
    /// The `len` bytes at `start` of `file`.
    pub fn new(file: File, start: u64, len: u64) -> Self {
        Self {
            file: Arc::new(file),
            start,
            len,
            checker: None,
        }
    }

    /// The same range, each read checked against `checker` first: a read
    /// whose blocks disagree with their sums fails, and the mover fails
    /// the transfer before its proof, so the client never sees success.
    pub fn checked(mut self, checker: Option<Checker>) -> Self {
        self.checker = checker.map(Arc::new);
        self
    }

    /// How many bytes the range holds.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Fills all of `buf` with the range's bytes from `off` on. Past the
    /// range's end, or a file that ends before it (a damaged object), is
    /// an error.
    pub fn read_at(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        let end = off.checked_add(buf.len() as u64);
        if end.is_none_or(|e| e > self.len) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a read of {} bytes at {off} is past the object's {} bytes",
                    buf.len(),
                    self.len
                ),
            ));
        }
        let at = self.start + off;
        let Some(checker) = &self.checker else {
            return self.read_exact_at(buf, at);
        };
        let (from, n) = checker.covering(at, buf.len() as u64);
        let bad = |e: crate::blocks::Mismatch| io::Error::new(io::ErrorKind::InvalidData, e);
        if from == at && n == buf.len() as u64 {
            // Whole blocks: straight into the caller's buffer.
            self.read_exact_at(buf, at)?;
            return checker.check(from, buf).map_err(bad);
        }
        let mut run = vec![0u8; usize::try_from(n).map_err(io::Error::other)?];
        self.read_exact_at(&mut run, from)?;
        checker.check(from, &run).map_err(bad)?;
        let lo = usize::try_from(at - from).map_err(io::Error::other)?;
        buf.copy_from_slice(&run[lo..lo + buf.len()]);
        Ok(())
    }

    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, at).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                io::Error::new(io::ErrorKind::UnexpectedEof, "the object ended before its length")
            } else {
                e
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_of(bytes: &[u8]) -> File {
        let mut f = tempfile::tempfile().expect("a temporary file");
        f.write_all(bytes).expect("written");
        f
    }

    #[test]
    fn reads_the_range_at_any_offset_in_it() {
        let data: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let r = FileRange::new(file_of(&data), 1000, 5000);
        assert_eq!(r.len(), 5000);
        let mut buf = vec![0u8; 1234];
        r.read_at(0, &mut buf).expect("read");
        assert_eq!(buf, &data[1000..2234]);
        r.read_at(5000 - 1234, &mut buf).expect("read at the end");
        assert_eq!(buf, &data[6000 - 1234..6000]);
    }

    #[test]
    fn a_read_past_the_range_is_refused_even_where_the_file_goes_on() {
        let data = vec![7u8; 10_000];
        let r = FileRange::new(file_of(&data), 0, 100);
        let mut buf = vec![0u8; 2];
        let e = r.read_at(99, &mut buf).expect_err("past the range");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let e = r
            .read_at(u64::MAX, &mut buf)
            .expect_err("an offset that overflows");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn a_checked_range_refuses_a_flipped_byte_in_any_block_it_touches() {
        let block = crate::blocks::BLOCK as usize;
        let mut data: Vec<u8> = (0..3 * block + 100).map(|i| (i % 251) as u8).collect();
        let mut h = crate::blocks::BlockHasher::default();
        h.update(&data);
        let sums = h.finish();
        let n = data.len() as u64;
        let checker = || Some(sums.checker(n).expect("a checker"));
        let r = FileRange::new(file_of(&data), 10, data.len() as u64 - 10).checked(checker());
        let mut buf = vec![0u8; block];
        r.read_at(0, &mut buf).expect("good bytes read");
        assert_eq!(buf, &data[10..10 + block]);
        data[2 * block + 7] ^= 0x40;
        let r = FileRange::new(file_of(&data), 0, data.len() as u64).checked(checker());
        let mut first = vec![0u8; block];
        r.read_at(0, &mut first).expect("block 0 is good");
        let mut small = vec![0u8; 3];
        let e = r
            .read_at(2 * block as u64 + 100, &mut small)
            .expect_err("block 2 is bad");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let mut all = vec![0u8; data.len()];
        assert!(r.read_at(0, &mut all).is_err());
    }

    #[test]
    fn a_file_shorter_than_the_range_is_an_error_not_zeros() {
        let r = FileRange::new(file_of(&[1, 2, 3]), 0, 100);
        let mut buf = vec![0u8; 10];
        let e = r.read_at(0, &mut buf).expect_err("the file ends at 3");
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
