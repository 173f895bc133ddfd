//! Resolving the GPU and choosing the NIC at init.

use hipobj_platform::{NicInfo, Platform};

use crate::error::{Error, ErrorKind, Result};
use crate::instance::Config;

/// What init chose, kept for the tests and the CLI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chosen {
    /// The GPU index, or `None` on a host without one.
    pub gpu: Option<i32>,
    /// The GPU's PCI address, when there is a GPU.
    pub gpu_pci: Option<String>,
    /// The RDMA device name.
    pub nic: String,
    /// What the topology knows of that NIC.
    pub topology: Option<NicInfo>,
    /// Why this NIC.
    pub reason: String,
}

/// Resolves the GPU (`-1` means the current device; no GPU at all is fine
/// only with a hint) and chooses the NIC.
pub fn choose(platform: &Platform, config: &Config) -> Result<Chosen> {
    let gpu_rt = &platform.gpu;
    let count = gpu_rt
        .device_count()
        .map_err(|e| Error::gpu(ErrorKind::RdmaError, "counting GPUs", &e))?;
    let gpu = match config.gpu_device {
        -1 if count > 0 => Some(
            gpu_rt
                .current_device()
                .map_err(|e| Error::gpu(ErrorKind::RdmaError, "asking for the current GPU", &e))?,
        ),
        -1 => None,
        d if d >= count => {
            return Err(Error::invalid(format!(
                "gpuDevice {d} names no GPU: the {} runtime sees {count}",
                gpu_rt.name()
            )));
        }
        d => Some(d),
    };
    let gpu_pci = match gpu {
        Some(d) => Some(
            gpu_rt
                .pci_bus_id(d)
                .map_err(|e| Error::gpu(ErrorKind::RdmaError, "asking for the GPU's PCI address", &e))?,
        ),
        None => None,
    };
    let nics = platform
        .topology
        .nics()
        .map_err(|e| Error::new(ErrorKind::RdmaError, e.to_string()))?;
    let gpu_path = gpu_pci.as_deref().map(|p| platform.topology.pci_path(p));
    let gpu_numa = gpu_pci.as_deref().and_then(|p| platform.topology.numa_node(p));
    let allowed = |n: &NicInfo| config.nic_hint.is_empty() || config.nic_hint.contains(&n.name);
    if let Some(gpu_path) = gpu_path {
        let best = nics
            .iter()
            .filter(|n| allowed(n) && n.pci_addr.is_some() && n.ports.iter().any(|p| p.active))
            .max_by(|a, b| {
                let shared = |n: &NicInfo| {
                    gpu_path
                        .iter()
                        .zip(&n.pci_path)
                        .take_while(|(x, y)| x == y)
                        .count()
                };
                let same_numa = |n: &NicInfo| gpu_numa.is_some() && n.numa_node == gpu_numa;
                (shared(a), same_numa(a), std::cmp::Reverse(&a.name)).cmp(&(
                    shared(b),
                    same_numa(b),
                    std::cmp::Reverse(&b.name),
                ))
            });
        if let Some(nic) = best {
            return Ok(Chosen {
                gpu,
                gpu_pci,
                nic: nic.name.clone(),
                topology: Some(nic.clone()),
                reason: "the NIC closest to the GPU on the PCIe tree".into(),
            });
        }
    }
    match config.nic_hint.as_slice() {
        [one] => Ok(Chosen {
            gpu,
            gpu_pci,
            nic: one.clone(),
            topology: nics.iter().find(|n| n.name == *one).cloned(),
            reason: "named by nicHint".into(),
        }),
        [] => Err(Error::new(
            ErrorKind::NicNotFound,
            if gpu.is_some() {
                "no RDMA NIC with an active port and a known PCI address was found, and nicHint names none"
            } else {
                "there is no GPU to choose a NIC by, and nicHint names no RDMA device"
            },
        )),
        _ => Err(Error::new(
            ErrorKind::NicNotFound,
            "no NIC could be chosen by the GPU's position, and nicHint names several devices, so it cannot say which to open",
        )),
    }
}
