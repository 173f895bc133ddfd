//! The target's half of hipobj-rc-v2 on the soft NIC, against a bare
//! client QP driven through the verbs seam (the role the upstream data
//! client plays): GET in several chunks ending in the cookie, PUT into the
//! staging buffer, and the refusals a client or another key can provoke.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use hipobj_platform::fake::ClientQp;
use hipobj_platform::rc::{self, RcPath};
use hipobj_platform::vendor::{QpLimits, VendorProfile};
use hipobj_platform::{Gid, NoTopology, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion};
use hipobj_proto::rc_v2::{
    Cookie, Direction, ObjectPath as Path, PrepareRequest, PrepareResponse, Psn, Qpn, ReadyRequest, RemoteMr,
    Size, Status,
};
use hipobj_proto::{Token, Transport};
use hipobj_softroce::{SoftConfig, SoftVerbs};
use hipobj_target::rc_v2::{V2Config, V2Failure, V2Sessions};
use hipobj_target::{Caller, Request, Selected, Sink, Source, Target, TargetConfig};

fn soft(name: &str) -> Arc<SoftVerbs> {
    Arc::new(SoftVerbs::new(SoftConfig {
        name: name.into(),
        ..SoftConfig::default()
    }))
}

/// A client QP on its own soft device, with a registered buffer.
struct Client(ClientQp);

impl std::ops::Deref for Client {
    type Target = ClientQp;
    fn deref(&self) -> &ClientQp {
        &self.0
    }
}

impl Client {
    fn new(name: &str, len: usize) -> Self {
        Self(ClientQp::new(soft(name), name, len))
    }

    fn prepare(&self, op: Direction, size: u64, cookie: u32) -> PrepareRequest {
        PrepareRequest {
            op,
            target: Path::new("bkt", "obj").unwrap(),
            size: Size::new(size).unwrap(),
            offset: None,
            token: Token {
                transport: Transport::Rc,
                qpn: self.qp.qp_num(),
                gid: self.sel.gid.0,
                rkey: 0,
                addr: 0,
                len: 0,
                port: self.sel.port,
                lid: 0,
            },
            psn: Psn::new(1).unwrap(),
            cookie: Cookie::new(cookie).unwrap(),
            client_mr: None,
            part: None,
        }
    }

    fn ready(&self, resp: &PrepareResponse, cookie: u32) -> ReadyRequest {
        ReadyRequest {
            session: resp.session,
            cookie: Cookie::new(cookie).unwrap(),
            client_mr: Some((
                RemoteMr {
                    addr: self.buf.addr(),
                    rkey: self.buf.mr().rkey(),
                },
                Qpn::new(self.qp.qp_num()).unwrap(),
            )),
        }
    }

    /// RTR/RTS towards the server QP of a PREPARE response.
    fn connect(&self, resp: &PrepareResponse) {
        let attr = self.device.attr().unwrap();
        let port = self.device.query_port(self.sel.port).unwrap();
        let path = RcPath {
            port: self.sel.port,
            sgid_index: self.sel.gid_index as u8,
            mtu: self.sel.mtu,
            dest_qpn: resp.token.qpn,
            dgid: Gid(resp.token.gid),
            rq_psn: resp.psn.get(),
            sq_psn: 1,
            max_dest_rd_atomic: 1,
            max_rd_atomic: 1,
        };
        rc::to_rts(
            self.qp.as_ref(),
            &path,
            VendorProfile::Generic,
            &QpLimits::new(&attr, &port),
        )
        .unwrap();
    }

    /// The PUT's one write: `len` bytes of the buffer into the staging buffer.
    fn write_with_imm(&self, resp: &PrepareResponse, len: u32, imm: u32) {
        let sge = self.buf.sge(0, len).unwrap();
        self.qp
            .post_send(&SendWr {
                wr_id: 9,
                op: SendOp::WriteWithImm {
                    remote_addr: resp.token.addr,
                    rkey: resp.token.rkey,
                    imm,
                },
                sg_list: &[sge],
                signaled: true,
            })
            .unwrap();
    }

