//! hipObject's composition root: the production platform, built in one
//! place.
//!
//! The library core (`hipobj`) and the server's RDMA half see only the
//! seams of `hipobj-platform`. This crate is where the real implementations
//! are chosen, once, for every program of the project: the C library, the
//! Rust `Client` of its users, the `hipobj` command and `hipobj-server`.
//!
//! - **Verbs**: every backend that loads (libibverbs by dlopen, named by
//!   `HIPOBJ_IBVERBS_LIBRARY` or `libibverbs.so.1`; the soft RoCE NIC, whose
//!   device binds its address only when opened), routed by device name by
//!   [`RoutedVerbs`]. A process that must use one backend only (the server's
//!   `backend` setting) takes [`ibverbs`] or [`softroce`].
//! - **GPU runtime**: the one that loads and sees a GPU (HIP, then CUDA,
//!   else none), or the one `HIPOBJ_GPU_RUNTIME` forces
//!   (docs/gpu-runtimes.md).
//! - **Topology**: sysfs (`/sys/class/infiniband`).
//!
//! Nothing here depends on the core or on the server, so both can depend on
//! this crate. Tests build their own platform from the fakes instead.

use std::sync::{Arc, OnceLock};

use hipobj_ibverbs::{IbVerbs, SysfsTopology};
use hipobj_platform::{Device, GpuRuntime, NicTopology, Platform, Verbs, VerbsError, VerbsErrorKind};

/// The environment variable naming the libibverbs to load.
pub const IBVERBS_LIBRARY_VAR: &str = "HIPOBJ_IBVERBS_LIBRARY";

/// The soft RoCE NIC's default device name (`HIPOBJ_SOFTROCE_NAME` changes
/// it; docs/soft-roce.md).
pub const SOFTROCE_DEFAULT_NAME: &str = hipobj_softroce::DEFAULT_NAME;

/// What the soft RoCE NIC's worker threads' names start with: their CPU
/// time is the NIC's, not the application's (docs/soft-roce.md).
pub const SOFTROCE_WORKER_THREAD_PREFIX: &str = hipobj_softroce::WORKER_THREAD_PREFIX;

/// Several Verbs backends behind one, routed by device name: the first
/// backend that lists a device opens it. A backend that failed to load is
/// remembered with its reason, so that opening a device no loaded backend
/// knows says why (for instance that libibverbs is missing) instead of a
/// bare "not found".
#[derive(Debug)]
pub struct RoutedVerbs {
    loaded: Vec<Arc<dyn Verbs>>,
    missing: Vec<VerbsError>,
}

impl RoutedVerbs {
    /// Combines the backends that loaded with the errors of those that did not.
    pub fn new(loaded: Vec<Arc<dyn Verbs>>, missing: Vec<VerbsError>) -> Self {
        Self { loaded, missing }
    }

    /// Every production backend: libibverbs loaded from `ibverbs_library`
    /// (a soname or a path), and the soft RoCE NIC.
    pub fn system(ibverbs_library: &str) -> Self {
        let mut loaded: Vec<Arc<dyn Verbs>> = Vec::new();
        let mut missing = Vec::new();
        for backend in [
            IbVerbs::load_from(ibverbs_library).map(|v| Arc::new(v) as Arc<dyn Verbs>),
            softroce(),
        ] {
            match backend {
                Ok(v) => loaded.push(v),
                Err(e) => missing.push(e),
            }
        }
        Self::new(loaded, missing)
    }
}

impl Verbs for RoutedVerbs {
    fn backend(&self) -> &'static str {
        "routed"
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

/// The libibverbs to load: `HIPOBJ_IBVERBS_LIBRARY`, or `libibverbs.so.1`.
pub fn ibverbs_library() -> String {
    std::env::var(IBVERBS_LIBRARY_VAR)
        .ok()
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| hipobj_ibverbs::DEFAULT_LIBRARY.to_owned())
}

/// libibverbs alone (the one [`ibverbs_library`] names).
pub fn ibverbs() -> Result<Arc<dyn Verbs>, VerbsError> {
    Ok(Arc::new(IbVerbs::load_from(&ibverbs_library())?))
}

/// The soft RoCE NIC alone, configured by the `HIPOBJ_SOFTROCE_*`
/// environment variables (docs/soft-roce.md).
pub fn softroce() -> Result<Arc<dyn Verbs>, VerbsError> {
    Ok(Arc::new(hipobj_softroce::SoftVerbs::from_env()?))
}

/// The NIC topology of this machine (sysfs).
pub fn topology() -> Arc<dyn NicTopology> {
    Arc::new(SysfsTopology::system())
}

/// The GPU runtime of this process (`HIPOBJ_GPU_RUNTIME`; loads it).
pub fn gpu() -> Arc<dyn GpuRuntime> {
    hipobj_gpu::system_gpu()
}

/// The platform of this process, built on first use and kept for the rest
/// of it, so that a loaded verbs or GPU library is never unloaded under
/// objects that still use it. Nothing is loaded before the first call.
pub fn platform() -> Platform {
    static SYSTEM: OnceLock<Platform> = OnceLock::new();
    SYSTEM.get_or_init(|| platform_with(&ibverbs_library())).clone()
}

/// A production platform whose libibverbs is loaded from `ibverbs_library`
/// (a soname or a path); built anew on each call.
pub fn platform_with(ibverbs_library: &str) -> Platform {
    Platform {
        verbs: Arc::new(RoutedVerbs::system(ibverbs_library)),
        gpu: gpu(),
        topology: topology(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hipobj_platform::fake::{FakeDeviceSpec, FakeVerbs, Faults};

    fn fake(name: &str) -> Arc<dyn Verbs> {
        let spec = FakeDeviceSpec {
            name: name.into(),
            ..FakeDeviceSpec::default()
        };
        Arc::new(FakeVerbs::new(vec![spec], Faults::default()))
    }

    #[test]
    fn a_device_name_opens_on_the_backend_that_lists_it() {
        let routed = RoutedVerbs::new(vec![fake("a0"), fake("b0")], Vec::new());
        assert_eq!(routed.device_names().expect("names"), ["a0", "b0"]);
        assert!(routed.open_device("b0").is_ok());
        let e = routed.open_device("c0").expect_err("nobody lists c0");
        assert_eq!(e.kind, VerbsErrorKind::NotFound, "{e}");
    }

    #[test]
    fn an_unknown_name_says_which_backend_did_not_load() {
        let missing = VerbsError::new(
            "dlopen",
            VerbsErrorKind::LibraryMissing,
            "libibverbs.so.1 is absent",
        );
        let routed = RoutedVerbs::new(vec![fake("softroce0")], vec![missing]);
        let e = routed.open_device("mlx5_0").expect_err("libibverbs did not load");
        assert_eq!(e.kind, VerbsErrorKind::LibraryMissing, "{e}");
        assert!(e.to_string().contains("libibverbs.so.1 is absent"), "{e}");
        assert!(routed.open_device("softroce0").is_ok());
    }
}
