//! A GPU double. Its "device memory" is like a real GPU's as the host sees
//! it: an address range the process cannot read or write (mapped with no
//! access), so a NIC that checks, such as the soft NIC, refuses to register
//! it and the library stages it. The bytes live in a shared-memory file
//! that the fake also maps readable and writable for its copy engine.
//! Copies run on a thread of their own, at a speed the test sets, and can
//! be made to hang until the test releases them. (Under Miri, which cannot
//! map files, device memory is plain heap memory.)
#![allow(unsafe_code)]

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use super::faults::{Fault, Faults};
use crate::gpu::{CopyEvent, Dmabuf, GpuError, GpuRuntime, PinnedHostBuffer, PointerInfo, PointerKind};

/// Bytes that the fake's copy engine and the test write through raw
/// addresses: interior mutability makes that sound while the box is shared.
#[derive(Debug)]
struct Bytes(Box<[std::cell::UnsafeCell<u8>]>);

// SAFETY: the bytes are only reached through raw copies (the fake's copy
// engine, the test accessors), as memory shared with a device would be; a
// race between two such copies is the test's to avoid, as on a real GPU.
unsafe impl Sync for Bytes {}

impl Bytes {
    fn zeroed(len: usize) -> Self {
        Self((0..len).map(|_| std::cell::UnsafeCell::new(0)).collect())
    }

