//! Hooks for this crate's own tests, built only with the `testing` feature
//! (which only those tests enable): reachable from Rust only, and absent
//! from the shipped library.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use hipobj_platform::Platform;

static OVERRIDE: Mutex<Option<Platform>> = Mutex::new(None);
static PANIC_ARMED: AtomicBool = AtomicBool::new(false);
static PANIC_IN: Mutex<Option<&'static str>> = Mutex::new(None);

/// Makes `hipObjInit` use `platform` instead of the system's (or the
/// system's again, with `None`).
pub fn set_platform(platform: Option<Platform>) {
    *OVERRIDE.lock().unwrap_or_else(PoisonError::into_inner) = platform;
}

/// The platform `hipObjInit` uses.
pub(crate) fn platform() -> Platform {
    OVERRIDE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .unwrap_or_else(hipobj_system::platform)
}

/// Makes the exported function `name` panic (for the functions that call no
/// seam), or stops that with `None`.
pub fn panic_in(name: Option<&'static str>) {
    *PANIC_IN.lock().unwrap_or_else(PoisonError::into_inner) = name;
    PANIC_ARMED.store(name.is_some(), Ordering::SeqCst);
}

pub(crate) fn panic_requested(name: &str) -> bool {
    PANIC_ARMED.load(Ordering::Relaxed)
        && *PANIC_IN.lock().unwrap_or_else(PoisonError::into_inner) == Some(name)
}
