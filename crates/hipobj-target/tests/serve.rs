//! `Target::serve` on the soft NIC against a bare client QP driven through
//! the verbs seam (no client library): the bind, the proof WRITE WITH
//! IMMEDIATE at the end of a GET (an empty one for zero bytes), the count in
//! the success reply, and bindings that belong to one caller.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use support::soft;

use hipobj_platform::fake::ClientQp;
use hipobj_platform::vendor::VendorProfile;
use hipobj_platform::{NoTopology, RecvWr, WcOpcode, WcStatus, WorkCompletion};
use hipobj_proto::{Reply, Token};
use hipobj_softroce::SoftVerbs;
use hipobj_target::double::{Action, ObjectServer};
use hipobj_target::{Answer, Caller, Request, Selected, Source, Target, TargetConfig, TargetError};

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

    fn token(&self, len: u64) -> Token {
        support::token(self, len)
    }

    fn connect(&self, reply: &Reply) {
        support::connect(self, reply)
    }

    /// The one completion the client QP should see: the GET's proof.
    fn proof(&self) -> WorkCompletion {
        support::completion(self, Duration::from_secs(5)).expect("no completion on the client QP")
    }
}

struct Bytes<'a>(&'a [u8]);

impl Source for Bytes<'_> {
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

fn target(name: &str) -> Target {
    target_on(&soft(name), name)
}

fn target_on(verbs: &SoftVerbs, name: &str) -> Target {
    Target::open(verbs, &NoTopology, Some(name), TargetConfig::default()).unwrap()
}

fn bind(t: &Target, caller: &Caller, token: &Token) -> Reply {
    match t.serve(caller, token, Request::Get(&mut Bytes(b""))) {
        Ok(Answer::Bind {
            reply,
            after_failure: None,
        }) => reply,
        other => panic!("expected a bind: {other:?}"),
    }
}

#[test]
fn a_get_ends_with_a_write_with_immediate_carrying_the_key_and_reports_the_count() {
    let t = target("softroce-t-srv");
    let c = Client::new("softroce-t-cli", 8192);
    let caller = Caller::key("ak");
    let token = c.token(8192);
    let reply = bind(&t, &caller, &token);
    c.connect(&reply);
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    let a = t.serve(&caller, &token, Request::Get(&mut Bytes(&data))).unwrap();
    let Answer::Done {
        reply: Reply::Done {
            status,
            token: st,
            bytes,
        },
        bytes: n,
        ..
    } = a
    else {
        panic!("not a full success: {a:?}")
    };
    let Reply::Bind { token: bound, .. } = reply else {
        unreachable!()
    };
    assert_eq!((status, bytes, n, st.qpn), (200, 5000, 5000, bound.qpn));
    let wc = c.proof();
    assert_eq!(
        (wc.status, wc.opcode, wc.imm_data, wc.byte_len),
        (
            WcStatus::Success,
            WcOpcode::RecvRdmaWithImm,
            Some(token.rkey),
            5000
        )
    );
    let mut got = vec![0u8; 5000];
    assert!(c.buf.read_at(0, &mut got));
    assert_eq!(got, data);
}

#[test]
fn a_zero_byte_get_sends_one_empty_write_with_immediate() {
    let t = target("softroce-t0-srv");
    let c = Client::new("softroce-t0-cli", 4096);
    let caller = Caller::key("ak");
    let token = c.token(4096);
    c.connect(&bind(&t, &caller, &token));
    let a = t.serve(&caller, &token, Request::Get(&mut Bytes(b""))).unwrap();
    assert!(
        matches!(
            a,
            Answer::Done {
                bytes: 0,
                reply: Reply::Done { bytes: 0, .. },
                ..
            }
        ),
        "{a:?}"
    );
    let wc = c.proof();
    assert_eq!(
        (wc.status, wc.opcode, wc.imm_data, wc.byte_len),
        (WcStatus::Success, WcOpcode::RecvRdmaWithImm, Some(token.rkey), 0)
    );
}

