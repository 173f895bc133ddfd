//! The seams between hipObject and the outside world.
//!
//! The library reaches the world through exactly three doors, each a trait in
//! this crate:
//!
//! * [`Verbs`]: an RDMA device (libibverbs on a real NIC, or the soft RoCE NIC),
//! * [`GpuRuntime`]: a GPU runtime (HIP, CUDA, or none),
//! * [`NicTopology`]: where the NICs sit on the PCIe tree (sysfs).
//!
//! A [`Platform`] bundles one of each. Everything above this crate takes a
//! `Platform` (or the narrowest seam it needs) as a constructor argument, so a
//! test swaps the platform and runs the rest of the library unchanged. The
//! `fake` feature adds test doubles of every seam that record calls, inject
//! failures or panics, and count live objects.
//!
//! [`selection`] holds the NIC, port and GID selection rules as pure
//! functions, so that the core and the CLI choose the same way, and
//! [`vendor`] the per-vendor RC attribute adjustments.
//!
//! This crate also holds [`memory::MemRegion`], the one type through which
//! raw application memory enters the seams.

pub mod gpu;
pub mod memory;
pub mod rc;
pub mod selection;
pub mod topology;
pub mod vendor;
pub mod verbs;

#[cfg(feature = "fake")]
pub mod fake;

use std::sync::Arc;

pub use gpu::{CopyEvent, Dmabuf, GpuError, GpuRuntime, NoGpu, PinnedHostBuffer, PointerInfo, PointerKind};
pub use memory::MemRegion;
pub use topology::{GidInfo, GidKind, NicInfo, NicPort, NicTopology, NoTopology, TopologyError};
pub use verbs::{
    AccessFlags, BindMwWr, CompletionQueue, Device, DeviceAttr, Gid, LinkLayer, MemoryRegion, MemoryWindow,
    Mtu, PortAttr, PortState, ProtectionDomain, QpAttr, QpAttrMask, QpInitAttr, QpState, QueuePair, RecvWr,
    SendOp, SendWr, Sge, Verbs, VerbsError, VerbsErrorKind, WcOpcode, WcStatus, WorkCompletion,
};

/// The outside world as the library sees it: one implementation of each seam.
///
/// Cloning is cheap (three `Arc`s); every clone refers to the same backends.
#[derive(Clone, Debug)]
pub struct Platform {
    /// RDMA devices.
    pub verbs: Arc<dyn Verbs>,
    /// The GPU runtime, or [`NoGpu`] on a host-only machine.
    pub gpu: Arc<dyn GpuRuntime>,
    /// Where the NICs sit on the PCIe tree.
    pub topology: Arc<dyn NicTopology>,
}
