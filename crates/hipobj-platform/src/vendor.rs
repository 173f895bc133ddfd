//! Vendor QP attributes: where a NIC's driver wants the RTR and RTS
//! attributes to differ from what the generic connection code would set.
//!
//! The generic rules apply to every device: the path MTU is at most the
//! port's active MTU, and the RDMA READ depths are at most what the device
//! reports. A [`VendorProfile`] chosen by PCI vendor id can adjust further.
//! What each profile does and how it is known is in `docs/nic-selection.md`
//! ("Vendor attributes"); in short:
//!
//! * Broadcom (`bnxt_re`, 0x14E4): its driver refuses (`EINVAL`) a
//!   `max_dest_rd_atomic` above the device's `max_qp_init_rd_atom`, and
//!   silently caps `max_rd_atomic` at `max_qp_rd_atom`, the opposite pairing
//!   of the verbs man page's; it refuses a path MTU above the netdev's MTU.
//!   The profile clamps both depths to both limits.
//! * AMD Pensando (`ionic`, 0x1DD8): same as generic. Its driver checks the
//!   standard transition table and refuses `IBV_QP_CAP` in a modify, which
//!   the generic path never sets.

use crate::verbs::{DeviceAttr, Mtu, PortAttr, QpAttr, QpAttrMask};

/// PCI vendor id of Broadcom (bnxt_re).
pub const VENDOR_BROADCOM: u16 = 0x14e4;
/// PCI vendor id of AMD Pensando (ionic).
pub const VENDOR_PENSANDO: u16 = 0x1dd8;

/// The device and port limits a profile adjusts against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpLimits {
    /// The chosen port's active MTU.
    pub active_mtu: Mtu,
    /// `ibv_device_attr::max_qp_rd_atom`: READs a QP answers at once.
    pub max_qp_rd_atom: u32,
    /// `ibv_device_attr::max_qp_init_rd_atom`: READs a QP issues at once.
    /// [`DeviceAttr`] does not carry it, so [`QpLimits::new`] assumes it
    /// equals `max_qp_rd_atom`; a backend that knows better sets it.
    pub max_qp_init_rd_atom: u32,
}

impl QpLimits {
    /// The limits of a device and its chosen port.
    pub fn new(device: &DeviceAttr, port: &PortAttr) -> Self {
        Self {
            active_mtu: port.active_mtu,
            max_qp_rd_atom: device.max_qp_rd_atom,
            max_qp_init_rd_atom: device.max_qp_rd_atom,
        }
    }
}

fn clamp_u8(v: u8, limit: u32) -> u8 {
    u8::try_from(limit).map_or(v, |l| v.min(l))
}

/// How a vendor's NIC wants its RC attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VendorProfile {
    /// Any NIC without a profile of its own (mlx5, rxe, the soft NIC).
    Generic,
    /// Broadcom NetXtreme (bnxt_re).
    Broadcom,
    /// AMD Pensando (ionic).
    Pensando,
}

impl VendorProfile {
    /// The profile of the NIC with this PCI vendor id (`None` or unknown: generic).
    pub fn for_vendor(vendor_id: Option<u16>) -> Self {
        match vendor_id {
            Some(VENDOR_BROADCOM) => Self::Broadcom,
            Some(VENDOR_PENSANDO) => Self::Pensando,
            _ => Self::Generic,
        }
    }

    /// The profile for `ibv_device_attr::vendor_id` (a 24-bit IEEE OUI
    /// field that holds the PCI vendor id on PCI NICs; rxe reports 0xFFFFFF).
    pub fn for_device_vendor(vendor_id: u32) -> Self {
        Self::for_vendor(u16::try_from(vendor_id).ok())
    }