    /// The address, with write permission exposed for raw accesses.
    fn addr(&self) -> usize {
        std::cell::UnsafeCell::raw_get(self.0.as_ptr()).expose_provenance()
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// Device memory: one shared-memory file mapped twice, once with no
/// access (the address handed out) and once readable and writable (where
/// the copy engine and the test accessors reach the bytes).
#[cfg(not(miri))]
#[derive(Debug)]
struct Mapped {
    device_view: usize,
    host_view: usize,
    len: usize,
    _file: OwnedFd,
}

#[cfg(not(miri))]
impl Mapped {
    fn new(len: usize) -> Option<Self> {
        use std::os::fd::FromRawFd;
        let len = len.max(1);
        // SAFETY: memfd_create with a NUL-terminated name; the fd returned is
        // owned by the OwnedFd below.
        let fd = unsafe { libc::memfd_create(c"hipobj-fake-gpu".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: fd is a fresh, owned file descriptor.
        let file = unsafe { OwnedFd::from_raw_fd(fd) };
        let size = libc::off_t::try_from(len).ok()?;
        // SAFETY: resizing the file we own.
        if unsafe { libc::ftruncate(fd, size) } != 0 {
            return None;
        }
        let map = |prot| {
            // SAFETY: a new shared mapping of the whole file at an address
            // the kernel chooses; nothing else refers to it yet.
            let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) };
            (p != libc::MAP_FAILED).then(|| p.expose_provenance())
        };
        let device_view = map(libc::PROT_NONE)?;
        let Some(host_view) = map(libc::PROT_READ | libc::PROT_WRITE) else {
            // SAFETY: unmapping the mapping made just above.
            unsafe { libc::munmap(std::ptr::with_exposed_provenance_mut(device_view), len) };
            return None;
        };
        Some(Self {
            device_view,
            host_view,
            len,
            _file: file,
        })
    }
}

#[cfg(not(miri))]
impl Drop for Mapped {
    fn drop(&mut self) {
        for view in [self.device_view, self.host_view] {
            // SAFETY: both views were mapped by `new` with this length and
            // are unmapped once, here.
            unsafe { libc::munmap(std::ptr::with_exposed_provenance_mut(view), self.len) };
        }
    }
}

#[derive(Debug)]
enum Mem {
    Heap(Bytes),
    #[cfg(not(miri))]
    Mapped(Mapped),
}

impl Mem {
    /// The address the fake hands out.
    fn addr(&self) -> usize {
        match self {
            Mem::Heap(b) => b.addr(),
            #[cfg(not(miri))]
            Mem::Mapped(m) => m.device_view,
        }
    }

    /// Where the bytes at `addr()` can be read and written.
    fn host_addr(&self) -> usize {
        match self {
            Mem::Heap(b) => b.addr(),
            #[cfg(not(miri))]
            Mem::Mapped(m) => m.host_view,
        }
    }

    fn len(&self) -> usize {
        match self {
            Mem::Heap(b) => b.len(),
            #[cfg(not(miri))]
            Mem::Mapped(m) => m.len,
        }
    }
}

#[derive(Debug)]
struct Allocation {
    device: Option<i32>,
    mem: Mem,
}

#[derive(Debug, Default)]
struct State {
    allocations: Vec<Allocation>,
    /// The handles `stream_synchronize` was called with, in order.
    synced_streams: Vec<usize>,
}

#[derive(Debug, Default)]
struct Gate {
    hung: Mutex<bool>,
    released: Condvar,
}

#[derive(Debug)]
struct Shared {
    faults: Faults,
    live_pinned: AtomicI64,
    live_copies: AtomicI64,
    /// Nanoseconds each copy takes before it moves its bytes.
    copy_delay_ns: AtomicU64,
    gate: Gate,
    dmabuf_ok: AtomicBool,
    /// Copies whose bytes have not moved yet.
    in_flight: AtomicI64,
    /// (address, length) of each live pinned buffer.
    pinned: Mutex<Vec<(usize, usize)>>,
}

/// A GPU runtime double.
#[derive(Debug)]
pub struct FakeGpu {
    devices: i32,
    current: AtomicI32,
    state: Mutex<State>,
    shared: Arc<Shared>,
}

impl FakeGpu {
    /// A runtime with `devices` GPUs, consulting `faults` at every call.
    pub fn new(devices: i32, faults: Faults) -> Self {
        Self {
            devices,
            current: AtomicI32::new(0),
            state: Mutex::new(State::default()),
            shared: Arc::new(Shared {
                faults,
                live_pinned: AtomicI64::new(0),
                live_copies: AtomicI64::new(0),
                copy_delay_ns: AtomicU64::new(0),
                gate: Gate::default(),
                dmabuf_ok: AtomicBool::new(true),
                in_flight: AtomicI64::new(0),
                pinned: Mutex::new(Vec::new()),
            }),
        }
    }

    fn check(&self, call: &'static str) -> Result<(), GpuError> {
        match self.shared.faults.hit(call) {
            Some(Fault::Fail) => Err(GpuError::new(call, 1, "injected failure")),
            _ => Ok(()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Allocates `len` bytes of simulated memory on `device` and returns its address.
    pub fn alloc_device(&self, device: i32, len: usize) -> usize {
        #[cfg(not(miri))]
        let mem = Mapped::new(len).map_or_else(|| Mem::Heap(Bytes::zeroed(len)), Mem::Mapped);
        #[cfg(miri)]
        let mem = Mem::Heap(Bytes::zeroed(len));
        let addr = mem.addr();
        self.lock().allocations.push(Allocation {
            device: Some(device),
            mem,
        });
        addr
    }

    /// Allocates `len` bytes of pinned host memory that the fake reports as
    /// host memory, and returns its address.
    pub fn alloc_host(&self, len: usize) -> usize {
        let mem = Mem::Heap(Bytes::zeroed(len));
        let addr = mem.addr();
        self.lock().allocations.push(Allocation { device: None, mem });
        addr
    }

    /// The stream handles synchronized so far, in order.
    pub fn synced_streams(&self) -> Vec<usize> {
        self.lock().synced_streams.clone()
    }

    /// Frees an allocation made by [`FakeGpu::alloc_device`] or [`FakeGpu::alloc_host`].
    pub fn free(&self, addr: usize) {
        self.lock().allocations.retain(|a| a.mem.addr() != addr);
    }

    /// Where the bytes of `[addr, addr + len)` can be reached, if the range
    /// lies in fake device memory, fake host memory, or a live pinned buffer.
    fn host_view(&self, addr: usize, len: usize) -> Option<usize> {
        let inside = |base: usize, size: usize| addr >= base && len <= size && addr - base <= size - len;
        let st = self.lock();
        if let Some(a) = st.allocations.iter().find(|a| inside(a.mem.addr(), a.mem.len())) {
            return Some(a.mem.host_addr() + (addr - a.mem.addr()));
        }
        let pinned = self.shared.pinned.lock().unwrap_or_else(PoisonError::into_inner);
        pinned.iter().any(|&(b, l)| inside(b, l)).then_some(addr)
    }

    /// Reads memory the fake owns (device, host or pinned), or `None` when
    /// the range is not all in one of its buffers.
    pub fn read(&self, addr: usize, len: usize) -> Option<Vec<u8>> {
        let addr = self.host_view(addr, len)?;
        let mut out = vec![0u8; len];
        // SAFETY: the range lies inside a live buffer of this fake (checked
        // above), and the test that asks does not free it meanwhile.
        unsafe {
            std::ptr::copy_nonoverlapping(
                std::ptr::with_exposed_provenance::<u8>(addr),
                out.as_mut_ptr(),
                len,
            )
        };
        Some(out)
    }

    /// Writes memory the fake owns; says whether the range was inside one of
    /// its buffers.
    pub fn write(&self, addr: usize, data: &[u8]) -> bool {
        let Some(addr) = self.host_view(addr, data.len()) else {
            return false;
        };
        // SAFETY: as in `read`; the fake's buffers are plain bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                std::ptr::with_exposed_provenance_mut::<u8>(addr),
                data.len(),
            )
        };
        true
    }

    /// Waits until every copy that started has moved its bytes.
    pub fn wait_idle(&self) {
        while self.shared.in_flight.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Sets the thread's current device.
    pub fn set_current(&self, device: i32) {
        self.current.store(device, Ordering::SeqCst);
    }

    /// Makes each copy take `delay` before it moves its bytes.
    pub fn set_copy_delay(&self, delay: Duration) {
        let ns = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        self.shared.copy_delay_ns.store(ns, Ordering::SeqCst);
    }

    /// Makes copies that start from now on hang until [`FakeGpu::release`].
    pub fn hang_copies(&self) {
        *self
            .shared
            .gate
            .hung
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
    }

    /// Lets hung copies finish.
    pub fn release(&self) {
        *self
            .shared
            .gate
            .hung
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = false;
        self.shared.gate.released.notify_all();
    }

    /// Makes dma-buf export succeed or fail.
    pub fn set_dmabuf_export(&self, ok: bool) {
        self.shared.dmabuf_ok.store(ok, Ordering::SeqCst);
    }

    /// Pinned buffers handed out and not yet freed.
    pub fn live_pinned(&self) -> i64 {
        self.shared.live_pinned.load(Ordering::SeqCst)
    }

    /// Copy events handed out and not yet dropped.
    pub fn live_copies(&self) -> i64 {
        self.shared.live_copies.load(Ordering::SeqCst)
    }
}

#[derive(Debug)]
struct FakePinned {
    mem: Bytes,
    shared: Arc<Shared>,
}

impl Drop for FakePinned {
    fn drop(&mut self) {
        self.shared.live_pinned.fetch_sub(1, Ordering::SeqCst);
        let addr = self.mem.addr();
        self.shared
            .pinned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|&(a, _)| a != addr);
    }
}

impl PinnedHostBuffer for FakePinned {
    fn addr(&self) -> usize {
        self.mem.addr()
    }
    fn len(&self) -> usize {
        self.mem.len()
    }
    fn region(&self) -> crate::memory::MemRegion {
        // SAFETY: the bytes belong to this buffer and stay allocated until it
        // is dropped, which the trait requires to happen after every MR over it.
        unsafe { crate::memory::MemRegion::new(self.mem.addr(), self.mem.len()) }
    }
}

#[derive(Debug)]
struct FakeEvent {
    done: Arc<AtomicBool>,
    shared: Arc<Shared>,
}

impl Drop for FakeEvent {
    fn drop(&mut self) {
        self.shared.live_copies.fetch_sub(1, Ordering::SeqCst);
    }
}

impl CopyEvent for FakeEvent {
    fn is_done(&self) -> Result<bool, GpuError> {
        match self.shared.faults.hit("event_query") {
            Some(Fault::Fail) => Err(GpuError::new("event_query", 1, "injected failure")),
            _ => Ok(self.done.load(Ordering::SeqCst)),
        }
    }
}

impl GpuRuntime for FakeGpu {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn device_count(&self) -> Result<i32, GpuError> {
        self.check("device_count")?;
        Ok(self.devices)
    }

    fn current_device(&self) -> Result<i32, GpuError> {
        self.check("current_device")?;
        if self.devices == 0 {
            return Err(GpuError::new("current_device", 100, "no GPU"));
        }
        Ok(self.current.load(Ordering::SeqCst))
    }

    fn pci_bus_id(&self, device: i32) -> Result<String, GpuError> {
        self.check("pci_bus_id")?;
        if !(0..self.devices).contains(&device) {
            return Err(GpuError::new("pci_bus_id", 101, format!("no GPU {device}")));
        }
        Ok(format!("0000:{:02x}:00.0", 0x10 + device))
    }

    fn pointer_info(&self, addr: usize) -> Result<PointerInfo, GpuError> {
        self.check("pointer_info")?;
        let st = self.lock();
        for a in &st.allocations {
            let base = a.mem.addr();
            if addr >= base && addr - base < a.mem.len().max(1) {
                return Ok(PointerInfo {
                    kind: a.device.map_or(PointerKind::Host, PointerKind::Device),
                    allocation: Some((base, a.mem.len())),
                });
            }
        }
        Ok(PointerInfo {
            kind: PointerKind::Unknown,
            allocation: None,
        })
    }

    fn alloc_pinned(&self, len: usize) -> Result<Box<dyn PinnedHostBuffer>, GpuError> {
        self.check("alloc_pinned")?;
        self.shared.live_pinned.fetch_add(1, Ordering::SeqCst);
        let mem = Bytes::zeroed(len);
        self.shared
            .pinned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((mem.addr(), len));
        Ok(Box::new(FakePinned {
            mem,
            shared: self.shared.clone(),
        }))
    }

    fn export_dmabuf(&self, _addr: usize, _len: usize) -> Result<Dmabuf, GpuError> {
        self.check("export_dmabuf")?;
        if !self.shared.dmabuf_ok.load(Ordering::SeqCst) {
            return Err(GpuError::new(
                "export_dmabuf",
                801,
                "the fake GPU refuses to export",
            ));
        }
        let file =
            std::fs::File::open("/dev/null").map_err(|e| GpuError::new("export_dmabuf", 0, e.to_string()))?;
        Ok(Dmabuf {
            fd: OwnedFd::from(file),
            offset: 0,
        })
    }

    fn copy_async(&self, dst: usize, src: usize, len: usize) -> Result<Box<dyn CopyEvent>, GpuError> {
        self.check("copy_async")?;
        // The copy engine reaches device memory through its readable view;
        // other memory (the library's staging buffers) as it is.
        let dst = self.host_view(dst, len).unwrap_or(dst);
        let src = self.host_view(src, len).unwrap_or(src);
        let done = Arc::new(AtomicBool::new(false));
        let shared = self.shared.clone();
        let flag = done.clone();
        shared.live_copies.fetch_add(1, Ordering::SeqCst);
        shared.in_flight.fetch_add(1, Ordering::SeqCst);
        let hung_at_start = *shared.gate.hung.lock().unwrap_or_else(PoisonError::into_inner);
        let engine = shared.clone();
        std::thread::Builder::new()
            .name("fake-gpu-copy".into())
            .spawn(move || {
                let delay = engine.copy_delay_ns.load(Ordering::SeqCst);
                if delay > 0 {
                    std::thread::sleep(Duration::from_nanos(delay));
                }
                if hung_at_start {
                    let mut hung = engine.gate.hung.lock().unwrap_or_else(PoisonError::into_inner);
                    while *hung {
                        hung = engine
                            .gate
                            .released
                            .wait(hung)
                            .unwrap_or_else(PoisonError::into_inner);
                    }
                }
                // SAFETY: the library hands the fake only ranges inside
                // allocations it registered (device memory from this fake, or
                // staging buffers it keeps alive until the event reports done),
                // exactly the contract of hipMemcpyAsync; the ranges are distinct
                // buffers, so they do not overlap.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        std::ptr::with_exposed_provenance::<u8>(src),
                        std::ptr::with_exposed_provenance_mut::<u8>(dst),
                        len,
                    )
                };
                flag.store(true, Ordering::SeqCst);
                engine.in_flight.fetch_sub(1, Ordering::SeqCst);
            })
            .map_err(|e| GpuError::new("copy_async", 0, e.to_string()))?;
        Ok(Box::new(FakeEvent { done, shared }))
    }

    fn synchronize(&self) -> Result<(), GpuError> {
        self.check("synchronize")?;
        Ok(())
    }

    fn stream_synchronize(&self, stream: usize) -> Result<(), GpuError> {
        self.check("stream_synchronize")?;
        self.lock().synced_streams.push(stream);
        Ok(())
    }
}