    fn completion(&self, within: Duration) -> Option<WorkCompletion> {
        let deadline = Instant::now() + within;
        let mut wc = [WorkCompletion::EMPTY; 1];
        while Instant::now() < deadline {
            if self.cq.poll(&mut wc).unwrap() == 1 {
                return Some(wc[0]);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    }
}

struct Bytes(Vec<u8>);

impl Source for Bytes {
    type Error = ();
    fn open(&mut self) -> Result<Selected, ()> {
        Ok(Selected {
            len: self.0.len() as u64,
            partial: false,
        })
    }
    fn fill(&mut self, off: u64, buf: &mut [u8]) -> Result<(), ()> {
        let off = off as usize;
        buf.copy_from_slice(&self.0[off..off + buf.len()]);
        Ok(())
    }
}

#[derive(Default)]
struct Stored {
    data: Vec<u8>,
    committed: bool,
}

impl Sink for Stored {
    type Error = ();
    fn open(&mut self, _len: u64) -> Result<(), ()> {
        Ok(())
    }
    fn drain(&mut self, _off: u64, chunk: &[u8]) -> Result<(), ()> {
        self.data.extend_from_slice(chunk);
        Ok(())
    }
    fn commit(&mut self) -> Result<(), ()> {
        self.committed = true;
        Ok(())
    }
}

fn sessions(name: &str, config: V2Config) -> Arc<V2Sessions> {
    let t = Target::open(
        soft(name).as_ref(),
        &NoTopology,
        Some(name),
        TargetConfig::default(),
    )
    .unwrap();
    Arc::new(V2Sessions::new(Arc::new(t), config))
}

fn status<E: std::fmt::Debug>(r: Result<impl std::fmt::Debug, V2Failure<E>>) -> Status {
    match r {
        Err(V2Failure::Status(s, _)) => s,
        other => panic!("expected a status, got {other:?}"),
    }
}

fn data(n: usize) -> Vec<u8> {
    (0..n as u32).map(|i| (i.wrapping_mul(31) >> 3) as u8).collect()
}

/// A GET up to the staging limit arrives as one WRITE WITH IMMEDIATE
/// carrying the cookie and counting every byte; one over it is refused at
/// PREPARE with 413, as a PUT is (chunks would end in a write that counts
/// only its own bytes, which a client that checks the count refuses).
#[test]
fn a_get_within_the_staging_limit_is_one_write_with_the_cookie_and_one_over_it_is_413() {
    let s = sessions(
        "softroce-v2g-srv",
        V2Config {
            staging_max: 4096,
            ..V2Config::default()
        },
    );
    let c = Client::new("softroce-v2g-cli", 16_384);
    let caller = Caller::key("ak");
    for size in [4097u64, 10_000] {
        assert_eq!(
            status(s.prepare(&caller, &c.prepare(Direction::Get, size, 1), Instant::now())),
            Status::TooLarge,
            "{size}"
        );
    }
    assert_eq!(s.open_sessions(), 0, "a refused PREPARE holds nothing");
    for size in [1usize, 4096] {
        let c = Client::new("softroce-v2g-cli", 16_384);
        let caller = Caller::key("ak");
        let resp = s
            .prepare(
                &caller,
                &c.prepare(Direction::Get, size as u64, 0x1a2b_3c4d),
                Instant::now(),
            )
            .unwrap();
        assert_eq!(resp.token.len, size as u64);
        c.connect(&resp);
        let claimed = s
            .claim(&caller, &c.ready(&resp, 0x1a2b_3c4d), Instant::now())
            .unwrap();
        let want = data(size);
        let n = s.run(claimed, Request::Get(&mut Bytes(want.clone()))).unwrap();
        assert_eq!(n, size as u64);
        let wc = c
            .completion(Duration::from_secs(10))
            .expect("the GET's write with immediate");
        assert_eq!(
            (wc.status, wc.opcode),
            (WcStatus::Success, WcOpcode::RecvRdmaWithImm)
        );
        assert_eq!(wc.imm_data, Some(0x1a2b_3c4d), "the immediate is the cookie");
        let mut got = vec![0u8; size];
        assert!(c.buf.read_at(0, &mut got));
        assert_eq!(got, want, "{size} bytes");
        assert_eq!(s.open_sessions(), 0, "the session ended with the transfer");
    }
}

#[test]
fn a_put_lands_in_the_staging_buffer_and_a_late_write_lands_nowhere() {
    let s = sessions("softroce-v2p-srv", V2Config::default());
    let c = Client::new("softroce-v2p-cli", 8192);
    let caller = Caller::key("ak");
    let want = data(5000);
    assert!(c.buf.write_at(0, &want));
    let resp = s
        .prepare(
            &caller,
            &c.prepare(Direction::Put, 5000, 0x0bad_cafe),
            Instant::now(),
        )
        .unwrap();
    c.connect(&resp);
    let claimed = s
        .claim(&caller, &c.ready(&resp, 0x0bad_cafe), Instant::now())
        .unwrap();
    let runner = {
        let s = s.clone();
        std::thread::spawn(move || {
            let mut sink = Stored::default();
            let r = s.run(claimed, Request::Put(&mut sink));
            (r.map_err(|e| e.to_string()), sink)
        })
    };
    c.write_with_imm(&resp, 5000, 0x0bad_cafe);
    let wc = c
        .completion(Duration::from_secs(10))
        .expect("the PUT's send completion");
    assert_eq!(wc.status, WcStatus::Success);
    let (r, sink) = runner.join().unwrap();
    assert_eq!(r, Ok(5000));
    assert!(sink.committed);
    assert_eq!(sink.data, want);

    // The session is over: its QP left RTS, so the same write again is
    // never acknowledged and fails at the client.
    c.write_with_imm(&resp, 5000, 0x0bad_cafe);
    let late = c
        .completion(Duration::from_secs(60))
        .expect("the late write's completion");
    assert_ne!(
        late.status,
        WcStatus::Success,
        "a write after the session ended was taken"
    );
}

#[test]
fn a_put_whose_write_carries_another_immediate_or_length_is_not_stored() {
    let s = sessions("softroce-v2w-srv", V2Config::default());
    for (len, imm) in [(100u32, 0x1111_1111u32), (99, 0x2222_2222)] {
        let c = Client::new("softroce-v2w-cli", 4096);
        let caller = Caller::key("ak");
        let resp = s
            .prepare(
                &caller,
                &c.prepare(Direction::Put, 100, 0x2222_2222),
                Instant::now(),
            )
            .unwrap();
        c.connect(&resp);
        let claimed = s
            .claim(&caller, &c.ready(&resp, 0x2222_2222), Instant::now())
            .unwrap();
        let runner = {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut sink = Stored::default();
                let r = s.run(claimed, Request::Put(&mut sink));
                (status(r), sink.committed)
            })
        };
        c.write_with_imm(&resp, len, imm);
        let (st, committed) = runner.join().unwrap();
        assert_eq!(st, Status::Internal, "len {len} imm {imm:#x}");
        assert!(!committed);
    }
}

