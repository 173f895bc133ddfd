//! The production platform: the real backends, chosen at run time.

use std::sync::{Arc, OnceLock};

use hipobj_platform::{Device, NoGpu, NoTopology, Platform, Verbs, VerbsError, VerbsErrorKind};

/// A Verbs backend standing in for one that could not be loaded.
#[derive(Debug)]
pub struct Unavailable {
    why: String,
}

impl Unavailable {
    /// A backend that fails every open with `why`.
    pub fn new(why: impl Into<String>) -> Self {
        Self { why: why.into() }
    }
}

impl Verbs for Unavailable {
    fn backend(&self) -> &'static str {
        "unavailable"
    }
    fn device_names(&self) -> Result<Vec<String>, VerbsError> {
        Err(VerbsError::new(
            "ibv_get_device_list",
            VerbsErrorKind::LibraryMissing,
            self.why.clone(),
        ))
    }
    fn open_device(&self, _name: &str) -> Result<Arc<dyn Device>, VerbsError> {
        Err(VerbsError::new(
            "ibv_open_device",
            VerbsErrorKind::LibraryMissing,
            self.why.clone(),
        ))
    }
}

/// The platform of this process, built on first use and kept for the rest
/// of it, so that a loaded verbs or GPU library is never unloaded under
/// objects that still use it.
pub fn system_platform() -> Platform {
    static SYSTEM: OnceLock<Platform> = OnceLock::new();
    SYSTEM
        .get_or_init(|| Platform {
            verbs: Arc::new(Unavailable::new(
                "no RDMA backend is built into this hipObject yet (neither libibverbs nor the soft RoCE NIC)",
            )),
            gpu: Arc::new(NoGpu::new(
                "no GPU runtime backend is built into this hipObject yet",
            )),
            topology: Arc::new(NoTopology),
        })
        .clone()
}
