//! BTH opcodes of the reliable-connected transport and the headers each one
//! carries (IBA 9.2 and table 40 of the specification's transport chapter).

use core::fmt;

/// A BTH opcode. Unknown values round-trip through [`Opcode::Unknown`] so that
/// a capture with opcodes this NIC does not implement still prints.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum Opcode {
    /// SEND First.
    SendFirst,
    /// SEND Middle.
    SendMiddle,
    /// SEND Last.
    SendLast,
    /// SEND Last with Immediate.
    SendLastImm,
    /// SEND Only.
    SendOnly,
    /// SEND Only with Immediate.
    SendOnlyImm,
    /// RDMA WRITE First.
    WriteFirst,
    /// RDMA WRITE Middle.
    WriteMiddle,
    /// RDMA WRITE Last.
    WriteLast,
    /// RDMA WRITE Last with Immediate.
    WriteLastImm,
    /// RDMA WRITE Only.
    WriteOnly,
    /// RDMA WRITE Only with Immediate.
    WriteOnlyImm,
    /// RDMA READ Request.
    ReadRequest,
    /// RDMA READ Response First.
    ReadResponseFirst,
    /// RDMA READ Response Middle.
    ReadResponseMiddle,
    /// RDMA READ Response Last.
    ReadResponseLast,
    /// RDMA READ Response Only.
    ReadResponseOnly,
    /// Acknowledge (ACK or NAK, told apart by the AETH syndrome).
    Acknowledge,
    /// Any other value: other transports, atomics, invalidates.
    Unknown(u8),
}

/// Which extended headers follow the BTH, and whether a payload may.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// An RDMA extended transport header (16 bytes).
    pub reth: bool,
    /// An ACK extended transport header (4 bytes).
    pub aeth: bool,
    /// Immediate data (4 bytes).
    pub immdt: bool,
    /// Whether a payload may follow the headers.
    pub payload: bool,
}

const fn layout(reth: bool, aeth: bool, immdt: bool, payload: bool) -> Layout {
    Layout {
        reth,
        aeth,
        immdt,
        payload,
    }
}

impl Opcode {
    /// The opcode with this byte value.
    pub const fn from_u8(v: u8) -> Self {
        match v {
            0x00 => Self::SendFirst,
            0x01 => Self::SendMiddle,
            0x02 => Self::SendLast,
            0x03 => Self::SendLastImm,
            0x04 => Self::SendOnly,
            0x05 => Self::SendOnlyImm,
            0x06 => Self::WriteFirst,
            0x07 => Self::WriteMiddle,
            0x08 => Self::WriteLast,
            0x09 => Self::WriteLastImm,
            0x0a => Self::WriteOnly,
            0x0b => Self::WriteOnlyImm,
            0x0c => Self::ReadRequest,
            0x0d => Self::ReadResponseFirst,
            0x0e => Self::ReadResponseMiddle,
            0x0f => Self::ReadResponseLast,
            0x10 => Self::ReadResponseOnly,
            0x11 => Self::Acknowledge,
            other => Self::Unknown(other),
        }
    }

    /// The byte value.
    pub const fn to_u8(self) -> u8 {
        match self {
            Self::SendFirst => 0x00,
            Self::SendMiddle => 0x01,
            Self::SendLast => 0x02,
            Self::SendLastImm => 0x03,
            Self::SendOnly => 0x04,
            Self::SendOnlyImm => 0x05,
            Self::WriteFirst => 0x06,
            Self::WriteMiddle => 0x07,
            Self::WriteLast => 0x08,
            Self::WriteLastImm => 0x09,
            Self::WriteOnly => 0x0a,
            Self::WriteOnlyImm => 0x0b,
            Self::ReadRequest => 0x0c,
            Self::ReadResponseFirst => 0x0d,
            Self::ReadResponseMiddle => 0x0e,
            Self::ReadResponseLast => 0x0f,
            Self::ReadResponseOnly => 0x10,
            Self::Acknowledge => 0x11,
            Self::Unknown(v) => v,
        }
    }