    /// A short name for logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Generic => "generic",
            Self::Broadcom => "bnxt_re",
            Self::Pensando => "ionic",
        }
    }

    /// Adjusts the INIT to RTR attributes in place. Only fields named in
    /// `mask` are touched; the mask itself never changes.
    pub fn adjust_rtr(self, attr: &mut QpAttr, mask: QpAttrMask, limits: &QpLimits) {
        if mask.contains(QpAttrMask::PATH_MTU) {
            attr.path_mtu = attr.path_mtu.min(limits.active_mtu);
        }
        if mask.contains(QpAttrMask::MAX_DEST_RD_ATOMIC) {
            attr.max_dest_rd_atomic = clamp_u8(attr.max_dest_rd_atomic, limits.max_qp_rd_atom);
            if self == Self::Broadcom {
                attr.max_dest_rd_atomic = clamp_u8(attr.max_dest_rd_atomic, limits.max_qp_init_rd_atom);
            }
        }
    }

    /// Adjusts the RTR to RTS attributes in place, like [`Self::adjust_rtr`].
    pub fn adjust_rts(self, attr: &mut QpAttr, mask: QpAttrMask, limits: &QpLimits) {
        if mask.contains(QpAttrMask::MAX_QP_RD_ATOMIC) {
            attr.max_rd_atomic = clamp_u8(attr.max_rd_atomic, limits.max_qp_init_rd_atom);
            if self == Self::Broadcom {
                attr.max_rd_atomic = clamp_u8(attr.max_rd_atomic, limits.max_qp_rd_atom);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::QpState;

    fn limits(rd: u32, init: u32) -> QpLimits {
        QpLimits {
            active_mtu: Mtu::Mtu1024,
            max_qp_rd_atom: rd,
            max_qp_init_rd_atom: init,
        }
    }

    fn attr() -> QpAttr {
        QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: Mtu::Mtu4096,
            max_dest_rd_atomic: 16,
            max_rd_atomic: 16,
            ..QpAttr::default()
        }
    }

    const ALL: QpAttrMask = QpAttrMask(u32::MAX);

    #[test]
    fn profiles_by_vendor() {
        assert_eq!(VendorProfile::for_vendor(Some(0x14e4)), VendorProfile::Broadcom);
        assert_eq!(VendorProfile::for_vendor(Some(0x1dd8)), VendorProfile::Pensando);
        assert_eq!(VendorProfile::for_vendor(Some(0x15b3)), VendorProfile::Generic);
        assert_eq!(VendorProfile::for_vendor(None), VendorProfile::Generic);
        assert_eq!(VendorProfile::for_device_vendor(0x14e4), VendorProfile::Broadcom);
        assert_eq!(
            VendorProfile::for_device_vendor(0xff_ffff),
            VendorProfile::Generic
        );
    }

    #[test]
    fn generic_clamps_mtu_and_depths_to_the_device() {
        let mut a = attr();
        VendorProfile::Generic.adjust_rtr(&mut a, ALL, &limits(8, 4));
        assert_eq!((a.path_mtu, a.max_dest_rd_atomic), (Mtu::Mtu1024, 8));
        VendorProfile::Generic.adjust_rts(&mut a, ALL, &limits(8, 4));
        assert_eq!(a.max_rd_atomic, 4);
        // A smaller requested MTU stays.
        let mut a = QpAttr {
            path_mtu: Mtu::Mtu512,
            ..attr()
        };
        VendorProfile::Generic.adjust_rtr(&mut a, ALL, &limits(8, 4));
        assert_eq!(a.path_mtu, Mtu::Mtu512);
    }

    #[test]
    fn fields_outside_the_mask_are_left_alone() {
        let mut a = attr();
        VendorProfile::Broadcom.adjust_rtr(&mut a, QpAttrMask::STATE, &limits(1, 1));
        VendorProfile::Broadcom.adjust_rts(&mut a, QpAttrMask::STATE, &limits(1, 1));
        assert_eq!(a, attr());
    }

    #[test]
    fn broadcom_clamps_both_depths_to_both_limits() {
        let mut a = attr();
        VendorProfile::Broadcom.adjust_rtr(&mut a, ALL, &limits(8, 2));
        VendorProfile::Broadcom.adjust_rts(&mut a, ALL, &limits(3, 8));
        assert_eq!((a.max_dest_rd_atomic, a.max_rd_atomic), (2, 3));
        let mut g = attr();
        VendorProfile::Generic.adjust_rtr(&mut g, ALL, &limits(8, 2));
        VendorProfile::Generic.adjust_rts(&mut g, ALL, &limits(3, 8));
        assert_eq!((g.max_dest_rd_atomic, g.max_rd_atomic), (8, 8));
    }

    #[test]
    fn pensando_is_generic() {
        for l in [limits(8, 2), limits(2, 8), limits(300, 300)] {
            let (mut p, mut g) = (attr(), attr());
            VendorProfile::Pensando.adjust_rtr(&mut p, ALL, &l);
            VendorProfile::Pensando.adjust_rts(&mut p, ALL, &l);
            VendorProfile::Generic.adjust_rtr(&mut g, ALL, &l);
            VendorProfile::Generic.adjust_rts(&mut g, ALL, &l);
            assert_eq!(p, g);
        }
    }
}