#[test]
fn sessions_belong_to_their_key_and_their_cookie() {
    let s = sessions("softroce-v2k-srv", V2Config::default());
    let c = Client::new("softroce-v2k-cli", 4096);
    let (owner, other) = (Caller::key("ak"), Caller::key("someone-else"));
    let resp = s
        .prepare(
            &owner,
            &c.prepare(Direction::Get, 64, 0x0000_0042),
            Instant::now(),
        )
        .unwrap();
    // Another key: unknown to it, and its CANCEL drops nothing.
    assert_eq!(
        status(s.claim(&other, &c.ready(&resp, 0x42), Instant::now())),
        Status::UnknownSession
    );
    s.cancel(&other, &resp.session);
    assert_eq!(s.open_sessions(), 1);
    // The owner with the wrong cookie: 403, and the session is gone.
    assert_eq!(
        status(s.claim(&owner, &c.ready(&resp, 0x43), Instant::now())),
        Status::Forbidden
    );
    assert_eq!(
        status(s.claim(&owner, &c.ready(&resp, 0x42), Instant::now())),
        Status::UnknownSession
    );
    assert_eq!(s.open_sessions(), 0);
    // CANCEL by the owner, twice: the second finds nothing and is fine.
    let resp = s
        .prepare(&owner, &c.prepare(Direction::Get, 64, 7), Instant::now())
        .unwrap();
    s.cancel(&owner, &resp.session);
    s.cancel(&owner, &resp.session);
    assert_eq!(
        status(s.claim(&owner, &c.ready(&resp, 7), Instant::now())),
        Status::UnknownSession
    );
    // A GET whose READY names no client buffer.
    let resp = s
        .prepare(&owner, &c.prepare(Direction::Get, 64, 7), Instant::now())
        .unwrap();
    let mut r = c.ready(&resp, 7);
    r.client_mr = None;
    assert_eq!(status(s.claim(&owner, &r, Instant::now())), Status::BadRequest);
}

