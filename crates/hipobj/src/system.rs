//! The production platform: the real backends, chosen at run time.
//!
//! Verbs devices come from every backend that loads, routed by name: the
//! first backend that lists a device opens it. A backend that fails to load
//! is remembered with its reason, so that opening a device no loaded backend
//! knows reports why (for instance that libibverbs is missing) instead of a
//! bare "not found".

use std::sync::{Arc, OnceLock};

use hipobj_ibverbs::{IbVerbs, SysfsTopology};
use hipobj_platform::{Device, Platform, Verbs, VerbsError, VerbsErrorKind};

/// Several Verbs backends behind one, routed by device name.
#[derive(Debug)]
pub struct MultiVerbs {
    loaded: Vec<Arc<dyn Verbs>>,
    missing: Vec<VerbsError>,
}

impl MultiVerbs {
    /// Combines the backends that loaded with the errors of those that did not.
    pub fn new(loaded: Vec<Arc<dyn Verbs>>, missing: Vec<VerbsError>) -> Self {
        Self { loaded, missing }
    }
}

impl Verbs for MultiVerbs {
    fn backend(&self) -> &'static str {
        "multi"
    }

    fn device_names(&self) -> Result<Vec<String>, VerbsError> {
        let mut names = Vec::new();
        for b in &self.loaded {
            // A backend that loads but cannot list devices (no kernel
            // support) simply contributes none.
            names.extend(b.device_names().unwrap_or_default());
        }
        Ok(names)
    }

    fn open_device(&self, name: &str) -> Result<Arc<dyn Device>, VerbsError> {
        for b in &self.loaded {
            if b.device_names().is_ok_and(|n| n.iter().any(|d| d == name)) {
                return b.open_device(name);
            }
        }
        if let Some(missing) = self.missing.first() {
            return Err(VerbsError::new(
                "ibv_open_device",
                VerbsErrorKind::LibraryMissing,
                format!("no loaded RDMA backend has a device named {name}, and {missing}"),
            ));
        }
        Err(VerbsError::new(
            "ibv_open_device",
            VerbsErrorKind::NotFound,
            format!("no RDMA device is named {name}"),
        ))
    }
}

/// The platform of this process, built on first use and kept for the rest
/// of it, so that a loaded verbs or GPU library is never unloaded under
/// objects that still use it. Nothing is loaded before the first init.
pub fn system_platform() -> Platform {
    static SYSTEM: OnceLock<Platform> = OnceLock::new();
    SYSTEM
        .get_or_init(|| {
            let library = std::env::var("HIPOBJ_IBVERBS_LIBRARY")
                .ok()
                .filter(|l| !l.is_empty())
                .unwrap_or_else(|| hipobj_ibverbs::DEFAULT_LIBRARY.to_owned());
            platform_with(&library)
        })
        .clone()
}

/// A production platform whose libibverbs is loaded from `ibverbs_library`
/// (a soname or a path).
pub fn platform_with(ibverbs_library: &str) -> Platform {
    let mut loaded: Vec<Arc<dyn Verbs>> = Vec::new();
    let mut missing = Vec::new();
    match IbVerbs::load_from(ibverbs_library) {
        Ok(v) => loaded.push(Arc::new(v)),
        Err(e) => missing.push(e),
    }
    // The soft RoCE NIC (device `softroce0`, see docs/soft-roce.md) is
    // always there; it binds its address only when opened.
    match hipobj_softroce::SoftVerbs::from_env() {
        Ok(v) => loaded.push(Arc::new(v)),
        Err(e) => missing.push(e),
    }
    Platform {
        verbs: Arc::new(MultiVerbs::new(loaded, missing)),
        gpu: hipobj_gpu::system_gpu(),
        topology: Arc::new(SysfsTopology::system()),
    }
}
