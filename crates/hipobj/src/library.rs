//! The library's current instance, and init and shutdown.
//!
//! A [`Library`] is what the C API keeps in a process-wide static; tests make
//! their own. Every call copies the current `Arc<Instance>` under a shared
//! lock and then works on that copy, so a shutdown on another thread never
//! pulls an instance out from under a call in progress, and a new init can
//! start before old calls finish.

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use hipobj_platform::Platform;

use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};
use crate::instance::Instance;
use crate::options::Options;

/// Init and shutdown, and the instance they publish.
#[derive(Debug, Default)]
pub struct Library {
    /// Held by init and shutdown, so they run one at a time.
    lifecycle: Mutex<()>,
    current: RwLock<Option<Arc<Instance>>>,
}

impl Library {
    /// A library with no instance.
    pub const fn new() -> Self {
        Self {
            lifecycle: Mutex::new(()),
            current: RwLock::new(None),
        }
    }

    /// The current instance, or `NotInitialized`.
    pub fn instance(&self) -> Result<Arc<Instance>> {
        let instance = self
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::NotInitialized,
                    "hipObject is not initialized: call hipObjInit first",
                )
            })?;
        instance.check_process()?;
        Ok(instance)
    }

    /// Takes out an instance that a forked child inherited, leaking it (its
    /// RDMA objects are the parent's), so that the child can initialize
    /// its own.
    fn forget_inherited(&self) {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if current.as_ref().is_some_and(|i| i.forked()) {
            std::mem::forget(current.take());
        }
    }

    /// Whether an instance is published.
    pub fn is_initialized(&self) -> bool {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// Checks `config`, then builds and publishes an instance on the
    /// platform `platform` returns, with the settings `options` returns.
    pub fn init(
        &self,
        config: &Config,
        platform: impl FnOnce() -> Result<Platform>,
        options: impl FnOnce() -> Options,
    ) -> Result<()> {
        config.validate()?;
        let _one_at_a_time = self.lifecycle.lock().unwrap_or_else(PoisonError::into_inner);
        self.forget_inherited();
        if self.is_initialized() {
            return Err(Error::new(
                ErrorKind::AlreadyInitialized,
                "hipObject is already initialized",
            ));
        }
        let instance = Instance::new(platform()?, options(), config)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(instance));
        Ok(())
    }

    /// Unpublishes the instance and wakes transfers waiting for a
    /// connection. Calls in progress keep it until they return. Does
    /// nothing when not initialized.
    pub fn shutdown(&self) {
        let _one_at_a_time = self.lifecycle.lock().unwrap_or_else(PoisonError::into_inner);
        self.forget_inherited();
        let old = self
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(instance) = old {
            instance.close();
            // Dropped here unless a call in progress still holds it.
        }
    }
}
