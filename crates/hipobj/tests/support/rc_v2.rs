//! A hipobj-rc-v2 server double on a soft NIC, at the level of the values
//! the control requests carry (no HTTP): PREPARE makes a QP and a staging
//! buffer per session, READY connects it and moves the bytes with one
//! WRITE WITH IMMEDIATE carrying the cookie, as docs/protocol.md §9 has it.
//! Knobs let it misbehave the ways a hostile or broken server could.
#![allow(
    dead_code,
    clippy::unwrap_used,
    unsafe_code,
    clippy::type_complexity,
    clippy::too_many_arguments
)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hipobj_platform::rc::{self, RcPath};
use hipobj_platform::{
    AccessFlags, CompletionQueue, Device, Gid, MemRegion, MemoryRegion, NoTopology, ProtectionDomain,
    QpInitAttr, QueuePair, RecvWr, SendOp, SendWr, Sge, Verbs, WcOpcode, WcStatus, WorkCompletion,
};
use hipobj_proto::rc_v2::{
    self, CancelRequest, Cookie, PrepareRequest, PrepareResponse, Psn, ReadyRequest, ReadyResponse, SessionId,
};
use hipobj_proto::{Token, Transport};

/// How the double misbehaves.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Misbehave {
    /// GET: the immediate value is the cookie plus one.
    pub wrong_imm: bool,
    /// GET: writes one byte fewer than asked (and says so honestly).
    pub short_write: bool,
    /// READY: echoes another cookie.
    pub wrong_echo: bool,
    /// READY: claims one byte more than the size.
    pub overcount: bool,
    /// GET: answers READY 200 without writing anything.
    pub no_write: bool,
    /// READY: carries the CRC-64/NVME of the staging buffer's bytes.
    pub checksum: bool,
    /// READY: carries a checksum one bit off the bytes'.
    pub wrong_checksum: bool,
}

struct Session {
    op: String,
    key: String,
    offset: u64,
    size: u64,
    cookie: u32,
    client_psn: u32,
    server_psn: u32,
    peer_gid: Gid,
    qp: Box<dyn QueuePair>,
    cq: Arc<dyn CompletionQueue>,
    mr: Box<dyn MemoryRegion>,
    staging: &'static mut [u8],
}

/// The double.
pub(crate) struct V2Server {
    device: Arc<dyn Device>,
    pd: Arc<dyn ProtectionDomain>,
    selection: hipobj_platform::selection::Selection,
    pub objects: Mutex<HashMap<String, Vec<u8>>>,
    sessions: Mutex<HashMap<SessionId, Session>>,
    next: Mutex<u64>,
    pub misbehave: Mutex<Misbehave>,
    /// Sessions ended by CANCEL.
    pub cancelled: Mutex<Vec<SessionId>>,
    /// After each transfer: the session's QP and the client's buffer, kept
    /// for a late write ([`V2Server::write_late`]).
    last: Mutex<
        Option<(
            Box<dyn QueuePair>,
            Arc<dyn CompletionQueue>,
            Box<dyn MemoryRegion>,
            u64,
            u32,
        )>,
    >,
}

impl V2Server {
    pub(crate) fn open(verbs: &dyn Verbs, name: &str) -> Self {
        let (device, selection) =
            hipobj_platform::selection::select(verbs, &NoTopology, None, Some(name)).unwrap();
        let pd = device.alloc_pd().unwrap();
        Self {
            device,
            pd,
            selection,
            objects: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            next: Mutex::new(1),
            misbehave: Mutex::new(Misbehave::default()),
            cancelled: Mutex::new(Vec::new()),
            last: Mutex::new(None),
        }
    }

    /// Open sessions.
    pub(crate) fn open_sessions(&self) -> usize {
        self.sessions.lock().unwrap().len()
    }

