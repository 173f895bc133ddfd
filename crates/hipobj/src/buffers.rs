//! Registered buffers, looked up by the exact address they were registered at.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use hipobj_platform::{AccessFlags, MemoryRegion, PinnedHostBuffer};

use crate::direction::Direction;
use crate::error::{Error, ErrorKind, Result};

/// Most buffers registered at once.
pub const MAX_BUFFERS: usize = 256;
/// Largest registration, in bytes: 4 GiB.
pub const MAX_BUFFER_SIZE: u64 = 4 << 30;

/// The check of a size that a registration, a transfer or a token takes:
/// at least a byte (`InvalidValue`), at most [`MAX_BUFFER_SIZE`]
/// (`SizeTooLarge`). `what` names it in the error: "registration",
/// "transfer", "token". Bindings make it before anything else, as the core
/// does, so that a bad size fails the same way before or after init.
pub fn check_size(size: usize, what: &str) -> Result<()> {
    if size == 0 {
        return Err(Error::invalid(format!("the {what} size is 0")));
    }
    if size as u64 > MAX_BUFFER_SIZE {
        return Err(Error::new(
            ErrorKind::SizeTooLarge,
            format!("{size} bytes is over the 4 GiB limit of one {what}"),
        ));
    }
    Ok(())
}

/// The check of a GET's length: its bytes come as one RDMA WRITE
/// (docs/protocol.md §2), so a GET moves at most
/// [`hipobj_proto::landed::MAX_LEN`] bytes; a larger object goes as ranged
/// GETs.
pub(crate) fn check_get_size(size: usize) -> Result<()> {
    if size as u64 > hipobj_proto::landed::MAX_LEN {
        return Err(Error::new(
            ErrorKind::SizeTooLarge,
            format!(
                "a GET of {size} bytes is over the {} one RDMA WRITE can carry: split it into ranged GETs",
                hipobj_proto::landed::MAX_LEN
            ),
        ));
    }
    Ok(())
}

/// The checks of a range of memory to register, which a
/// `hipobj_platform::MemRegion` may only be made of: a pointer that is not
/// NULL, a size [`check_size`] accepts, and no wrap around the end of the
/// address space.
pub fn check_region(addr: usize, size: usize) -> Result<()> {
    if addr == 0 {
        return Err(Error::invalid("the buffer pointer is NULL"));
    }
    check_size(size, "registration")?;
    if addr.checked_add(size).is_none() {
        return Err(Error::invalid("the buffer wraps around the address space"));
    }
    Ok(())
}

/// How a buffer reaches the NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufKind {
    /// Host memory, registered as it is.
    Host,
    /// GPU memory the NIC reaches directly, through a dma-buf or a plain MR.
    Device {
        /// Whether it was registered as a dma-buf.
        dmabuf: bool,
    },
    /// GPU memory the NIC cannot reach: peers use a pinned host copy of it.
    Staged,
}

/// The two registrations of one buffer, one per direction, so that a token
/// grants the server only what its transfer needs: a PUT token's key lets
/// the server RDMA READ the buffer and nothing else, a GET token's key lets
/// it RDMA WRITE the buffer and nothing else.
#[derive(Debug)]
pub struct MrPair {
    /// `REMOTE_READ` only: named by PUT tokens.
    pub put: Box<dyn MemoryRegion>,
    /// `LOCAL_WRITE | REMOTE_WRITE`: named by GET tokens.
    pub get: Box<dyn MemoryRegion>,
}

impl MrPair {
    /// The access rights of the registration PUT tokens name.
    pub const PUT_ACCESS: AccessFlags = AccessFlags::REMOTE_READ;
    /// The access rights of the registration GET tokens name.
    pub const GET_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_WRITE);

    /// Registers both, with `reg` called once per access set.
    pub fn register<E>(
        mut reg: impl FnMut(AccessFlags) -> Result<Box<dyn MemoryRegion>, E>,
    ) -> Result<Self, E> {
        let put = reg(Self::PUT_ACCESS)?;
        let get = reg(Self::GET_ACCESS)?;
        Ok(Self { put, get })
    }

    fn for_direction(&self, dir: Direction) -> &dyn MemoryRegion {
        match dir {
            Direction::Put => self.put.as_ref(),
            Direction::Get => self.get.as_ref(),
        }
    }
}

/// How a buffer is registered, by the device's fence mode.
#[derive(Debug)]
pub enum BufMrs {
    /// Window mode: one registration with `MW_BIND | LOCAL_WRITE` only; its
    /// own key gives a peer nothing, and each transfer binds a window over it.
    Windowed(Box<dyn MemoryRegion>),
    /// Fallback: one registration per remote right.
    Pair(MrPair),
}

impl BufMrs {
    /// The rights of the window-mode registration.
    pub const WINDOWED_ACCESS: AccessFlags = AccessFlags::MW_BIND.union(AccessFlags::LOCAL_WRITE);

    /// Registers a buffer for `windows` mode, with `reg` called once per access set.
    pub fn register<E>(
        windows: bool,
        mut reg: impl FnMut(AccessFlags) -> Result<Box<dyn MemoryRegion>, E>,
    ) -> Result<Self, E> {
        if windows {
            Ok(Self::Windowed(reg(Self::WINDOWED_ACCESS)?))
        } else {
            MrPair::register(reg).map(Self::Pair)
        }
    }
}

/// One registered buffer.
#[derive(Debug)]
pub struct BufEntry {
    addr: usize,
    len: usize,
    kind: BufKind,
    // Field order is drop order: the MRs go before the memory they cover.
    mrs: BufMrs,
    staging: Option<Box<dyn PinnedHostBuffer>>,
}

