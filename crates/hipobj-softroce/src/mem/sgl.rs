//! Scatter/gather lists: a message's bytes spread over local memory regions.

use hipobj_platform::{AccessFlags, Sge};

use super::access;
use super::table::{AccessError, MrTable};

/// Total bytes of a list, or `None` if it overflows 32 bits (verbs messages
/// are at most 2^31 bytes).
pub fn total_len(sges: &[Sge]) -> Option<u32> {
    sges.iter().try_fold(0u32, |acc, s| acc.checked_add(s.length))
}

/// Walks the pieces of `sges` covering `[offset, offset + len)` of the
/// message, calling `f(sge, offset inside the sge, piece length, offset
/// inside the range)`.
fn walk(
    sges: &[Sge],
    mut offset: usize,
    len: usize,
    mut f: impl FnMut(&Sge, usize, usize, usize) -> Result<(), AccessError>,
) -> Result<(), AccessError> {
    let mut done = 0;
    for sge in sges {
        let sl = sge.length as usize;
        if offset >= sl {
            offset -= sl;
            continue;
        }
        let n = (sl - offset).min(len - done);
        f(sge, offset, n, done)?;
        done += n;
        offset = 0;
        if done == len {
            return Ok(());
        }
    }
    if done == len {
        Ok(())
    } else {
        Err(AccessError::Bounds)
    }
}

/// Copies message bytes `[offset, offset + out.len())` from local memory.
pub fn gather(
    table: &MrTable,
    pd: u32,
    sges: &[Sge],
    offset: usize,
    out: &mut [u8],
) -> Result<(), AccessError> {
    let len = out.len();
    walk(sges, offset, len, |sge, at, n, to| {
        let src = table.check(sge.lkey, pd, sge.addr + at as u64, n, AccessFlags::default())?;
        access::read(src, &mut out[to..to + n]);
        Ok(())
    })
}

/// Copies `data` into message bytes `[offset, offset + data.len())` of local
/// memory, which must grant LOCAL_WRITE. Checks every piece before writing
/// any, so a refused scatter leaves memory untouched.
pub fn scatter(
    table: &MrTable,
    pd: u32,
    sges: &[Sge],
    offset: usize,
    data: &[u8],
) -> Result<(), AccessError> {
    let need = AccessFlags::LOCAL_WRITE;
    walk(sges, offset, data.len(), |sge, at, n, _| {
        table
            .check(sge.lkey, pd, sge.addr + at as u64, n, need)
            .map(|_| ())
    })?;
    walk(sges, offset, data.len(), |sge, at, n, from| {
        let dst = table.check(sge.lkey, pd, sge.addr + at as u64, n, need)?;
        access::write(dst, &data[from..from + n]);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::{HostBuffer, Mr};

    #[test]
    fn gather_and_scatter_span_entries() {
        let a = HostBuffer::from_bytes(b"abcd");
        let b = HostBuffer::from_bytes(b"efgh");
        let mut t = MrTable::new();
        let reg = |t: &mut MrTable, buf: &HostBuffer| {
            t.register(Mr {
                region: buf.region(),
                iova: buf.addr(),
                access: AccessFlags::LOCAL_WRITE,
                pd: 7,
            })
        };
        let ka = reg(&mut t, &a);
        let kb = reg(&mut t, &b);
        let sges = [
            Sge {
                addr: a.addr() + 1,
                length: 3,
                lkey: ka,
            },
            Sge {
                addr: b.addr(),
                length: 4,
                lkey: kb,
            },
        ];
        assert_eq!(total_len(&sges), Some(7));
        let mut out = [0u8; 4];
        gather(&t, 7, &sges, 1, &mut out).expect("inside");
        assert_eq!(&out, b"cdef");
        scatter(&t, 7, &sges, 2, b"XYZ").expect("inside");
        assert_eq!(a.to_vec(), b"abcX");
        assert_eq!(b.to_vec(), b"YZgh");
        // Past the end of the list: refused, nothing written.
        assert_eq!(scatter(&t, 7, &sges, 5, b"123"), Err(AccessError::Bounds));
        assert_eq!(b.to_vec(), b"YZgh");
        assert_eq!(gather(&t, 8, &sges, 0, &mut out), Err(AccessError::WrongPd));
    }
}
