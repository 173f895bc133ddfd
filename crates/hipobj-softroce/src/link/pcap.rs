//! A pcap tap: every datagram the device sends or receives, written with
//! the IPv4 and UDP headers the ICRC was computed over (LINKTYPE_RAW), so
//! that tshark's InfiniBand dissector decodes the capture as RoCEv2.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::wire::PseudoHeader;
use crate::wire::icrc::IP_UDP_LEN;

/// Raw IP packets, no link-layer header.
const LINKTYPE_RAW: u32 = 101;

/// A pcap file being written.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
}

impl PcapWriter<BufWriter<File>> {
    /// Creates (truncates) `path` and writes the file header.
    pub fn create(path: &Path) -> io::Result<Self> {
        Self::new(BufWriter::with_capacity(1 << 20, File::create(path)?))
    }
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header to `out`.
    pub fn new(mut out: W) -> io::Result<Self> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&65535u32.to_le_bytes());
        h.extend_from_slice(&LINKTYPE_RAW.to_le_bytes());
        out.write_all(&h)?;
        Ok(Self { out })
    }

    /// Records one datagram sent from `pseudo.src` to `pseudo.dst`.
    pub fn record(&mut self, pseudo: &PseudoHeader, datagram: &[u8]) -> io::Result<()> {
        self.record_with_id(pseudo, datagram, 0)
    }

    /// Records one datagram that travelled under IP identification `id`
    /// (a segment of a UDP GSO super-packet).
    pub fn record_with_id(&mut self, pseudo: &PseudoHeader, datagram: &[u8], id: u16) -> io::Result<()> {
        let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let len = (IP_UDP_LEN + datagram.len()) as u32;
        let mut rec = [0u8; 16];
        rec[0..4].copy_from_slice(&(t.as_secs() as u32).to_le_bytes());
        rec[4..8].copy_from_slice(&t.subsec_micros().to_le_bytes());
        rec[8..12].copy_from_slice(&len.to_le_bytes());
        rec[12..16].copy_from_slice(&len.to_le_bytes());
        self.out.write_all(&rec)?;
        self.out
            .write_all(&pseudo.ip_udp_header_with_id(datagram.len(), id))?;
        self.out.write_all(datagram)
    }

    /// Records one whole IPv4 packet as it arrived (the raw link).
    pub fn record_ip(&mut self, packet: &[u8]) -> io::Result<()> {
        let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let len = packet.len() as u32;
        let mut rec = [0u8; 16];
        rec[0..4].copy_from_slice(&(t.as_secs() as u32).to_le_bytes());
        rec[4..8].copy_from_slice(&t.subsec_micros().to_le_bytes());
        rec[8..12].copy_from_slice(&len.to_le_bytes());
        rec[12..16].copy_from_slice(&len.to_le_bytes());
        self.out.write_all(&rec)?;
        self.out.write_all(packet)
    }

    /// Pushes buffered records to the file.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddrV4};

    #[test]
    fn header_and_record_layout() {
        let mut w = PcapWriter::new(Vec::new()).expect("vec");
        let pseudo = PseudoHeader {
            src: SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 4791),
            dst: SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 3), 4791),
        };
        w.record(&pseudo, &[1, 2, 3, 4]).expect("vec");
        let v = w.into_inner();
        assert_eq!(&v[..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(u32::from_le_bytes([v[20], v[21], v[22], v[23]]), 101);
        assert_eq!(v.len(), 24 + 16 + 28 + 4);
        assert_eq!(u32::from_le_bytes([v[32], v[33], v[34], v[35]]), 32);
        assert_eq!(v[40], 0x45);
        assert_eq!(&v[40 + 28..], &[1, 2, 3, 4]);
    }
}
