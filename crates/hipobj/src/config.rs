//! What `init` is asked for.

use crate::error::{Error, Result};

/// What `init` is asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Reserved; must be 0.
    pub flags: u32,
    /// The GPU to choose the closest NIC to, or -1 for the current device.
    pub gpu_device: i32,
    /// `nicHint`: comma-separated RDMA device names that may be chosen;
    /// `None` or empty allows all.
    pub nic_hint: Option<String>,
}

impl Config {
    /// The checks that need no platform.
    pub fn validate(&self) -> Result<()> {
        if self.flags != 0 {
            return Err(Error::invalid(format!(
                "config flags must be 0, not {:#x}",
                self.flags
            )));
        }
        if self.gpu_device < -1 {
            return Err(Error::invalid(format!(
                "gpuDevice must be -1 or a GPU index, not {}",
                self.gpu_device
            )));
        }
        Ok(())
    }
}
