//! Test doubles of every seam (feature `fake`).
//!
//! Each fake records the calls made to it, can be told to fail or panic at a
//! named call, and counts the objects it has handed out that are still alive,
//! so that a test can prove that nothing leaked.

mod client_qp;
mod faults;
mod gpu;
mod topology;
mod verbs;

use std::sync::Arc;

pub use client_qp::ClientQp;
pub use faults::{Fault, Faults};
pub use gpu::FakeGpu;
pub use topology::FakeTopology;
pub use verbs::{FakeDeviceSpec, FakeMwBind, FakeMwEnd, FakeVerbs, LiveCounts};

use crate::Platform;

/// A platform made of fakes that share one fault plan.
#[derive(Debug, Clone)]
pub struct FakePlatform {
    /// The fake verbs.
    pub verbs: Arc<FakeVerbs>,
    /// The fake GPU runtime.
    pub gpu: Arc<FakeGpu>,
    /// The fake topology.
    pub topology: Arc<FakeTopology>,
    /// The fault plan all three consult.
    pub faults: Faults,
}

impl FakePlatform {
    /// One fake NIC (`fake0`, RoCE v2, `::ffff:127.0.0.1`), no GPU, an empty topology.
    pub fn host_only() -> Self {
        let faults = Faults::default();
        Self {
            verbs: Arc::new(FakeVerbs::new(vec![FakeDeviceSpec::default()], faults.clone())),
            gpu: Arc::new(FakeGpu::new(0, faults.clone())),
            topology: Arc::new(FakeTopology::new(Vec::new(), faults.clone())),
            faults,
        }
    }

    /// The [`Platform`] view of these fakes.
    pub fn platform(&self) -> Platform {
        Platform {
            verbs: self.verbs.clone(),
            gpu: self.gpu.clone(),
            topology: self.topology.clone(),
        }
    }
}
