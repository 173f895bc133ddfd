//! Resolving the GPU and choosing the NIC at init.
//!
//! The rules themselves are pure functions in `hipobj_platform::selection`
//! (documented in docs/nic-selection.md); this module resolves the GPU
//! through the runtime and maps selection failures to the spec's codes.

use std::sync::Arc;

use hipobj_platform::selection::{self, Selection, SelectionErrorKind};
use hipobj_platform::{Device, Platform, VerbsErrorKind};

use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};

/// What init chose, kept for the tests and the CLI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chosen {
    /// The GPU index, or `None` on a host without one.
    pub gpu: Option<i32>,
    /// The GPU's PCI address, when there is a GPU.
    pub gpu_pci: Option<String>,
    /// The device, port, GID and MTU, and why.
    pub selection: Selection,
}

/// Resolves the GPU (`-1` means the current device; no GPU at all is fine
/// only with a hint).
fn resolve_gpu(platform: &Platform, config: &Config) -> Result<(Option<i32>, Option<String>)> {
    let rt = &platform.gpu;
    let count = rt
        .device_count()
        .map_err(|e| Error::gpu(ErrorKind::RdmaError, "counting GPUs", &e))?;
    let gpu = match config.gpu_device {
        -1 if count > 0 => Some(
            rt.current_device()
                .map_err(|e| Error::gpu(ErrorKind::RdmaError, "asking for the current GPU", &e))?,
        ),
        -1 => None,
        d if d >= count => {
            return Err(Error::invalid(format!(
                "gpuDevice {d} names no GPU: the {} runtime sees {count}",
                rt.name()
            )));
        }
        d => Some(d),
    };
    let pci = match gpu {
        Some(d) => Some(
            rt.pci_bus_id(d)
                .map_err(|e| Error::gpu(ErrorKind::RdmaError, "asking for the GPU's PCI address", &e))?,
        ),
        None => None,
    };
    Ok((gpu, pci))
}

/// Resolves the GPU, chooses the NIC, port and GID, and opens the device.
pub fn choose(platform: &Platform, config: &Config) -> Result<(Arc<dyn Device>, Chosen)> {
    let (gpu, gpu_pci) = resolve_gpu(platform, config)?;
    let hint = config.nic_hint.as_deref().filter(|h| !h.trim().is_empty());
    let (device, selection) = selection::select(
        platform.verbs.as_ref(),
        platform.topology.as_ref(),
        gpu_pci.as_deref(),
        hint,
    )
    .map_err(|e| {
        let kind = match (&e.kind, &e.verbs) {
            // libibverbs (or another backend) that does not load, or a NIC
            // that exists but cannot be opened, is an RDMA error; a NIC that
            // is not there is NicNotFound.
            (SelectionErrorKind::Verbs, Some(v)) if v.kind != VerbsErrorKind::NotFound => {
                ErrorKind::RdmaError
            }
            _ => ErrorKind::NicNotFound,
        };
        Error::new(kind, format!("choosing an RDMA NIC: {}", e.detail))
    })?;
    Ok((
        device,
        Chosen {
            gpu,
            gpu_pci,
            selection,
        },
    ))
}
