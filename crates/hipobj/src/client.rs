//! The safe Rust API: a [`Client`] owns one initialized instance, and a
//! [`Registration`] keeps memory registered with its NIC.
//!
//! No safe code can leave memory registered past its owner's lifetime,
//! `mem::forget` included (docs/architecture.md, "Where unsafe lives"):
//!
//! - [`Client::register`] takes the buffer: the registration owns it, and
//!   [`Registration::into_inner`] gives it back after deregistering. A
//!   forgotten registration leaks its buffer with it, so the NIC can only
//!   ever reach memory that nothing else will use again.
//! - [`Client::with_registration`] lends borrowed memory to a closure: the
//!   scope's end deregisters it however the closure ends (a panic too), and
//!   the registration it hands out cannot leave the closure.
//! - [`Client::register_borrowed`] is `unsafe`: its caller promises to drop
//!   the registration before the borrow ends.
//!
//! ```no_run
//! # fn demo(s3: &mut dyn hipobj::Control, platform: hipobj_platform::Platform) -> hipobj::Result<()> {
//! // `platform`: `hipobj_system::platform()`, the real backends.
//! let client = hipobj::Client::builder(platform).nic_hint("softroce0").build()?;
//! let mut reg = client.register(vec![0u8; 1 << 20])?;
//! client.get(&mut reg, 0, 1 << 20, s3)?; // the server WRITEs the object into the buffer
//! let object = reg.into_inner(); // deregistered, and the buffer is ours again
//! assert_eq!(object.len(), 1 << 20);
//!
//! // Memory the program keeps: registered for the closure's run only.
//! let mut mine = vec![0u8; 4096];
//! client.with_registration(&mut mine, |reg| client.get(reg, 0, 4096, s3))??;
//! # Ok(()) }
//! ```
//!
//! The registration a scope hands out cannot escape it, so the old way of
//! keeping memory registered after its borrow no longer compiles:
//!
//! ```compile_fail,E0521
//! # fn demo(client: &hipobj::Client) {
//! let mut buf = vec![0u8; 64];
//! let mut kept = None;
//! client.with_registration(&mut buf, |reg| kept = Some(reg)).unwrap();
//! # }
//! ```
//!
//! nor does registering borrowed memory without `unsafe`:
//!
//! ```compile_fail,E0308
//! # fn demo(client: &hipobj::Client) {
//! let mut buf = vec![0u8; 64];
//! std::mem::forget(client.register(&mut buf));
//! # }
//! ```
//!
//! ```compile_fail,E0133
//! # fn demo(client: &hipobj::Client) {
//! let mut buf = vec![0u8; 64];
//! std::mem::forget(client.register_borrowed(&mut buf));
//! # }
//! ```
//!
//! Unlike the C API, which keeps one process-wide instance, each `Client`
//! is independent; several can live at once.
#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::sync::Arc;

use hipobj_platform::{MemRegion, Platform};

