//! Registrations of memory that Python objects export, and the transfers
//! that a Python object's `send_request` / `recv_reply` drive.
//!
//! This is the extension's only module with `unsafe`: registering memory
//! promises the core that it stays allocated while registered, and that
//! promise rests on what this module keeps alive (the buffer export, or the
//! Python layer's finalizer; see [`Registration`]).
#![allow(unsafe_code)]

use std::sync::{Mutex, PoisonError};

use hipobj::{Control, ControlError, Direction, ErrorKind};
use hipobj_platform::MemRegion;
use std::ffi::{c_char, c_int, c_void};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::{Client, core_err, own_err};

/// `Py_buffer`, as CPython has laid it out since 3.3. pyo3's abi3 build
/// leaves the buffer protocol out before 3.11 (it joined the limited API
/// then), but `PyObject_GetBuffer` and `PyBuffer_Release` are exported by
/// every CPython 3 and this layout has not changed, so the abi3 wheel
/// declares them itself to serve 3.9 and 3.10 too.
#[repr(C)]
struct RawBuffer {
    buf: *mut c_void,
    obj: *mut ffi::PyObject,
    len: isize,
    itemsize: isize,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut isize,
    strides: *mut isize,
    suboffsets: *mut isize,
    internal: *mut c_void,
}

unsafe extern "C" {
    fn PyObject_GetBuffer(obj: *mut ffi::PyObject, view: *mut RawBuffer, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut RawBuffer);
}

/// `PyBUF_C_CONTIGUOUS`: the exporter must give C-contiguous memory (with
/// strides, so multi-dimensional arrays qualify) or raise.
const PYBUF_C_CONTIGUOUS: c_int = 0x0020 | 0x0010 | 0x0008;

/// A buffer export held open: the exporter keeps the memory allocated (and
/// refuses to resize it) until it is released.
struct Export(Box<RawBuffer>);

// SAFETY: the export is only read for its address, length and flag, and
// released under the GIL (`release`, or `Drop`, which takes the GIL).
unsafe impl Send for Export {}
// SAFETY: as for Send: no method mutates it without the GIL and `&mut`.
unsafe impl Sync for Export {}

impl Export {
    /// Asks `obj` for its memory, C-contiguous.
    fn get(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let mut raw = Box::new(RawBuffer {
            buf: std::ptr::null_mut(),
            obj: std::ptr::null_mut(),
            len: 0,
            itemsize: 0,
            readonly: 0,
            ndim: 0,
            format: std::ptr::null_mut(),
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            suboffsets: std::ptr::null_mut(),
            internal: std::ptr::null_mut(),
        });
        // SAFETY: `obj` is a live object (we hold the GIL and a reference),
        // `raw` points at a zeroed Py_buffer of the right layout, and on
        // success the export is released exactly once (release or Drop).
        let rc = unsafe { PyObject_GetBuffer(obj.as_ptr(), &raw mut *raw, PYBUF_C_CONTIGUOUS) };
        if rc != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        Ok(Self(raw))
    }

    fn addr(&self) -> usize {
        self.0.buf as usize
    }

    fn len(&self) -> usize {
        usize::try_from(self.0.len).unwrap_or(0)
    }

    fn readonly(&self) -> bool {
        self.0.readonly != 0
    }

    fn release(self, _py: Python<'_>) {
        drop(self);
    }
}

impl Drop for Export {
    fn drop(&mut self) {
        Python::with_gil(|_py| {
            // SAFETY: the export was obtained by a successful
            // PyObject_GetBuffer and is released once, here, with the GIL.
            unsafe { PyBuffer_Release(&raw mut *self.0) }
        });
    }
}

/// `(address, bytes, readonly)` of the C-contiguous memory `obj` exports.
#[pyfunction]
pub(crate) fn buffer_info(obj: &Bound<'_, PyAny>) -> PyResult<(usize, usize, bool)> {
    let buf = Export::get(obj)?;
    let info = (buf.addr(), buf.len(), buf.readonly());
    buf.release(obj.py());
    Ok(info)
}