#[test]
fn limits_a_dead_client_and_the_size_of_a_put() {
    let s = sessions(
        "softroce-v2l-srv",
        V2Config {
            max_sessions: 2,
            staging_max: 4096,
            prepare_timeout: Duration::from_millis(200),
            ..V2Config::default()
        },
    );
    let c = Client::new("softroce-v2l-cli", 4096);
    let caller = Caller::key("ak");
    // The table's clock is the caller's: these steps happen at t0 + ms.
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    assert_eq!(
        status(s.prepare(&caller, &c.prepare(Direction::Put, 4097, 1), at(0))),
        Status::TooLarge
    );
    let first = s
        .prepare(&caller, &c.prepare(Direction::Put, 4096, 1), at(0))
        .unwrap();
    s.prepare(&caller, &c.prepare(Direction::Get, 4096, 2), at(10))
        .unwrap();
    assert_eq!(
        status(s.prepare(&caller, &c.prepare(Direction::Get, 64, 3), at(20))),
        Status::Busy
    );
    // The client dies: no READY. Until its timeout a session stays; at it,
    // the session is freed (by the server's reaper, or the next PREPARE or
    // READY) and READY is too late.
    assert_eq!(s.reap(at(199)), 0);
    assert_eq!(s.open_sessions(), 2);
    assert_eq!(s.reap(at(200)), 1);
    assert_eq!(
        status(s.claim(&caller, &c.ready(&first, 1), at(200))),
        Status::UnknownSession
    );
    s.prepare(&caller, &c.prepare(Direction::Get, 64, 3), at(205))
        .unwrap();
    assert_eq!(
        s.reap(at(210)),
        1,
        "the second session's deadline was t0 + 210 ms"
    );
    assert_eq!(s.open_sessions(), 1);
}

#[test]
fn a_token_that_is_not_an_rc_client_qp_is_refused() {
    let s = sessions("softroce-v2t-srv", V2Config::default());
    let c = Client::new("softroce-v2t-cli", 4096);
    let caller = Caller::key("ak");
    let mut p = c.prepare(Direction::Get, 64, 1);
    p.token.transport = Transport::Dc;
    assert_eq!(status(s.prepare(&caller, &p, Instant::now())), Status::BadRequest);
    let mut p = c.prepare(Direction::Get, 64, 1);
    p.token.gid = [0; 16];
    assert_eq!(status(s.prepare(&caller, &p, Instant::now())), Status::BadRequest);
    assert_eq!(s.open_sessions(), 0);
}
