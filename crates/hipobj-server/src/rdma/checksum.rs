//! The CRC-64/NVME of the bytes a hipobj-rc-v2 session moves, taken as they
//! pass between the store and the staging buffer: a GET's as the source
//! fills them in, a PUT's as the sink drains them. The READY answer carries
//! it in both header forms (`hipobj_proto::rc_v2::ReadyResponse`), and a
//! client that reads either checks it against the bytes it holds.

use crc_fast::{CrcAlgorithm, Digest};
use hipobj_proto::rc_v2::Crc64Nvme;
use hipobj_target::{Selected, Sink, Source};

/// A source or sink that sums the bytes that pass through it, in order.
pub(super) struct Summed<T> {
    inner: T,
    digest: Digest,
    /// Where the next byte must come from: the sum is of the bytes in
    /// order, once each, so an out-of-order chunk spoils it.
    next: u64,
    in_order: bool,
}

impl<T> Summed<T> {
    pub(super) fn new(inner: T) -> Self {
        Summed {
            inner,
            digest: Digest::new(CrcAlgorithm::Crc64Nvme),
            next: 0,
            in_order: true,
        }
    }

    fn add(&mut self, off: u64, bytes: &[u8]) {
        self.in_order &= off == self.next;
        self.next = off.saturating_add(bytes.len() as u64);
        self.digest.update(bytes);
    }

    /// The checksum of everything that passed, if it passed in order.
    pub(super) fn sum(&self) -> Option<Crc64Nvme> {
        self.in_order.then(|| Crc64Nvme(self.digest.finalize()))
    }

    pub(super) fn inner_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

impl<T: Source> Source for Summed<T> {
    type Error = T::Error;

    fn open(&mut self) -> Result<Selected, T::Error> {
        self.inner.open()
    }

    fn fill(&mut self, off: u64, buf: &mut [u8]) -> Result<(), T::Error> {
        self.inner.fill(off, buf)?;
        self.add(off, buf);
        Ok(())
    }
}

impl<T: Sink> Sink for Summed<T> {
    type Error = T::Error;

    fn open(&mut self, len: u64) -> Result<(), T::Error> {
        self.inner.open(len)
    }

    fn drain(&mut self, off: u64, chunk: &[u8]) -> Result<(), T::Error> {
        self.add(off, chunk);
        self.inner.drain(off, chunk)
    }

    fn commit(&mut self) -> Result<(), T::Error> {
        self.inner.commit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Bytes(Vec<u8>);

    impl Source for Bytes {
        type Error = ();
        fn open(&mut self) -> Result<Selected, ()> {
            Ok(Selected {
                len: self.0.len() as u64,
                partial: false,
            })
        }
        fn fill(&mut self, off: u64, buf: &mut [u8]) -> Result<(), ()> {
            let at = usize::try_from(off).map_err(|_| ())?;
            buf.copy_from_slice(self.0.get(at..at + buf.len()).ok_or(())?);
            Ok(())
        }
    }

    #[test]
    fn a_source_read_in_chunks_sums_to_the_known_answer() {
        let mut s = Summed::new(Bytes(b"123456789".to_vec()));
        let mut a = [0u8; 4];
        let mut b = [0u8; 5];
        s.fill(0, &mut a).expect("in range");
        s.fill(4, &mut b).expect("in range");
        assert_eq!(s.sum().map(Crc64Nvme::to_base64).as_deref(), Some("rosUhgp5mIg="));
    }

    #[test]
    fn chunks_out_of_order_give_no_sum() {
        let mut s = Summed::new(Bytes(b"123456789".to_vec()));
        let mut b = [0u8; 5];
        s.fill(4, &mut b).expect("in range");
        assert_eq!(s.sum(), None);
    }
}