/// A binding belongs to the access key that made it, and a client QP has
/// at most one binding. Once the victim's binding has moved bytes, another
/// key naming the victim's QP is refused: a second server QP aimed at it
/// could break it with requests out of sequence (the attack that failed
/// `another_client_cannot_ride_a_victims_binding` four runs in five). The
/// victim's binding is untouched, and a selection larger than its token is
/// refused before any byte moves.
#[test]
fn a_used_binding_belongs_to_one_caller_and_a_larger_selection_moves_nothing() {
    let t = target("softroce-t1-srv");
    let c = Client::new("softroce-t1-cli", 4096);
    let victim = Caller::key("victim");
    let token = c.token(100);
    c.connect(&bind(&t, &victim, &token));
    let a = t.serve(&victim, &token, Request::Get(&mut Bytes(b"x"))).unwrap();
    assert!(matches!(a, Answer::Done { bytes: 1, .. }), "{a:?}");
    assert_eq!(c.proof().status, WcStatus::Success);
    let e = t
        .serve(&Caller::key("attacker"), &token, Request::Get(&mut Bytes(b"")))
        .unwrap_err();
    assert!(matches!(e, TargetError::NotTheCallers(_)), "{e:?}");
    assert_eq!(t.stats().bindings, 1);
    let big = vec![1u8; 101];
    let e = t
        .serve(&victim, &token, Request::Get(&mut Bytes(&big)))
        .unwrap_err();
    assert!(
        matches!(e, TargetError::BufferTooSmall { have: 100, want: 101 }),
        "{e:?}"
    );
    let mut wc = [WorkCompletion::EMPTY; 1];
    assert_eq!(c.cq.poll(&mut wc).unwrap(), 0, "a refused GET wrote");
    c.qp.post_recv(&RecvWr {
        wr_id: 8,
        sg_list: &[],
    })
    .unwrap();
    let data = b"still mine";
    let a = t.serve(&victim, &token, Request::Get(&mut Bytes(data))).unwrap();
    assert!(matches!(a, Answer::Done { bytes: 10, .. }), "{a:?}");
    assert_eq!(c.proof().status, WcStatus::Success);
}

/// A binding that never moved a byte is no one's yet: its 409 may have
/// gone to an impostor or to a client that died. Another key naming the
/// same client QP replaces it (one binding per client QP, never two), and
/// the first key's next request binds afresh rather than moving data.
#[test]
fn an_unused_binding_named_by_another_key_is_replaced_not_doubled() {
    let t = target("softroce-t3-srv");
    let c = Client::new("softroce-t3-cli", 4096);
    let token = c.token(100);
    let first = bind(&t, &Caller::key("first"), &token);
    let second = bind(&t, &Caller::key("second"), &token);
    assert_eq!(t.stats().bindings, 1);
    let (Reply::Bind { token: a, .. }, Reply::Bind { token: b, .. }) = (&first, &second) else {
        unreachable!()
    };
    assert_ne!(a.qpn, b.qpn, "the replacement is a new server QP");
    let again = t
        .serve(&Caller::key("first"), &token, Request::Get(&mut Bytes(b"x")))
        .unwrap();
    assert!(matches!(again, Answer::Bind { .. }), "{again:?}");
    assert_eq!(t.stats().bindings, 1);
}

