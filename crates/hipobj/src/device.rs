//! The open RDMA device: its context, protection domain, and the port, GID
//! and MTU that connections use.

use std::sync::Arc;

use hipobj_platform::selection::Selection;
use hipobj_platform::vendor::{QpLimits, VendorProfile};
use hipobj_platform::{Device, Gid, Mtu, ProtectionDomain};

use crate::error::{Error, ErrorKind, Result};
use crate::windows::Windows;

/// An open device with the port and GID chosen for it.
#[derive(Debug)]
pub struct RdmaDevice {
    // Field order is drop order: the windows before the PD, the PD before
    // the context.
    window_pool: Option<Windows>,
    pd: Arc<dyn ProtectionDomain>,
    dev: Arc<dyn Device>,
    port: u8,
    gid_index: u8,
    gid: Gid,
    mtu: Mtu,
    vendor: VendorProfile,
    limits: QpLimits,
    windows: bool,
}

/// How a device fences what a token grants (docs/protocol.md §1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceMode {
    /// Type-2 memory windows: each transfer's key covers exactly its range
    /// and right, through its QP, until the call returns.
    Windows,
    /// No type-2 windows: two registrations per buffer (one per right) and
    /// the QP's remote access flags opened for the transfer only.
    AccessFlags,
}

impl FenceMode {
    /// The mode a device with these attributes gets.
    pub fn of(attr: &hipobj_platform::DeviceAttr) -> Self {
        if attr.mw_type2 {
            Self::Windows
        } else {
            Self::AccessFlags
        }
    }

    /// A name for people (`hipobj devices`).
    pub fn describe(self) -> &'static str {
        match self {
            Self::Windows => "memory windows (type 2)",
            Self::AccessFlags => "fallback: per-lease QP access flags, one MR per right",
        }
    }
}

impl RdmaDevice {
    /// Takes the device `selection` chose: allocates its protection domain and
    /// records the port, GID, MTU and vendor limits that connections use.
    pub fn new(dev: Arc<dyn Device>, selection: &Selection) -> Result<Self> {
        let name = selection.device.clone();
        let attr = dev
            .attr()
            .map_err(|e| Error::rdma(&format!("querying RDMA device {name}"), &e))?;
        let port_attr = dev
            .query_port(selection.port)
            .map_err(|e| Error::rdma(&format!("querying port {} of {name}", selection.port), &e))?;
        let pd = dev
            .alloc_pd()
            .map_err(|e| Error::rdma(&format!("allocating a protection domain on {name}"), &e))?;
        let gid_index = u8::try_from(selection.gid_index).map_err(|_| {
            Error::new(
                ErrorKind::NicNotFound,
                format!(
                    "GID index {} of {name} does not fit an address vector",
                    selection.gid_index
                ),
            )
        })?;
        let windows = FenceMode::of(&attr) == FenceMode::Windows;
        let window_pool = if windows {
            Some(
                Windows::new(pd.as_ref())
                    .map_err(|e| Error::rdma(&format!("allocating memory windows on {name}"), &e))?,
            )
        } else {
            None
        };
        Ok(Self {
            window_pool,
            pd,
            port: selection.port,
            gid_index,
            gid: selection.gid,
            mtu: selection.mtu,
            vendor: VendorProfile::for_device_vendor(attr.vendor_id),
            limits: QpLimits::new(&attr, &port_attr),
            windows,
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

    /// The vendor's QP attribute rules.
    pub fn vendor(&self) -> VendorProfile {
        self.vendor
    }

    /// Whether transfers are fenced by type-2 memory windows (else by the
    /// access-flag fallback).
    pub fn windows(&self) -> bool {
        self.windows
    }

    /// The pool of unbound windows transfers take their keys from (window
    /// mode only).
    pub fn window_pool(&self) -> Option<&Windows> {
        self.window_pool.as_ref()
    }

    /// The device's and port's limits on QP attributes.
    pub fn limits(&self) -> &QpLimits {
        &self.limits
    }
}