    /// One control request, as headers in and out: what an HTTP front
    /// would hand over after checking the signature.
    pub(crate) fn handle<S: AsRef<str>>(
        &self,
        path: &str,
        headers: &[(S, String)],
    ) -> (u16, Vec<(&'static str, String)>) {
        let h = || headers.iter().map(|(n, v)| (n.as_ref(), v.as_bytes()));
        match path {
            rc_v2::PREPARE_PATH => match PrepareRequest::from_headers(h()) {
                Ok(r) => match self.prepare(&r) {
                    Ok(a) => (200, a.to_headers()),
                    Err(status) => (status, Vec::new()),
                },
                Err(e) => (e.status().code(), Vec::new()),
            },
            rc_v2::READY_PATH => match ReadyRequest::from_headers(h()) {
                Ok(r) => match self.ready(&r) {
                    (200, Some(a)) => (200, a.to_headers()),
                    (status, _) => (status, Vec::new()),
                },
                Err(e) => (e.status().code(), Vec::new()),
            },
            rc_v2::CANCEL_PATH => match CancelRequest::from_headers(h()) {
                Ok(r) => (self.cancel(r.session), Vec::new()),
                Err(e) => (e.status().code(), Vec::new()),
            },
            _ => (404, Vec::new()),
        }
    }

    /// PREPARE: `Err(status)` or the answer.
    pub(crate) fn prepare(&self, r: &PrepareRequest) -> Result<PrepareResponse, u16> {
        let op = r.op.as_str();
        let token = &r.token;
        let psn = r.psn.get();
        let cookie = r.cookie.get();
        let key = r.target.key();
        let size = r.size.get_u64();
        let offset = r.offset.unwrap_or(0);
        if token.transport != Transport::Rc {
            return Err(400);
        }
        if op == "GET" {
            let objects = self.objects.lock().unwrap();
            let obj = objects.get(key).ok_or(404u16)?;
            if offset + size > obj.len() as u64 {
                return Err(416);
            }
        }
        let staging: &'static mut [u8] = Box::leak(vec![0u8; size as usize].into_boxed_slice());
        if op == "GET" {
            let objects = self.objects.lock().unwrap();
            let obj = &objects[key];
            staging.copy_from_slice(&obj[offset as usize..(offset + size) as usize]);
        }
        // SAFETY: leaked memory, owned by the session for the rest of the run.
        let region = unsafe { MemRegion::new(staging.as_mut_ptr() as usize, staging.len()) };
        let mr = self
            .pd
            .reg_mr(region, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
            .unwrap();
        let cq = self.device.create_cq(16).unwrap();
        let qp = self
            .pd
            .create_qp(&QpInitAttr {
                send_cq: cq.clone(),
                recv_cq: cq.clone(),
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                sq_sig_all: false,
            })
            .unwrap();
        rc::to_init(
            qp.as_ref(),
            self.selection.port,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
        let n = {
            let mut n = self.next.lock().unwrap();
            *n += 1;
            *n
        };
        let id = SessionId((u128::from(n) * 0x9e37_79b9_7f4a_7c15).to_be_bytes());
        let server_psn = 0x00ab_cd00 | (n as u32 & 0xff);
        let answer = PrepareResponse {
            session: id,
            token: Token {
                transport: Transport::Rc,
                qpn: qp.qp_num(),
                gid: self.selection.gid.0,
                rkey: mr.rkey(),
                addr: mr.addr(),
                len: size,
                port: self.selection.port,
                lid: 0,
            },
            psn: Psn::new(server_psn).unwrap(),
            multipart: false,
        };
        self.sessions.lock().unwrap().insert(
            id,
            Session {
                op: op.to_owned(),
                key: key.to_owned(),
                offset,
                size,
                cookie,
                client_psn: psn,
                server_psn,
                peer_gid: Gid(token.gid),
                qp,
                cq,
                mr,
                staging,
            },
        );
        Ok(answer)
    }

    /// READY: connects and moves the bytes; blocks until done (a PUT waits
    /// for the client's write).
    pub(crate) fn ready(&self, r: &ReadyRequest) -> (u16, Option<ReadyResponse>) {
        let fail = |status| (status, None);
        let cookie = r.cookie.get();
        let Some((mr, qpn)) = r.client_mr else {
            return fail(400);
        };
        let qpn = qpn.get();
        let buf = (mr.rkey != 0).then_some((mr.addr, mr.rkey));
        let Some(s) = self.sessions.lock().unwrap().remove(&r.session) else {
            return fail(409);
        };
        if s.cookie != cookie {
            return fail(403);
        }
        let m = *self.misbehave.lock().unwrap();
        let path = RcPath {
            port: self.selection.port,
            sgid_index: u8::try_from(self.selection.gid_index).unwrap(),
            mtu: self.selection.mtu,
            dest_qpn: qpn,
            dgid: s.peer_gid,
            rq_psn: s.client_psn,
            sq_psn: s.server_psn,
            max_dest_rd_atomic: 0,
            max_rd_atomic: 1,
        };
        let limits = hipobj_platform::vendor::QpLimits::new(
            &self.device.attr().unwrap(),
            &self.device.query_port(self.selection.port).unwrap(),
        );
        rc::to_rts(
            s.qp.as_ref(),
            &path,
            hipobj_platform::vendor::VendorProfile::for_vendor(None),
            &limits,
        )
        .unwrap();
        let want_op = if s.op == "PUT" {
            let sge = Sge {
                addr: s.mr.addr(),
                length: s.size as u32,
                lkey: s.mr.lkey(),
            };
            s.qp.post_recv(&RecvWr {
                wr_id: 7,
                sg_list: &[sge],
            })
            .unwrap();
            WcOpcode::RecvRdmaWithImm
        } else {
            if m.no_write {
                return (200, Some(answer(s.cookie, s.size)));
            }
            let Some((addr, rkey)) = buf else {
                return fail(400);
            };
            let len = if m.short_write { s.size - 1 } else { s.size };
            let imm = if m.wrong_imm {
                s.cookie.wrapping_add(1)
            } else {
                s.cookie
            };
            s.qp.post_send(&SendWr {
                wr_id: 8,
                op: SendOp::WriteWithImm {
                    remote_addr: addr,
                    rkey,
                    imm,
                },
                sg_list: &[Sge {
                    addr: s.mr.addr(),
                    length: len as u32,
                    lkey: s.mr.lkey(),
                }],
                signaled: true,
            })
            .unwrap();
            WcOpcode::RdmaWrite
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut wc = [WorkCompletion::EMPTY; 1];
        let c = loop {
            if s.cq.poll(&mut wc).unwrap() > 0 {
                break wc[0];
            }
            if Instant::now() > deadline {
                return fail(408);
            }
            let _ = s.cq.wait(Duration::from_millis(50));
        };
        let ok = c.status == WcStatus::Success
            && c.opcode == want_op
            && (s.op == "GET" || (c.imm_data == Some(s.cookie) && u64::from(c.byte_len) == s.size));
        if !ok {
            return fail(500);
        }
        let mut moved = s.size;
        if s.op == "PUT" {
            self.objects
                .lock()
                .unwrap()
                .insert(s.key.clone(), s.staging.to_vec());
        } else if m.short_write {
            moved = s.size - 1;
        }
        let _ = s.offset;
        let crc = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Nvme, &s.staging[..s.size as usize]);
        if let Some((addr, rkey)) = buf {
            *self.last.lock().unwrap() = Some((s.qp, s.cq, s.mr, addr, rkey));
        }
        let mut a = answer(
            if m.wrong_echo { s.cookie ^ 1 } else { s.cookie },
            if m.overcount { moved + 1 } else { moved },
        );
        if m.checksum || m.wrong_checksum {
            let bit = u64::from(m.wrong_checksum);
            a.checksum_crc64nvme = Some(hipobj_proto::rc_v2::Crc64Nvme(crc ^ bit));
        }
        (200, Some(a))
    }

    /// CANCEL: always 204.
    pub(crate) fn cancel(&self, id: SessionId) -> u16 {
        if self.sessions.lock().unwrap().remove(&id).is_some() {
            self.cancelled.lock().unwrap().push(id);
        }
        204
    }

    /// Writes into the last GET's client buffer again, on the same QP, after
    /// the client finished: whether that write completed successfully.
    pub(crate) fn write_late(&self) -> bool {
        let last = self.last.lock().unwrap();
        let Some((qp, cq, mr, addr, rkey)) = last.as_ref() else {
            panic!("no GET yet");
        };
        qp.post_send(&SendWr {
            wr_id: 9,
            op: SendOp::Write {
                remote_addr: *addr,
                rkey: *rkey,
            },
            sg_list: &[Sge {
                addr: mr.addr(),
                length: 1,
                lkey: mr.lkey(),
            }],
            signaled: true,
        })
        .is_ok_and(|()| {
            let deadline = Instant::now() + Duration::from_secs(20);
            let mut wc = [WorkCompletion::EMPTY; 1];
            loop {
                if cq.poll(&mut wc).unwrap() > 0 {
                    return wc[0].status == WcStatus::Success;
                }
                if Instant::now() > deadline {
                    return false;
                }
                let _ = cq.wait(Duration::from_millis(50));
            }
        })
    }
}

fn answer(cookie: u32, bytes: u64) -> ReadyResponse {
    ReadyResponse {
        cookie: Cookie::new(cookie).unwrap(),
        bytes,
        etag: None,
        version_id: None,
        checksum_crc64nvme: None,
    }
}