    /// The headers this opcode carries, or `None` for an opcode this NIC does
    /// not implement.
    pub const fn layout(self) -> Option<Layout> {
        Some(match self {
            Self::SendFirst | Self::SendMiddle | Self::SendLast | Self::SendOnly => {
                layout(false, false, false, true)
            }
            Self::SendLastImm | Self::SendOnlyImm => layout(false, false, true, true),
            Self::WriteFirst | Self::WriteOnly => layout(true, false, false, true),
            Self::WriteMiddle | Self::WriteLast => layout(false, false, false, true),
            Self::WriteLastImm => layout(false, false, true, true),
            Self::WriteOnlyImm => layout(true, false, true, true),
            Self::ReadRequest => layout(true, false, false, false),
            Self::ReadResponseFirst | Self::ReadResponseLast | Self::ReadResponseOnly => {
                layout(false, true, false, true)
            }
            Self::ReadResponseMiddle => layout(false, false, false, true),
            Self::Acknowledge => layout(false, true, false, false),
            Self::Unknown(_) => return None,
        })
    }

    /// Whether a requester sends this opcode (as opposed to a responder).
    pub const fn is_request(self) -> bool {
        matches!(self.to_u8(), 0x00..=0x0c)
    }

    /// Whether this opcode starts a message (First or Only).
    pub const fn starts_message(self) -> bool {
        matches!(
            self,
            Self::SendFirst
                | Self::SendOnly
                | Self::SendOnlyImm
                | Self::WriteFirst
                | Self::WriteOnly
                | Self::WriteOnlyImm
                | Self::ReadRequest
                | Self::ReadResponseFirst
                | Self::ReadResponseOnly
        )
    }

    /// Whether this opcode ends a message (Last or Only).
    pub const fn ends_message(self) -> bool {
        matches!(
            self,
            Self::SendLast
                | Self::SendLastImm
                | Self::SendOnly
                | Self::SendOnlyImm
                | Self::WriteLast
                | Self::WriteLastImm
                | Self::WriteOnly
                | Self::WriteOnlyImm
                | Self::ReadRequest
                | Self::ReadResponseLast
                | Self::ReadResponseOnly
        )
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::SendFirst => "SEND_FIRST",
            Self::SendMiddle => "SEND_MIDDLE",
            Self::SendLast => "SEND_LAST",
            Self::SendLastImm => "SEND_LAST_WITH_IMMEDIATE",
            Self::SendOnly => "SEND_ONLY",
            Self::SendOnlyImm => "SEND_ONLY_WITH_IMMEDIATE",
            Self::WriteFirst => "RDMA_WRITE_FIRST",
            Self::WriteMiddle => "RDMA_WRITE_MIDDLE",
            Self::WriteLast => "RDMA_WRITE_LAST",
            Self::WriteLastImm => "RDMA_WRITE_LAST_WITH_IMMEDIATE",
            Self::WriteOnly => "RDMA_WRITE_ONLY",
            Self::WriteOnlyImm => "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
            Self::ReadRequest => "RDMA_READ_REQUEST",
            Self::ReadResponseFirst => "RDMA_READ_RESPONSE_FIRST",
            Self::ReadResponseMiddle => "RDMA_READ_RESPONSE_MIDDLE",
            Self::ReadResponseLast => "RDMA_READ_RESPONSE_LAST",
            Self::ReadResponseOnly => "RDMA_READ_RESPONSE_ONLY",
            Self::Acknowledge => "ACKNOWLEDGE",
            Self::Unknown(v) => return write!(f, "UNKNOWN({v:#04x})"),
        };
        f.write_str(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_round_trips() {
        for v in 0..=255u8 {
            assert_eq!(Opcode::from_u8(v).to_u8(), v);
        }
    }

    #[test]
    fn implemented_opcodes_are_rc_0_to_0x11() {
        for v in 0..=255u8 {
            assert_eq!(Opcode::from_u8(v).layout().is_some(), v <= 0x11, "{v:#x}");
        }
        // Atomics and the UD transport are not implemented.
        assert_eq!(Opcode::from_u8(0x13).layout(), None);
        assert_eq!(Opcode::from_u8(0x64).layout(), None);
    }

    #[test]
    fn layouts_match_the_spec_table() {
        let w = Opcode::WriteOnlyImm.layout();
        assert_eq!(
            w.map(|l| (l.reth, l.aeth, l.immdt, l.payload)),
            Some((true, false, true, true))
        );
        let r = Opcode::ReadRequest.layout();
        assert_eq!(
            r.map(|l| (l.reth, l.aeth, l.immdt, l.payload)),
            Some((true, false, false, false))
        );
        let m = Opcode::ReadResponseMiddle.layout();
        assert_eq!(
            m.map(|l| (l.reth, l.aeth, l.immdt, l.payload)),
            Some((false, false, false, true))
        );
        assert!(Opcode::ReadRequest.is_request());
        assert!(!Opcode::Acknowledge.is_request());
        assert!(Opcode::ReadRequest.starts_message() && Opcode::ReadRequest.ends_message());
    }
}
