//! The open RDMA device: its context, protection domain, and the port, GID
//! and MTU that connections use.

use std::sync::Arc;

use hipobj_platform::{Device, Gid, GidKind, Mtu, NicInfo, PortState, ProtectionDomain, Verbs};

use crate::error::{Error, ErrorKind, Result};

/// An open device with the port and GID chosen for it.
#[derive(Debug)]
pub struct RdmaDevice {
    // Field order is drop order: the PD goes before the context.
    pd: Arc<dyn ProtectionDomain>,
    dev: Arc<dyn Device>,
    port: u8,
    gid_index: u8,
    gid: Gid,
    mtu: Mtu,
    vendor_id: u32,
    max_rd_atomic: u8,
}

/// Ranks a GID the way the spec prefers them: RoCE v2 IPv4-mapped, v2
/// global, v2 link-local, v1 global, v1 link-local (lower is better). An
/// entry whose RoCE version is unknown ranks after all of these.
pub(crate) fn gid_rank(gid: &Gid, kind: GidKind) -> u8 {
    let v2 = match kind {
        GidKind::RoceV2 => 0,
        GidKind::RoceV1 => 3,
        GidKind::Unknown => 6,
    };
    let shape: u8 = if gid.to_ipv4().is_some() && kind != GidKind::RoceV1 {
        0
    } else if gid.is_link_local() {
        2
    } else {
        1
    };
    let shape = if kind == GidKind::RoceV1 {
        shape.saturating_sub(1)
    } else {
        shape
    };
    v2 + shape
}

impl RdmaDevice {
    /// Opens `name`, and chooses its first active port and best GID. `nic`
    /// is what the topology knows of the device (RoCE versions of its GIDs),
    /// when it knows it.
    pub fn open(verbs: &dyn Verbs, name: &str, nic: Option<&NicInfo>) -> Result<Self> {
        let dev = verbs.open_device(name).map_err(|e| match e.kind {
            hipobj_platform::VerbsErrorKind::NotFound => Error::new(
                ErrorKind::NicNotFound,
                format!("no RDMA device named {name}: {e}"),
            ),
            _ => Error::rdma(&format!("opening RDMA device {name}"), &e),
        })?;
        let attr = dev
            .attr()
            .map_err(|e| Error::rdma(&format!("querying RDMA device {name}"), &e))?;
        let mut chosen = None;
        for port in 1..=attr.phys_port_cnt.max(1) {
            let pa = dev
                .query_port(port)
                .map_err(|e| Error::rdma(&format!("querying port {port} of {name}"), &e))?;
            if pa.state == PortState::Active {
                chosen = Some((port, pa));
                break;
            }
        }
        let (port, pattr) = chosen.ok_or_else(|| {
            Error::new(
                ErrorKind::NicNotFound,
                format!("RDMA device {name} has no active port"),
            )
        })?;
        let kinds = nic.and_then(|n| n.ports.iter().find(|p| p.port == port));
        let mut best: Option<(u8, u32, Gid)> = None;
        for index in 0..pattr.gid_tbl_len.min(256) {
            let Ok(gid) = dev.query_gid(port, index) else {
                continue;
            };
            if gid.is_zero() {
                continue;
            }
            let kind = kinds
                .and_then(|p| p.gids.iter().find(|g| g.index == index))
                .map_or(GidKind::Unknown, |g| g.kind);
            let rank = gid_rank(&gid, kind);
            if best.is_none_or(|(r, _, _)| rank < r) {
                best = Some((rank, index, gid));
            }
        }
        let (_, gid_index, gid) = best.ok_or_else(|| {
            Error::new(
                ErrorKind::NicNotFound,
                format!("port {port} of {name} has no usable GID"),
            )
        })?;
        let pd = dev
            .alloc_pd()
            .map_err(|e| Error::rdma(&format!("allocating a protection domain on {name}"), &e))?;
        Ok(Self {
            pd,
            port,
            // The table was read up to index 255 at most.
            gid_index: u8::try_from(gid_index).unwrap_or(u8::MAX),
            gid,
            mtu: pattr.active_mtu,
            vendor_id: attr.vendor_id,
            max_rd_atomic: u8::try_from(attr.max_qp_rd_atom.clamp(1, 16)).unwrap_or(1),
            dev,
        })
    }

    /// The device context.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.dev
    }

    /// The protection domain every registration and QP uses.
    pub fn pd(&self) -> &Arc<dyn ProtectionDomain> {
        &self.pd
    }

    /// The port in use.
    pub fn port(&self) -> u8 {
        self.port
    }

    /// The GID table index in use.
    pub fn gid_index(&self) -> u8 {
        self.gid_index
    }

    /// The GID that tokens carry.
    pub fn gid(&self) -> Gid {
        self.gid
    }

    /// The port's active MTU.
    pub fn mtu(&self) -> Mtu {
        self.mtu
    }

    /// The PCI vendor id.
    pub fn vendor_id(&self) -> u32 {
        self.vendor_id
    }

    /// How many RDMA READs a peer may have outstanding against our QPs.
    pub fn max_rd_atomic(&self) -> u8 {
        self.max_rd_atomic
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn gid_preference_order() {
        let v4 = Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 1));
        let mut global = Gid::ZERO;
        global.0[0] = 0x20;
        let mut ll = Gid::ZERO;
        ll.0[0] = 0xfe;
        ll.0[1] = 0x80;
        let order = [
            gid_rank(&v4, GidKind::RoceV2),
            gid_rank(&global, GidKind::RoceV2),
            gid_rank(&ll, GidKind::RoceV2),
            gid_rank(&global, GidKind::RoceV1),
            gid_rank(&ll, GidKind::RoceV1),
        ];
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
        assert!(gid_rank(&v4, GidKind::Unknown) > order[4]);
    }
}
