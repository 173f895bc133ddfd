//! The safe Rust API: a [`Client`] owns one initialized instance, and a
//! [`Registration`] borrows the memory it registers, deregistering it when
//! dropped.
//!
//! ```no_run
//! # fn demo(s3: &mut dyn hipobj::Control, platform: hipobj_platform::Platform) -> hipobj::Result<()> {
//! // `platform`: `hipobj_system::platform()`, the real backends.
//! let client = hipobj::Client::builder(platform).nic_hint("softroce0").build()?;
//! let mut buf = vec![0u8; 1 << 20];
//! let mut reg = client.register(&mut buf)?;
//! client.get(&mut reg, 0, 1 << 20, s3)?; // the server WRITEs the object into buf
//! drop(reg);
//! assert_eq!(buf.len(), 1 << 20);
//! # Ok(()) }
//! ```
//!
//! Unlike the C API, which keeps one process-wide instance, each `Client`
//! is independent; several can live at once.
#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::sync::Arc;

use hipobj_platform::{MemRegion, Platform};

use crate::control::Control;
use crate::error::{Error, Result};
use crate::instance::{Config, Direction, Instance};
use crate::library::Library;
use crate::options::Options;

/// Builds a [`Client`].
#[derive(Debug)]
pub struct ClientBuilder {
    gpu_device: Option<i32>,
    nic_hint: Option<String>,
    options: Option<Options>,
    platform: Platform,
}

impl ClientBuilder {
    /// The GPU whose nearest NIC to use (default: the current GPU, or none).
    #[must_use]
    pub fn gpu_device(mut self, index: i32) -> Self {
        self.gpu_device = Some(index);
        self
    }

    /// The RDMA devices that may be chosen, comma-separated (see `nicHint`).
    #[must_use]
    pub fn nic_hint(mut self, hint: impl Into<String>) -> Self {
        self.nic_hint = Some(hint.into());
        self
    }

    /// Settings (default: read from the `HIPOBJ_*` environment variables).
    #[must_use]
    pub fn options(mut self, options: Options) -> Self {
        self.options = Some(options);
        self
    }

    /// Chooses and opens the NIC and creates the connections.
    pub fn build(self) -> Result<Client> {
        let lib = Library::new();
        let config = Config {
            flags: 0,
            gpu_device: self.gpu_device.unwrap_or(-1),
            nic_hint: self.nic_hint,
        };
        let platform = self.platform;
        lib.init(
            &config,
            || Ok(platform),
            || self.options.unwrap_or_else(Options::from_env),
        )?;
        Ok(Client {
            instance: lib.instance()?,
        })
    }
}

/// An initialized hipObject of its own.
#[derive(Debug, Clone)]
pub struct Client {
    instance: Arc<Instance>,
}

/// Host memory registered with a [`Client`]'s NIC, for as long as this lives.
///
/// It borrows the memory mutably, so nothing else can touch it while the NIC
/// may; dropping it deregisters the memory.
#[derive(Debug)]
pub struct Registration<'a> {
    instance: Arc<Instance>,
    region: MemRegion,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl Client {
    /// A builder for a client on `platform`: `hipobj_system::platform()`
    /// for the real backends, or a fake one in tests.
    pub fn builder(platform: Platform) -> ClientBuilder {
        ClientBuilder {
            gpu_device: None,
            nic_hint: None,
            options: None,
            platform,
        }
    }

    /// The instance underneath, for what this API does not cover.
    pub fn instance(&self) -> &Arc<Instance> {
        &self.instance
    }

    /// Registers host memory.
    pub fn register<'a>(&self, buf: &'a mut [u8]) -> Result<Registration<'a>> {
        // SAFETY: `buf` stays mutably borrowed by the returned registration,
        // whose drop deregisters it (removing every MR over it) before the
        // borrow ends, so the memory outlives its registration.
        let region = unsafe { MemRegion::new(buf.as_mut_ptr() as usize, buf.len()) };
        self.instance.register_host(region)?;
        Ok(Registration {
            instance: self.instance.clone(),
            region,
            _borrow: PhantomData,
        })
    }

    fn check_owner(&self, reg: &Registration<'_>) -> Result<()> {
        if Arc::ptr_eq(&self.instance, &reg.instance) {
            Ok(())
        } else {
            Err(Error::invalid("the registration belongs to another client"))
        }
    }

    /// GET: the server RDMA WRITEs `len` bytes at `offset` into `reg`.
    pub fn get(
        &self,
        reg: &mut Registration<'_>,
        offset: usize,
        len: usize,
        s3: &mut dyn Control,
    ) -> Result<()> {
        self.check_owner(reg)?;
        self.instance
            .transfer(Direction::Get, reg.region.addr(), len, offset, s3)
    }

    /// PUT: the server RDMA READs `len` bytes at `offset` out of `reg`.
    pub fn put(&self, reg: &Registration<'_>, offset: usize, len: usize, s3: &mut dyn Control) -> Result<()> {
        self.check_owner(reg)?;
        self.instance
            .transfer(Direction::Put, reg.region.addr(), len, offset, s3)
    }
}

impl Registration<'_> {
    /// Bytes registered.
    pub fn len(&self) -> usize {
        self.region.len()
    }

    /// Whether nothing is registered (never: registrations are at least a byte).
    pub fn is_empty(&self) -> bool {
        self.region.is_empty()
    }

    /// The registered bytes, as they are now.
    ///
    /// Between transfers no server should touch the memory, but a server
    /// holding a GET token may still write it (RDMA is like that); take the
    /// bytes right after the transfer that filled them.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the registration holds the unique borrow of this memory for
        // its lifetime 'a, and `&self` keeps it from being re-borrowed
        // mutably meanwhile; a transfer needs `&mut self` for a GET.
        unsafe {
            std::slice::from_raw_parts(
                std::ptr::with_exposed_provenance(self.region.addr()),
                self.region.len(),
            )
        }
    }

    /// The registered bytes, to fill before a PUT.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes this the only access.
        unsafe {
            std::slice::from_raw_parts_mut(
                std::ptr::with_exposed_provenance_mut(self.region.addr()),
                self.region.len(),
            )
        }
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        // The memory must not be handed back while an MR covers it. Host
        // registrations have no staging copies, so the only thing that can
        // make this Busy is a call through the low-level `Instance` API that
        // is still running on this address: wait for it to return.
        loop {
            match self.instance.deregister(self.region.addr()) {
                Err(e) if e.kind() == crate::ErrorKind::Busy => std::thread::yield_now(),
                _ => break,
            }
        }
    }
}