/// What keeps a registration registered.
enum Held {
    /// Host memory, through the core's safe API (usable by hipobj-s3).
    Host(hipobj::Registration<'static>),
    /// GPU memory: the instance's registration, deregistered by
    /// [`Registration::release`].
    Raw,
}

/// One registered range of memory.
///
/// The registration owns a strong reference to the object whose memory it
/// covers (`owner`), dropped only after the memory is deregistered, so the
/// exporter cannot be freed while the NIC may touch its memory, whatever
/// the Python code does with its own references. `export` (when kept)
/// also holds the exporter's buffer, so the object cannot resize it either.
/// A raw registration (`raw`) holds the owner it is given (the Python
/// layer passes the torch storage or the DLPack capsule); an address with
/// no owner is the caller's promise, as in C.
#[pyclass(module = "hipobj._native", name = "Registration", frozen)]
pub(crate) struct Registration {
    client: hipobj::Client,
    addr: usize,
    len: usize,
    readonly: bool,
    device: bool,
    held: Mutex<Option<Held>>,
    export: Mutex<Option<Export>>,
    owner: Mutex<Option<Py<PyAny>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A transfer's S3 side, played by a Python object.
struct PyControl<'a> {
    obj: &'a Py<PyAny>,
    failure: Option<PyErr>,
}

impl PyControl<'_> {
    fn fail(&mut self, e: PyErr) -> ControlError {
        let msg = Python::with_gil(|py| {
            e.value(py)
                .str()
                .map(|s| s.to_string())
                .unwrap_or_else(|_| "a Python exception".into())
        });
        self.failure = Some(e);
        ControlError(msg)
    }
}

impl Control for PyControl<'_> {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        let r = Python::with_gil(|py| self.obj.call_method1(py, "send_request", (token,)).map(drop));
        r.map_err(|e| self.fail(e))
    }

    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        let r: PyResult<Vec<u8>> = Python::with_gil(|py| {
            let v = self.obj.call_method0(py, "recv_reply")?;
            let v = v.bind(py);
            if let Ok(s) = v.downcast::<PyString>() {
                Ok(s.to_cow()?.as_bytes().to_vec())
            } else if let Ok(b) = v.downcast::<PyBytes>() {
                Ok(b.as_bytes().to_vec())
            } else if v.is_none() {
                Ok(Vec::new())
            } else {
                Err(pyo3::exceptions::PyTypeError::new_err(
                    "recv_reply must return str, bytes or None",
                ))
            }
        });
        let bytes = r.map_err(|e| self.fail(e))?;
        let n = bytes.len().min(reply.len());
        reply[..n].copy_from_slice(&bytes[..n]);
        Ok(n)
    }
}

impl Registration {
    fn check_live(&self, py: Python<'_>) -> PyResult<()> {
        if lock(&self.held).is_some() {
            Ok(())
        } else {
            Err(own_err(
                py,
                ErrorKind::BufNotRegistered,
                "the registration was released",
            ))
        }
    }

    /// Runs `f` on the core registration of host memory (for hipobj-s3),
    /// with the GIL released.
    pub(crate) fn with_host<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut hipobj::Registration<'static>) -> R + Send,
    ) -> PyResult<R> {
        py.allow_threads(|| {
            let mut held = lock(&self.held);
            match held.as_mut() {
                Some(Held::Host(reg)) => Ok(f(reg)),
                Some(Held::Raw) => Err(ErrorKind::InvalidValue),
                None => Err(ErrorKind::BufNotRegistered),
            }
        })
        .map_err(|k| match k {
            ErrorKind::BufNotRegistered => own_err(py, k, "the registration was released"),
            _ => own_err(
                py,
                k,
                "the built-in S3 client moves host memory registered from a buffer object only",
            ),
        })
    }

    /// Refuses a GET into read-only memory.
    pub(crate) fn check_writable(&self, py: Python<'_>) -> PyResult<()> {
        if self.readonly {
            return Err(own_err(
                py,
                ErrorKind::InvalidValue,
                "a GET needs writable memory; this buffer is read-only",
            ));
        }
        Ok(())
    }

    fn transfer(
        &self,
        py: Python<'_>,
        dir: Direction,
        offset: usize,
        len: usize,
        control: Py<PyAny>,
    ) -> PyResult<()> {
        self.check_live(py)?;
        if dir == Direction::Get {
            self.check_writable(py)?;
        }
        let mut ctl = PyControl {
            obj: &control,
            failure: None,
        };
        let instance = self.client.instance();
        let addr = self.addr;
        let outcome = py.allow_threads(|| instance.transfer(dir, addr, len, offset, &mut ctl));
        match outcome {
            Ok(()) => Ok(()),
            Err(e) => {
                let err = core_err(py, &e);
                if let Some(cause) = ctl.failure.take() {
                    err.set_cause(py, Some(cause));
                }
                Err(err)
            }
        }
    }
}