impl BufEntry {
    /// A buffer registered directly (host memory, or device memory the NIC reaches).
    pub fn direct(addr: usize, len: usize, kind: BufKind, mrs: BufMrs) -> Self {
        Self {
            addr,
            len,
            kind,
            mrs,
            staging: None,
        }
    }

    /// A device buffer that peers reach through `staging`, which `mrs` cover.
    pub fn staged(addr: usize, len: usize, mrs: BufMrs, staging: Box<dyn PinnedHostBuffer>) -> Self {
        Self {
            addr,
            len,
            kind: BufKind::Staged,
            mrs,
            staging: Some(staging),
        }
    }

    /// The address the application registered.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never, for a registered buffer).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How it reaches the NIC.
    pub fn kind(&self) -> BufKind {
        self.kind
    }

    /// The remote key of the registration for direction `dir` (window mode:
    /// the one registration's key, which grants a peer nothing).
    pub fn rkey(&self, dir: Direction) -> u32 {
        match &self.mrs {
            BufMrs::Pair(p) => p.for_direction(dir).rkey(),
            BufMrs::Windowed(mr) => mr.rkey(),
        }
    }

    /// The local key of a registration that covers the whole buffer, for
    /// work requests that read it locally (hipobj-rc-v2's PUT write, whose
    /// source needs no access right at all).
    pub fn lkey(&self) -> u32 {
        match &self.mrs {
            BufMrs::Pair(p) => p.get.lkey(),
            BufMrs::Windowed(mr) => mr.lkey(),
        }
    }

    /// Window mode: the registration windows are bound over.
    pub fn window_mr(&self) -> Option<&dyn MemoryRegion> {
        match &self.mrs {
            BufMrs::Windowed(mr) => Some(mr.as_ref()),
            BufMrs::Pair(_) => None,
        }
    }

    /// The address peers use for the first byte.
    pub fn token_addr(&self) -> u64 {
        match &self.mrs {
            BufMrs::Pair(p) => p.get.addr(),
            BufMrs::Windowed(mr) => mr.addr(),
        }
    }

    /// The staging buffer's address, for a staged buffer.
    pub fn staging_addr(&self) -> Option<usize> {
        self.staging.as_ref().map(|s| s.addr())
    }

    /// Checks that `[offset, offset + size)` lies inside the buffer, without
    /// computing the sum.
    pub fn check_range(&self, offset: usize, size: usize) -> Result<()> {
        if offset > self.len || size > self.len - offset {
            return Err(Error::invalid(format!(
                "bytes {offset}..+{size} run past the end of the {}-byte buffer at {:#x}",
                self.len, self.addr
            )));
        }
        Ok(())
    }
}

/// The registered buffers.
#[derive(Debug, Default)]
pub struct BufferMap {
    map: RwLock<BTreeMap<usize, Arc<BufEntry>>>,
}

impl BufferMap {
    /// The buffer registered at exactly `addr`.
    pub fn find(&self, addr: usize) -> Result<Arc<BufEntry>> {
        let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
        map.get(&addr).cloned().ok_or_else(|| {
            Error::new(
                ErrorKind::BufNotRegistered,
                format!("no buffer is registered at {addr:#x}"),
            )
        })
    }

    fn check_free_locked(map: &BTreeMap<usize, Arc<BufEntry>>, addr: usize, len: usize) -> Result<()> {
        if map.contains_key(&addr) {
            return Err(Error::new(
                ErrorKind::BufAlreadyRegistered,
                format!("a buffer is already registered at {addr:#x}"),
            ));
        }
        let end = addr.saturating_add(len);
        if let Some((_, e)) = map.range(..end).next_back()
            && e.addr.saturating_add(e.len) > addr
        {
            return Err(Error::new(
                ErrorKind::BufAlreadyRegistered,
                format!(
                    "{addr:#x}+{len} overlaps the buffer registered at {:#x}+{}",
                    e.addr, e.len
                ),
            ));
        }
        if map.len() >= MAX_BUFFERS {
            return Err(Error::new(
                ErrorKind::SizeTooLarge,
                format!("{MAX_BUFFERS} buffers are already registered, the most there can be"),
            ));
        }
        Ok(())
    }

    /// Checks, before registering anything, that `[addr, addr + len)` could
    /// be added.
    pub fn check_free(&self, addr: usize, len: usize) -> Result<()> {
        let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
        Self::check_free_locked(&map, addr, len)
    }

    /// Adds a registered buffer. If another thread registered an overlapping
    /// one meanwhile, the entry is returned to be released by the caller.
    pub fn insert(&self, entry: BufEntry) -> std::result::Result<(), (Error, BufEntry)> {
        let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = Self::check_free_locked(&map, entry.addr, entry.len) {
            return Err((e, entry));
        }
        map.insert(entry.addr, Arc::new(entry));
        Ok(())
    }

    /// Removes the buffer at `addr` unless anything else still holds it (a
    /// call in progress, or a staging copy that timed out).
    pub fn remove(&self, addr: usize) -> Result<Arc<BufEntry>> {
        let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
        let Some(entry) = map.get(&addr) else {
            return Err(Error::new(
                ErrorKind::BufNotRegistered,
                format!("no buffer is registered at {addr:#x}"),
            ));
        };
        // Copies of the entry are only made under this lock, so the count
        // cannot grow while we hold it.
        if Arc::strong_count(entry) > 1 {
            return Err(Error::busy(format!(
                "the buffer at {addr:#x} is in use by another call or a staging copy"
            )));
        }
        map.remove(&addr)
            .ok_or_else(|| Error::new(ErrorKind::InternalError, "buffer vanished"))
    }

    /// How many buffers are registered.
    pub fn len(&self) -> usize {
        self.map.read().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Whether no buffer is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
