//! The NIC topology seam: where each RDMA NIC sits, and what its ports and
//! GIDs are, as sysfs describes them.

use std::fmt;

use crate::verbs::Gid;

/// Which RoCE version a GID table entry is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GidKind {
    /// RoCE v1 (`IB/RoCE v1` in sysfs), or an InfiniBand GID.
    RoceV1,
    /// RoCE v2 (`RoCE v2` in sysfs): routable UDP/IP.
    RoceV2,
    /// Not reported, or not recognised.
    Unknown,
}

/// One entry of a port's GID table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidInfo {
    /// Index in the table.
    pub index: u32,
    /// The GID.
    pub gid: Gid,
    /// Its RoCE version.
    pub kind: GidKind,
}

/// One port of a NIC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicPort {
    /// Port number, from 1.
    pub port: u8,
    /// Whether the port is ACTIVE.
    pub active: bool,
    /// Its GID table, unused entries left out.
    pub gids: Vec<GidInfo>,
}

/// One RDMA NIC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicInfo {
    /// The verbs device name (`mlx5_0`, `bnxt_re0`, `rxe0`, `softroce0`).
    pub name: String,
    /// PCI address, `"dddd:bb:dd.f"`, when the NIC is a PCI device.
    pub pci_addr: Option<String>,
    /// PCI addresses from the root port down to the NIC itself.
    pub pci_path: Vec<String>,
    /// NUMA node, when known.
    pub numa_node: Option<i32>,
    /// PCI vendor id, when known.
    pub vendor_id: Option<u16>,
    /// Its ports.
    pub ports: Vec<NicPort>,
}

/// A failure to read the topology.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("reading NIC topology failed: {0}")]
pub struct TopologyError(pub String);

/// Where the NICs and GPUs sit.
pub trait NicTopology: Send + Sync + fmt::Debug {
    /// Every RDMA NIC.
    fn nics(&self) -> Result<Vec<NicInfo>, TopologyError>;

    /// PCI addresses from the root port down to the device at `pci_addr`
    /// (inclusive), or empty when unknown.
    fn pci_path(&self, pci_addr: &str) -> Vec<String>;

    /// The NUMA node of the device at `pci_addr`, when known.
    fn numa_node(&self, pci_addr: &str) -> Option<i32>;
}

/// A topology that knows no NIC: for hosts where only named devices (the soft
/// NIC) are used.
#[derive(Debug, Clone, Default)]
pub struct NoTopology;

impl NicTopology for NoTopology {
    fn nics(&self) -> Result<Vec<NicInfo>, TopologyError> {
        Ok(Vec::new())
    }
    fn pci_path(&self, _pci_addr: &str) -> Vec<String> {
        Vec::new()
    }
    fn numa_node(&self, _pci_addr: &str) -> Option<i32> {
        None
    }
}