#[pymethods]
impl Registration {
    /// Registers the buffer `obj` exports (unsigned bytes, C-contiguous).
    /// `keep`: hold the export (and so the object) until released.
    #[staticmethod]
    fn host(py: Python<'_>, client: &Client, obj: &Bound<'_, PyAny>, keep: bool) -> PyResult<Self> {
        let buf = Export::get(obj)?;
        let (addr, len, readonly) = (buf.addr(), buf.len(), buf.readonly());
        if len == 0 {
            return Err(own_err(py, ErrorKind::InvalidValue, "the buffer size is 0"));
        }
        if len as u64 > hipobj::MAX_BUFFER_SIZE {
            return Err(own_err(
                py,
                ErrorKind::SizeTooLarge,
                format!("{len} bytes is over the 4 GiB limit of one registration"),
            ));
        }
        // SAFETY: `addr..addr+len` is the live, contiguous memory of a buffer
        // export. It stays allocated until the registration is dropped:
        // `owner` below holds the exporter (and `export`, when kept, the
        // export itself) until `release` or `Drop` has deregistered the
        // memory first (see the type's docs). The slice is
        // used only for its address and length: the core reads and writes
        // the memory through the NIC, or through `Registration::bytes_mut`
        // in hipobj-s3's HTTP fallback, while a transfer holds the object.
        let slice: &'static mut [u8] =
            unsafe { std::slice::from_raw_parts_mut(std::ptr::with_exposed_provenance_mut(addr), len) };
        let client = client.inner.clone();
        let reg = py.allow_threads(|| {
            // SAFETY: as for `slice`: this registration is dropped (by
            // `release` or `Drop`) before `owner`, which it holds, lets the
            // memory go.
            unsafe { client.register_borrowed(slice) }
        });
        let reg = match reg {
            Ok(r) => r,
            Err(e) => {
                buf.release(py);
                return Err(core_err(py, &e));
            }
        };
        let export = if keep {
            Some(buf)
        } else {
            buf.release(py);
            None
        };
        Ok(Self {
            client,
            addr,
            len,
            readonly,
            device: false,
            held: Mutex::new(Some(Held::Host(reg))),
            export: Mutex::new(export),
            owner: Mutex::new(Some(obj.clone().unbind())),
        })
    }