/// A server QP grants no remote access, whatever a client sends it: a
/// client connected to its binding (as any client is after a 409) posts an
/// RDMA WRITE, an RDMA READ and an empty WRITE to it. Each is refused by the
/// QP's own rights before any key is looked at (the server NIC counts them
/// as such), and the client sees a remote access error, not success. The
/// keys sent here are made up; the refusals counted are not key checks.
#[test]
fn a_server_qp_refuses_every_rdma_a_client_sends_it() {
    use hipobj_platform::{SendOp, SendWr};
    let verbs = soft("softroce-t4-srv");
    let t = target_on(&verbs, "softroce-t4-srv");
    let ops = [
        (
            SendOp::Write {
                remote_addr: 0x1000,
                rkey: 0x1234,
            },
            8u32,
        ),
        (
            SendOp::Read {
                remote_addr: 0x1000,
                rkey: 0x1234,
            },
            8,
        ),
        (
            SendOp::Write {
                remote_addr: 0,
                rkey: 0,
            },
            0,
        ),
    ];
    for (i, (op, len)) in ops.into_iter().enumerate() {
        let c = Client::new(&format!("softroce-t4-cli{i}"), 4096);
        c.connect(&bind(&t, &Caller::key(format!("ak{i}")), &c.token(64)));
        let sge = c.buf.sge(0, len).unwrap();
        let sg: &[_] = if len == 0 { &[] } else { std::slice::from_ref(&sge) };
        c.qp.post_send(&SendWr {
            wr_id: 1,
            op,
            sg_list: sg,
            signaled: true,
        })
        .unwrap();
        let wc = c.proof();
        assert_eq!((wc.wr_id, wc.status), (1, WcStatus::RemAccessErr), "{op:?}");
        let n = verbs.counters().unwrap().refused_qp_rights;
        assert_eq!(
            n,
            i as u64 + 1,
            "refused for another reason than the QP's rights: {op:?}"
        );
    }
}

/// The double answers as the S3 server does: a bind, then a success with
/// the count, and an S3 error code (no reply header) for a missing object.
#[test]
fn the_double_answers_like_the_server() {
    let s = ObjectServer::new(target("softroce-t2-srv"));
    let c = Client::new("softroce-t2-cli", 4096);
    let token = c.token(4096).encode();
    let r = s.serve(&Action::Get("none".into()), token.as_str()).unwrap();
    c.connect(&hipobj_proto::parse_reply(r.as_bytes()).unwrap());
    assert_eq!(
        s.serve(&Action::Get("none".into()), token.as_str()),
        Err("NoSuchKey".into())
    );
}

/// The target applies its own NIC's vendor profile (here a Broadcom
/// device, by its PCI vendor id) to every binding's QP.
#[test]
fn the_target_takes_its_nics_vendor_profile() {
    use hipobj_platform::fake::{FakeDeviceSpec, FakeTopology, FakeVerbs, Faults};
    let faults = Faults::default();
    let verbs = FakeVerbs::new(
        vec![FakeDeviceSpec {
            vendor_id: 0x14e4,
            ..FakeDeviceSpec::default()
        }],
        faults.clone(),
    );
    let t = Target::open(
        &verbs,
        &FakeTopology::new(Vec::new(), faults),
        Some("fake0"),
        TargetConfig::default(),
    )
    .unwrap();
    assert_eq!(t.vendor(), VendorProfile::Broadcom);
}

/// Server initial PSNs are random (issue 11): a client that could predict
/// the PSN of another client's binding could forge its packets. Thirty-two
/// binds give thirty-two distinct PSNs spread over the 24-bit space
/// (sequential or clock-derived PSNs, or a constant, fail; a repeat among
/// 32 fair draws has a chance of about 3 in 100,000).
#[test]
fn bindings_start_at_random_psns() {
    let t = target("softroce-t5-srv");
    let c = Client::new("softroce-t5-cli", 64);
    let mut psns = Vec::new();
    for i in 0..32u32 {
        let mut token = c.token(64);
        token.qpn = 0x100 + i;
        let Reply::Bind { psn, .. } = bind(&t, &Caller::key("ak"), &token) else {
            unreachable!()
        };
        assert!(psn <= 0x00ff_ffff, "{psn:#x} is not a 24-bit PSN");
        psns.push(psn);
    }
    let mut sorted = psns.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), psns.len(), "a PSN repeated: {psns:x?}");
    let spread = sorted[sorted.len() - 1] - sorted[0];
    assert!(spread > 1 << 20, "PSNs bunched in {spread:#x}: {psns:x?}");
}
