//! A bare client QP on any verbs backend, for tests that drive a server
//! from the other end of the wire without the client library: a QP in INIT
//! granting remote write, one empty receive posted (for a WRITE WITH
//! IMMEDIATE), and a registered buffer.

use std::sync::Arc;

use crate::memory::RegisteredBuffer;
use crate::rc;
use crate::selection::{self, Selection};
use crate::topology::NoTopology;
use crate::verbs::{AccessFlags, CompletionQueue, Device, QpInitAttr, QueuePair, RecvWr, Verbs};

/// The QP, its CQ and buffer, on the device `verbs` names.
pub struct ClientQp {
    // Field order is drop order: the buffer and the QP before the device.
    /// Registered memory with local and remote write.
    pub buf: RegisteredBuffer,
    /// The QP, in INIT until the test connects it.
    pub qp: Box<dyn QueuePair>,
    /// Its send and receive CQ.
    pub cq: Arc<dyn CompletionQueue>,
    /// The device it was made on.
    pub device: Arc<dyn Device>,
    /// Port, GID and MTU the device was selected with.
    pub sel: Selection,
    _verbs: Arc<dyn Verbs>,
}

impl std::fmt::Debug for ClientQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientQp")
            .field("qpn", &self.qp.qp_num())
            .finish()
    }
}

impl ClientQp {
    /// Opens the device `name` of `verbs` and builds the QP with a buffer
    /// of `len` bytes. Panics on any failure: this is test support.
    pub fn new(verbs: Arc<dyn Verbs>, name: &str, len: usize) -> Self {
        Self::with_access(verbs, name, len, AccessFlags::REMOTE_WRITE)
    }

    /// As [`new`](Self::new), the QP and buffer granting `remote` (remote
    /// write for a GET's target, remote read for a PUT's source) besides
    /// local write.
    pub fn with_access(verbs: Arc<dyn Verbs>, name: &str, len: usize, remote: AccessFlags) -> Self {
        Self::with_receives(verbs, name, len, remote, 1)
    }

    /// As [`with_access`](Self::with_access), with `receives` receives
    /// posted (a GET of many WRITEs WITH IMMEDIATE consumes one each).
    #[allow(clippy::expect_used)]
    pub fn with_receives(
        verbs: Arc<dyn Verbs>,
        name: &str,
        len: usize,
        remote: AccessFlags,
        receives: u32,
    ) -> Self {
        let (device, sel) = selection::select(verbs.as_ref(), &NoTopology, None, Some(name))
            .expect("selecting the client's device");
        let pd = device.alloc_pd().expect("a protection domain");
        let cq = device.create_cq(receives + 16).expect("a completion queue");
        let qp = pd
            .create_qp(&QpInitAttr {
                send_cq: cq.clone(),
                recv_cq: cq.clone(),
                max_send_wr: 4,
                max_recv_wr: receives.max(4),
                max_send_sge: 1,
                max_recv_sge: 1,
                sq_sig_all: false,
            })
            .expect("a queue pair");
        rc::to_init(qp.as_ref(), sel.port, AccessFlags::LOCAL_WRITE | remote)
            .map_err(|(_, e)| e)
            .expect("the queue pair in INIT");
        for _ in 0..receives {
            qp.post_recv(&RecvWr {
                wr_id: 7,
                sg_list: &[],
            })
            .expect("the receive for a WRITE WITH IMMEDIATE");
        }
        let buf = RegisteredBuffer::new(pd.as_ref(), len, AccessFlags::LOCAL_WRITE | remote)
            .expect("a registered buffer");
        Self {
            buf,
            qp,
            cq,
            device,
            sel,
            _verbs: verbs,
        }
    }
}