use crate::config::Config;
use crate::control::Control;
use crate::direction::Direction;
use crate::error::{Error, Result};
use crate::instance::Instance;
use crate::library::Library;
use crate::options::Options;
use crate::rc_v2::RcV2Session;

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
/// Either it owns its buffer ([`Client::register`], `'s` is `'static`), or
/// it stands for borrowed memory ([`Client::with_registration`], whose `'s`
/// is a lifetime of the scope alone, or the `unsafe`
/// [`Client::register_borrowed`]). Dropping it deregisters the memory
/// before anything else may use it. No `&[u8]` of registered memory is ever
/// handed out: copy in and out with [`Registration::write_from`] and
/// [`Registration::read_into`].
///
/// `'s` is invariant, so a scope's registration can be neither swapped for
/// another one nor kept past the scope.
#[derive(Debug)]
pub struct Registration<'s> {
    instance: Arc<Instance>,
    region: MemRegion,
    /// The registration owns the memory at `region`: a `Box<[u8]>` turned
    /// into a raw allocation, freed after deregistration.
    owned: bool,
    /// Not yet deregistered.
    registered: bool,
    _brand: PhantomData<fn(&'s ()) -> &'s ()>,
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

    /// Registers host memory that the registration owns from now on; get it
    /// back with [`Registration::into_inner`]. The buffer must hold at least
    /// a byte. If the registration is leaked, the buffer leaks with it.
    pub fn register(&self, buf: Vec<u8>) -> Result<Registration<'static>> {
        if buf.is_empty() {
            return Err(Error::invalid("the buffer size is 0"));
        }
        let raw: *mut [u8] = Box::into_raw(buf.into_boxed_slice());
        let (ptr, len) = (raw.cast::<u8>(), raw.len());
        // SAFETY: `raw` is a live allocation that nothing but the returned
        // registration can reach; its drop deregisters (removing every MR
        // over it) before freeing it, and leaking it leaks the allocation,
        // so the memory outlives its registration either way.
        let region = unsafe { MemRegion::new(ptr.expose_provenance(), len) };
        if let Err(e) = self.instance.register_host(region) {
            // SAFETY: nothing registered the allocation: it is still the
            // box's alone.
            drop(unsafe { Box::from_raw(raw) });
            return Err(e);
        }
        Ok(Registration {
            instance: self.instance.clone(),
            region,
            owned: true,
            registered: true,
            _brand: PhantomData,
        })
    }

    /// Registers `buf` for the run of `f`, which gets the registration, and
    /// deregisters it when `f` returns or panics. The registration cannot
    /// leave `f`: its lifetime is one that only this call knows. Fails
    /// without running `f` if the memory cannot be registered.
    pub fn with_registration<R>(
        &self,
        buf: &mut [u8],
        f: impl for<'s> FnOnce(&mut Registration<'s>) -> R,
    ) -> Result<R> {
        // SAFETY: the registration stays in this frame, and `f` can neither
        // keep nor swap it (its lifetime is `f`'s own, and invariant), so it
        // is dropped, deregistering `buf`, before this call returns or
        // unwinds, while `buf` is still borrowed.
        let mut reg = unsafe { self.register_borrowed(buf) }?;
        Ok(f(&mut reg))
    }

    /// Registers borrowed host memory.
    ///
    /// # Safety
    ///
    /// The returned registration must be dropped before `'a` ends: it must
    /// not be leaked (`mem::forget`, a reference cycle, a process-long
    /// static), or the NIC could write memory that the program has handed
    /// back or lent out again. While it lives, `buf` may be written at any
    /// moment by a server holding a token for it.
    pub unsafe fn register_borrowed<'a>(&self, buf: &'a mut [u8]) -> Result<Registration<'a>> {
        // SAFETY: `buf` is live memory borrowed mutably for 'a, and the
        // caller promises to drop the registration (which deregisters it,
        // removing every MR over it) before 'a ends.
        let region = unsafe { MemRegion::new(buf.as_mut_ptr().expose_provenance(), buf.len()) };
        self.instance.register_host(region)?;
        Ok(Registration {
            instance: self.instance.clone(),
            region,
            owned: false,
            registered: true,
            _brand: PhantomData,
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

    /// GET into the part `offset..offset + len` of `reg` through a shared
    /// borrow, so that several threads can fill disjoint parts of one
    /// registration at once (each transfer on a connection of its own from
    /// the pool). The caller keeps the parts disjoint and reads none of
    /// them before its transfer is done; as with [`Client::get`], no
    /// reference to the memory is formed while the server writes it, and
    /// [`Registration::write_from`], the only way this process writes it,
    /// needs the exclusive borrow that this shared one rules out.
    pub fn get_part(
        &self,
        reg: &Registration<'_>,
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

    /// A hipobj-rc-v2 GET session into a part of a registration that other
    /// sessions (or binding transfers) fill at the same time, each its own
    /// range, as [`Client::get_part`] does: the server will write `len`
    /// bytes at `offset` of `reg`, and nothing else of it.
    pub fn rc_v2_get_part<'r>(
        &self,
        reg: &'r Registration<'_>,
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
        // SAFETY: the range lies inside the registration, whose memory it
        // owns or borrows mutably while it lives, so it is allocated. No
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

impl Registration<'_> {
    /// Deregisters, waiting for calls of the low-level [`Instance`] API that
    /// still use the memory to return, and hands back the owned buffer once
    /// the NIC can no longer reach it. `None` for a borrowed registration,
    /// and for an owned one that something leaked still holds (an
    /// [`RcV2Session`] passed to `mem::forget`): that memory stays
    /// registered and is leaked, never handed back.
    fn release(&mut self) -> Option<Box<[u8]>> {
        if !self.registered {
            return None;
        }
        let mut waits = 0u32;
        while let Err(e) = self.instance.deregister(self.region.addr()) {
            if e.kind() != crate::ErrorKind::Busy {
                break;
            }
            // An owned buffer can be leaked instead of waited for: after a
            // second of Busy, something that holds it was leaked.
            if self.owned && waits >= 1000 {
                self.registered = false;
                return None;
            }
            waits = waits.saturating_add(1);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        self.registered = false;
        if !self.owned {
            return None;
        }
        let raw = std::ptr::slice_from_raw_parts_mut(
            std::ptr::with_exposed_provenance_mut::<u8>(self.region.addr()),
            self.region.len(),
        );
        // SAFETY: `register` made this allocation with `Box::into_raw` and
        // exposed its address; it is no longer registered, and this
        // registration (whose `registered` is now false, so nothing frees it
        // twice) was its only owner.
        Some(unsafe { Box::from_raw(raw) })
    }

    /// Deregisters the memory and gives back the buffer the registration
    /// owned ([`Client::register`]); a borrowed registration gives an empty
    /// one. If something leaked still holds the registration (a session
    /// passed to `mem::forget`), the memory stays registered and is leaked,
    /// and this gives a copy of it.
    pub fn into_inner(mut self) -> Vec<u8> {
        match self.release() {
            Some(buf) => buf.into_vec(),
            // Leaked, so still allocated: a copy is all that can be had.
            None if self.owned => self.to_vec(),
            None => Vec::new(),
        }
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        // The memory must not be handed back while an MR covers it. In a
        // forked child the deregistration is refused (the MR is the
        // parent's), so the memory is leaked with it.
        drop(self.release());
        self.instance.leak_if_forked();
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // A forked child never releases the parent's RDMA objects.
        self.instance.leak_if_forked();
    }
}
