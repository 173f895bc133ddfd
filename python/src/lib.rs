//! `hipobj._native`: the extension module under the `hipobj` Python
//! package (docs/python.md).
//!
//! It is a thin layer over the core's public API: [`hipobj::Client`] on
//! the production platform, registrations of memory a Python object
//! exports, transfers driven by a Python object's `send_request` /
//! `recv_reply` (boto3, in `hipobj/_boto3.py`), and the aws-sdk-s3
//! integration (`hipobj-s3`) as a built-in S3 client. Every transfer runs
//! with the GIL released. Caching, input checks that need Python
//! (contiguity, the allocation behind a view) and the asyncio API live in
//! the Python sources.

mod memory;
mod s3;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

// Created in module `hipobj` so that tracebacks name `hipobj.HipObjError`
// (the package re-exports it); `hipobj._errors` adds the subclasses
// (`NoSuchKey`, `AccessDenied`, ...) and the attributes' defaults.
create_exception!(
    hipobj,
    HipObjError,
    PyException,
    "A hipObject failure: `code` is the hipObjOpError_t value, `name` its C name."
);

/// The C name of an error kind (`hipObjInvalidValue`, ...).
fn kind_name(kind: hipobj::ErrorKind) -> String {
    format!("hipObj{kind:?}")
}

/// What an S3 response said about a failure.
#[derive(Default)]
pub(crate) struct S3Said {
    status: Option<u16>,
    s3_code: Option<String>,
    declined: bool,
}

/// A Python `HipObjError` (or the subclass `hipobj._errors.make` picks for
/// the S3 code) carrying `kind`'s code and name and what S3 said.
fn raise(py: Python<'_>, kind: hipobj::ErrorKind, msg: String, said: S3Said) -> PyErr {
    let made = py.import("hipobj._errors").and_then(|m| {
        m.getattr("make")?.call1((
            kind.code(),
            kind_name(kind),
            msg.clone(),
            said.status,
            said.s3_code.clone(),
            said.declined,
        ))
    });
    if let Ok(v) = made {
        return PyErr::from_value(v);
    }
    // The package's Python half is missing (the extension imported on its
    // own): the base class with every attribute set.
    let err = HipObjError::new_err(msg);
    let value = err.value(py);
    // Setting attributes on a fresh exception object cannot fail in practice;
    // if it did, the message still says what happened.
    let _ = value.setattr("code", kind.code());
    let _ = value.setattr("name", kind_name(kind));
    let _ = value.setattr("status", said.status);
    let _ = value.setattr("s3_code", said.s3_code);
    let _ = value.setattr("declined", said.declined);
    err
}

/// A core error as a Python exception.
pub(crate) fn core_err(py: Python<'_>, e: &hipobj::Error) -> PyErr {
    raise(py, e.kind(), e.to_string(), S3Said::default())
}

/// An error of `kind` raised by this module itself.
pub(crate) fn own_err(py: Python<'_>, kind: hipobj::ErrorKind, msg: impl Into<String>) -> PyErr {
    raise(py, kind, msg.into(), S3Said::default())
}

/// An initialized hipObject: a NIC, its connections, its registrations.
#[pyclass(module = "hipobj._native", name = "Client", frozen)]
pub(crate) struct Client {
    pub(crate) inner: hipobj::Client,
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (nic_hint=None, gpu_device=None))]
    fn new(py: Python<'_>, nic_hint: Option<String>, gpu_device: Option<i32>) -> PyResult<Self> {
        let built = py.allow_threads(move || {
            let mut b = hipobj::Client::builder(hipobj_system::platform());
            if let Some(h) = nic_hint {
                b = b.nic_hint(h);
            }
            if let Some(g) = gpu_device {
                b = b.gpu_device(g);
            }
            b.build()
        });
        match built {
            Ok(inner) => Ok(Self { inner }),
            Err(e) => Err(core_err(py, &e)),
        }
    }

    /// The RDMA device in use.
    #[getter]
    fn device(&self) -> String {
        self.inner.instance().chosen().selection.device.clone()
    }

    /// How many buffers are registered with the NIC right now.
    fn registered_count(&self) -> usize {
        self.inner.instance().buffers().len()
    }

    /// Waits for the GPU work queued on `stream` (a hipStream_t or CUstream
    /// handle; 0 is the default stream), with the GIL released.
    fn synchronize_stream(&self, py: Python<'_>, stream: usize) -> PyResult<()> {
        let inst = self.inner.instance().clone();
        py.allow_threads(move || inst.synchronize_stream(stream))
            .map_err(|e| core_err(py, &e))
    }

    /// RDMA connections in the pool (concurrent transfers).
    fn connections(&self) -> usize {
        self.inner.instance().pool().size()
    }

    /// Whether a transfer through this client saw the endpoint `authority`
    /// (`host:port`) speak the binding exchange, by any front end
    /// (docs/protocol.md, "A token never harms a server that ignores it").
    fn endpoint_proven(&self, authority: &str) -> bool {
        hipobj_s3::endpoint_proven(&self.inner, authority)
    }

    /// Notes that `authority` was seen to speak the binding exchange.
    fn note_endpoint_proven(&self, authority: &str) {
        hipobj_s3::note_endpoint_proven(&self.inner, authority);
    }
}

/// The registration and size limits of the library.
const MAX_BUFFERS: usize = hipobj::MAX_BUFFERS;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Client>()?;
    m.add_class::<memory::Registration>()?;
    m.add_class::<s3::S3Client>()?;
    m.add("HipObjError", m.py().get_type::<HipObjError>())?;
    m.add("MAX_BUFFERS", MAX_BUFFERS)?;
    m.add("MAX_BUFFER_SIZE", hipobj::MAX_BUFFER_SIZE)?;
    m.add_function(wrap_pyfunction!(memory::buffer_info, m)?)?;
    Ok(())
}

/// A hipobj-s3 error as a Python exception, with the S3 status and code
/// when there are some.
pub(crate) fn raise_s3(py: Python<'_>, e: &hipobj_s3::Error) -> PyErr {
    let said = S3Said {
        status: e.status(),
        s3_code: e.s3_code().map(str::to_owned),
        declined: e.is_declined(),
    };
    raise(py, e.kind(), e.to_string(), said)
}
