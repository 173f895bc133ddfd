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
//! let object = reg.to_vec(); // a copy: registered memory is never lent out
//! drop(reg);
//! assert_eq!(object.len(), 1 << 20);
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
use crate::rcv2::RcV2Session;

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

/// A hipobj-rc-v2 session over a [`Registration`], which it borrows for as
/// long as it lives (see [`RcV2Session`] for the calls).
#[derive(Debug)]
pub struct RcV2<'r> {
    session: RcV2Session,
    _borrow: PhantomData<&'r mut ()>,
}

impl std::ops::Deref for RcV2<'_> {
    type Target = RcV2Session;
    fn deref(&self) -> &RcV2Session {
        &self.session
    }
}

impl std::ops::DerefMut for RcV2<'_> {
    fn deref_mut(&mut self) -> &mut RcV2Session {
        &mut self.session
    }
}

impl Client {
    /// A hipobj-rc-v2 GET session: the server will write `len` bytes at
    /// `offset` of `reg`.
    pub fn rc_v2_get<'r>(
        &self,
        reg: &'r mut Registration<'_>,
        offset: usize,
        len: usize,
    ) -> Result<RcV2<'r>> {
        self.check_owner(reg)?;
        let session = self
            .instance
            .rc_v2_session(Direction::Get, reg.region.addr(), len, offset)?;
        Ok(RcV2 {
            session,
            _borrow: PhantomData,
        })
    }

    /// A hipobj-rc-v2 PUT session: the client will write the `len` bytes
    /// at `offset` of `reg` into the server's staging buffer.
    pub fn rc_v2_put<'r>(&self, reg: &'r Registration<'_>, offset: usize, len: usize) -> Result<RcV2<'r>> {
        self.check_owner(reg)?;
        let session = self
            .instance
            .rc_v2_session(Direction::Put, reg.region.addr(), len, offset)?;
        Ok(RcV2 {
            session,
            _borrow: PhantomData,
        })
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

    /// Copies `out.len()` registered bytes starting at `offset` into `out`.
    ///
    /// There is deliberately no `&[u8]` view of registered memory: while it
    /// is registered, a server holding a token for it may write it at any
    /// moment (RDMA needs no cooperation from this process), and a shared
    /// borrow whose bytes change under it is undefined behaviour. A copy
    /// taken right after the transfer that filled the range is what the
    /// transfer delivered.
    pub fn read_into(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check_range(offset, out.len())?;
        // SAFETY: the range lies inside the registration, whose memory this
        // registration borrows mutably for 'a, so it is allocated. No
        // reference to it is formed: the bytes are copied through raw
        // pointers, as from memory a device writes, into `out`, which the
        // NIC cannot reach (it is not registered through this object).
        unsafe {
            std::ptr::copy_nonoverlapping(
                std::ptr::with_exposed_provenance::<u8>(self.region.addr() + offset),
                out.as_mut_ptr(),
                out.len(),
            );
        }
        Ok(())
    }

    /// A copy of all the registered bytes (see [`Registration::read_into`]).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.region.len()];
        // The whole registration is always in range.
        let _ = self.read_into(0, &mut out);
        out
    }

    /// Copies `src` into the registration starting at `offset`, to fill it
    /// before a PUT. Like [`Registration::read_into`] it hands out no borrow
    /// of memory a peer may write.
    pub fn write_from(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        self.check_range(offset, src.len())?;
        // SAFETY: as in `read_into`; `&mut self` keeps other copies through
        // this registration from running at the same time.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                std::ptr::with_exposed_provenance_mut::<u8>(self.region.addr() + offset),
                src.len(),
            );
        }
        Ok(())
    }

    /// Sets every registered byte to `byte`.
    pub fn fill(&mut self, byte: u8) {
        // SAFETY: as in `write_from`, over the whole registration.
        unsafe {
            std::ptr::write_bytes(
                std::ptr::with_exposed_provenance_mut::<u8>(self.region.addr()),
                byte,
                self.region.len(),
            );
        }
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        if offset > self.region.len() || len > self.region.len() - offset {
            return Err(Error::invalid(format!(
                "bytes {offset}..+{len} run past the end of the {}-byte registration",
                self.region.len()
            )));
        }
        Ok(())
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