    /// Registers `len` bytes at `addr`: GPU memory (`device`) goes to the
    /// library's GPU runtime, host memory is registered as host memory.
    /// `owner` (a torch storage, a DLPack capsule) is held until the memory
    /// is deregistered; the caller promises that holding it keeps the
    /// memory allocated (without an owner: that it stays allocated until
    /// released).
    #[staticmethod]
    #[pyo3(signature = (client, addr, len, device, readonly=false, owner=None))]
    fn raw(
        py: Python<'_>,
        client: &Client,
        addr: usize,
        len: usize,
        device: bool,
        readonly: bool,
        owner: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        if addr == 0 || len == 0 {
            return Err(own_err(
                py,
                ErrorKind::InvalidValue,
                "a null address or a size of 0",
            ));
        }
        let client = client.inner.clone();
        if !device {
            if len as u64 > hipobj::MAX_BUFFER_SIZE {
                return Err(own_err(
                    py,
                    ErrorKind::SizeTooLarge,
                    format!("{len} bytes is over the 4 GiB limit of one registration"),
                ));
            }
            // Host memory goes through the core's safe registration, as a
            // buffer export does, so that the built-in S3 client (and its
            // plain-HTTP fallback) can move it too.
            // SAFETY: the caller's promise (the Python layer holds the
            // producer's storage or DLPack capsule for as long as this
            // registration lives) that `addr..addr+len` is allocated host
            // memory that outlives the registration, as with
            // hipObjBufRegister in C. The slice is used as in `host`.
            let slice: &'static mut [u8] =
                unsafe { std::slice::from_raw_parts_mut(std::ptr::with_exposed_provenance_mut(addr), len) };
            let reg = py
                .allow_threads(|| {
                    // SAFETY: as for `slice`: the registration is dropped
                    // before the producer's storage is let go.
                    unsafe { client.register_borrowed(slice) }
                })
                .map_err(|e| core_err(py, &e))?;
            return Ok(Self {
                client,
                addr,
                len,
                readonly,
                device,
                held: Mutex::new(Some(Held::Host(reg))),
                export: Mutex::new(None),
                owner: Mutex::new(owner),
            });
        }
        // SAFETY: the caller's promise, as above, for GPU memory.
        let region = unsafe { MemRegion::new(addr, len) };
        let inst = client.instance().clone();
        py.allow_threads(|| inst.register_device(region))
            .map_err(|e| core_err(py, &e))?;
        Ok(Self {
            client,
            addr,
            len,
            readonly,
            device,
            held: Mutex::new(Some(Held::Raw)),
            export: Mutex::new(None),
            owner: Mutex::new(owner),
        })
    }

    /// GET `len` bytes into `offset`, driven by `control`.
    fn get(&self, py: Python<'_>, offset: usize, len: usize, control: Py<PyAny>) -> PyResult<()> {
        self.transfer(py, Direction::Get, offset, len, control)
    }

    /// PUT `len` bytes from `offset`, driven by `control`.
    fn put(&self, py: Python<'_>, offset: usize, len: usize, control: Py<PyAny>) -> PyResult<()> {
        self.transfer(py, Direction::Put, offset, len, control)
    }

    /// Deregisters (waiting for transfers on it to end) and lets go of the
    /// buffer export. Releasing twice does nothing.
    fn release(&self, py: Python<'_>) {
        let inst = self.client.instance().clone();
        let addr = self.addr;
        py.allow_threads(|| {
            let held = lock(&self.held).take();
            if let Some(Held::Raw) = held {
                loop {
                    match inst.deregister(addr) {
                        Err(e) if e.kind() == ErrorKind::Busy => std::thread::yield_now(),
                        _ => break,
                    }
                }
            }
            // A host registration deregisters in its drop, here.
            drop(held);
        });
        if let Some(buf) = lock(&self.export).take() {
            buf.release(py);
        }
        // The memory is deregistered: its owner may go now.
        drop(lock(&self.owner).take());
    }

    /// The object this registration keeps alive (None once released).
    #[getter]
    fn owner(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        lock(&self.owner).as_ref().map(|o| o.clone_ref(py))
    }

    #[getter]
    fn addr(&self) -> usize {
        self.addr
    }

    #[getter]
    fn nbytes(&self) -> usize {
        self.len
    }

    #[getter]
    fn readonly(&self) -> bool {
        self.readonly
    }

    #[getter]
    fn device(&self) -> bool {
        self.device
    }

    #[getter]
    fn released(&self) -> bool {
        lock(&self.held).is_none()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let held = self.held.get_mut().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(Held::Raw) = held {
            // Nothing can be transferring: a transfer holds a reference to
            // this object.
            let _ = self.client.instance().deregister(self.addr);
        }
        drop(held);
        // An export left here is released by its own drop (which takes
        // the GIL), and the owner by pyo3 (at once with the GIL, else at the
        // next point it is taken), both after the registration above is
        // gone: fields drop after this body.
    }
}
