//! The `hipobj-rc-v2` control path (docs/protocol.md, "hipobj-rc-v2"), both
//! sides, on the fake platform.
//!
//! **Server** (first byte even): PREPARE, READY and CANCEL requests as HTTP
//! hands them to the server (method, path, query, header pairs, signed by
//! one of two access keys or forged), through
//! `hipobj_target::rc_v2::check_control` (the path, method, protocol,
//! no-body and SigV4 checks, then the message's headers: what
//! `hipobj-server` runs before a session is touched) into `V2Sessions`
//! (`prepare`, `claim`, `run`, `cancel`). The fuzzer picks every value
//! (op, size, cookie, PSN, the client token's QPN, GID and transport, the
//! session named, the READY cookie and client buffer), mutates the headers
//! (dropped, repeated, renamed, replaced by any bytes) before or after
//! signing, and for a PUT's READY the "client's" WRITE WITH IMMEDIATE that
//! reaches the session's QP (its immediate and byte count) or a broken QP.
//!
//! **Client** (first byte odd): `Instance::rc_v2_session` and
//! `RcV2Session::prepared_from` / `finish_from` with PREPARE and READY
//! answers the fuzzer picks (status, the server token: honest, bogus or
//! with a short staging buffer, the session id, PSN, the echoed cookie and
//! byte count, mutated headers), and between them the "server's" WRITE WITH
//! IMMEDIATEs (the cookie or another immediate, the size or another count,
//! on the session's QP or another), broken QPs and `start`.
//!
//! Invariants:
//!
//! * never a panic, on either side;
//! * a forged request (wrong secret, unknown key, signed for another path,
//!   a date out of the 15-minute skew, an unsigned `x-amz-*` header added
//!   or a signed value changed after signing, no signature) is refused; an
//!   accepted one names the key that signed it and the message of its path;
//! * a refused control request changes no session (the open count and the
//!   harness's table stay as they were), except READY with the owner's
//!   session and a wrong cookie, which drops that session (403); another
//!   key's READY or CANCEL leaves a session alone;
//! * a PREPARE is served only for an RC token with a client QPN in
//!   2..2^24 and a unicast GID, a PUT only within the staging limit; the
//!   session's QP is in INIT and its staging buffer is remote-writable
//!   exactly for a PUT;
//! * a session never completes without the cookie-checked WRITE WITH
//!   IMMEDIATE with the right byte count: the server's PUT only when the
//!   completion on its QP carries the cookie and exactly the size (then the
//!   sink got the size and committed, and never otherwise); the client's
//!   GET only on a 200 echoing the cookie and the size, with the first
//!   completion on its QP since PREPARE the WRITE WITH IMMEDIATE of the
//!   cookie and the size (a PUT cannot complete on the fake NIC, which
//!   moves no bytes, and neither can the server's GET);
//! * every session's QP is out of RTS once it ended (READY done or failed,
//!   CANCEL), and on the client side no grant (memory window or remote
//!   right) outlives the session; a CANCEL is owed exactly when the server
//!   named a session that no READY answer ended;
//! * cookies, sizes, PSNs and tokens round-trip: each message the harness
//!   sends parses back to its values, and every accepted message prints to
//!   headers that parse back to it;
//! * nothing is left alive once everything is dropped.
//!
//! Input: a flags byte, then steps (see `server` and `client`). Seeds:
//! fuzz/corpus/rc_v2_control (fuzz/seeds.py).
#![no_main]

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hipobj::{Direction, ErrorKind};
use hipobj_platform::fake::{FakeDeviceSpec, FakeGpu, FakePlatform, FakeTopology, FakeVerbs, Faults};
use hipobj_platform::{AccessFlags, Gid, MemRegion, NoTopology, QpState};
use hipobj_proto::rc_v2::{
    self as v2, CancelRequest, PrepareRequest, PrepareResponse, ReadyRequest, ReadyResponse, SessionId,
    Status,
};
use hipobj_proto::{Token, Transport};
use hipobj_target::rc_v2::{ControlRequest, ControlHttp, V2Config, V2Failure, V2Sessions, check_control};
use hipobj_target::sigv4;
use hipobj_target::{Caller, Request, Selected, Sink, Source, Target, TargetConfig};
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;
use common::{Input, bogus, debug, server as server_token, start};

/// The harness's clock: every honest request is signed at this time.
const NOW: u64 = 1_796_064_060;
const KEYS: [(&str, &str); 2] = [("alice", "alice-secret"), ("bob", "bob-secret")];
const STAGING_MAX: usize = 4096;
const MAX_SESSIONS: usize = 3;

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let flags = input.u8();
    if flags & 1 == 0 {
        server(&mut input);
    } else {
        client(&mut input, flags & 2 != 0);
    }
});

// ---------------------------------------------------------------------------------------------
// Headers
// ---------------------------------------------------------------------------------------------

type Headers = Vec<(String, Vec<u8>)>;

fn h(name: &str, value: impl Into<String>) -> (String, Vec<u8>) {
    (name.to_owned(), value.into().into_bytes())
}

const NAMES: [&str; 14] = [
    v2::PROTOCOL_HEADER,
    v2::OP_HEADER,
    v2::TARGET_HEADER,
    v2::SIZE_HEADER,
    v2::OFFSET_HEADER,
    v2::TOKEN_HEADER,
    v2::PSN_HEADER,
    v2::COOKIE_HEADER,
    v2::MR_ADDR_HEADER,
    v2::MR_RKEY_HEADER,
    v2::QPN_HEADER,
    v2::SESSION_HEADER,
    v2::REPLY_HEADER,
    v2::BYTES_HEADER,
];

/// Up to three changes to `headers`; whether any was made.
fn mutate(input: &mut Input<'_>, headers: &mut Headers) -> bool {
    let n = input.u8();
    // Most inputs leave the message as the harness wrote it.
    let count = if n < 160 { 0 } else { 1 + (n % 3) };
    for _ in 0..count {
        let sel = input.u8();
        let i = usize::from(input.u8()) % headers.len().max(1);
        match sel % 8 {
            0 => {
                if i < headers.len() {
                    headers.remove(i);
                }
            }
            1 => {
                if let Some(x) = headers.get(i).cloned() {
                    headers.push(x);
                }
            }
            2 => {
                let len = usize::from(input.u8() % 100);
                let v = input.bytes(len);
                if let Some(x) = headers.get_mut(i) {
                    x.1 = v;
                }
            }
            3 => {
                // One byte of the value changed.
                let (at, to) = (usize::from(input.u8()), input.u8());
                if let Some(x) = headers.get_mut(i)
                    && !x.1.is_empty()
                {
                    let at = at % x.1.len();
                    x.1[at] = to;
                }
            }
            4 => {
                if let Some(x) = headers.get_mut(i) {
                    x.0 = x.0.to_ascii_uppercase();
                }
            }
            5 => {
                // The value with a leading zero, upper case, or cut short.
                if let Some(x) = headers.get_mut(i) {
                    match input.u8() % 3 {
                        0 => x.1.insert(0, b'0'),
                        1 => x.1.make_ascii_uppercase(),
                        _ => {
                            x.1.pop();
                        }
                    }
                }
            }
            6 => {
                let name = NAMES[usize::from(input.u8()) % NAMES.len()];
                let len = usize::from(input.u8() % 100);
                headers.push((name.to_owned(), input.bytes(len)));
            }
            _ => headers.push(h("x-amz-rdma-something-new", "x")),
        }
    }
    count > 0
}

fn pairs(headers: &Headers) -> Vec<(&str, &[u8])> {
    headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect()
}

fn token_hex(t: &Token) -> String {
    t.encode().to_string()
}

// ---------------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------------

/// A session as the harness knows it.
#[derive(Clone, Debug)]
struct Sess {
    id: SessionId,
    owner: usize,
    put: bool,
    size: u64,
    cookie: u32,
    client_qpn: u32,
    server_qpn: u32,
}

/// A request on its way to the server.
struct Http {
    method: &'static str,
    path: &'static str,
    query: Option<&'static str>,
    headers: Headers,
    /// The key that signed it.
    signer: usize,
    /// Signed so that no key can have signed it.
    forged: bool,
    /// Nothing of it was changed from what the harness meant: it must be
    /// accepted as that message.
    exact: Option<ControlRequest>,
}

struct Server {
    p: FakePlatform,
    sessions: Arc<V2Sessions>,
    keys: HashMap<String, String>,
    model: Vec<Sess>,
    gone: Vec<SessionId>,
}

fn fake() -> FakePlatform {
    let faults = Faults::default();
    FakePlatform {
        verbs: Arc::new(FakeVerbs::new(
            vec![FakeDeviceSpec {
                gids: vec![
                    Gid::from_ipv4(Ipv4Addr::LOCALHOST),
                    Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
                ],
                ..FakeDeviceSpec::default()
            }],
            faults.clone(),
        )),
        gpu: Arc::new(FakeGpu::new(0, faults.clone())),
        topology: Arc::new(FakeTopology::new(Vec::new(), faults.clone())),
        faults,
    }
}

fn server(input: &mut Input<'_>) {
    let p = fake();
    let target = Target::open(
        p.verbs.as_ref(),
        &NoTopology,
        Some("fake0"),
        // Small bounce buffers: the v2 sessions do not use them, and the
        // default pool would cost every input its allocation.
        TargetConfig {
            chunk: 4096,
            pooled_buffers: 1,
            ..TargetConfig::default()
        },
    )
    .expect("a target on the fake NIC");
    let sessions = Arc::new(V2Sessions::new(
        Arc::new(target),
        // The per-key quotas and the memory budget are as wide as the
        // session limit, so the model's one limit is the one that binds.
        V2Config {
            max_sessions: MAX_SESSIONS,
            max_sessions_per_key: MAX_SESSIONS,
            memory_budget: MAX_SESSIONS * STAGING_MAX,
            memory_per_key: MAX_SESSIONS * STAGING_MAX,
            staging_max: STAGING_MAX,
            prepare_timeout: Duration::from_secs(600),
            transfer_timeout: Duration::from_millis(200),
        },
    ));
    let mut s = Server {
        p,
        sessions,
        keys: KEYS
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        model: Vec::new(),
        gone: Vec::new(),
    };
    let mut steps = 0;
    while !input.done() && steps < 24 {
        steps += 1;
        let req = match input.u8() % 4 {
            0 | 1 => prepare_request(input),
            2 => ready_request(input, &s),
            _ => cancel_request(input, &s),
        };
        let req = sign(input, req);
        s.submit(input, req);
        assert_eq!(
            s.sessions.open_sessions(),
            s.model.len(),
            "the open sessions are not the harness's"
        );
    }
    let Server {
        p, sessions, model, ..
    } = s;
    for m in &model {
        assert_eq!(
            p.verbs.qp_state(m.server_qpn),
            Some(QpState::Init),
            "a prepared session's QP left INIT"
        );
    }
    drop(sessions);
    assert!(
        p.verbs.live().is_zero(),
        "the sessions left verbs objects alive: {:?}",
        p.verbs.live()
    );
}

fn client_gid(sel: u8) -> [u8; 16] {
    match sel % 8 {
        0..=3 => Gid::from_ipv4(Ipv4Addr::LOCALHOST).0,
        4 => [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
        5 => [0; 16],
        6 => Gid::from_ipv4(Ipv4Addr::new(10, 9, 9, 9)).0,
        _ => [0xff; 16],
    }
}

fn prepare_request(input: &mut Input<'_>) -> Http {
    let sel = input.u8();
    let put = sel & 1 != 0;
    let size = match input.u16() {
        0xffff => u64::from(v2::MAX_SIZE) + 1,
        0xfffe => u64::from(v2::MAX_SIZE),
        v => u64::from(v) % 6000,
    };
    let cookie = input.u32();
    let psn = input.u32() & 0x00ff_ffff;
    let qsel = input.u8();
    let qpn = match qsel % 6 {
        0 => 0,
        1 => 1,
        2 => 1 << 24,
        _ => 0x11 + u32::from(qsel >> 4),
    };
    let token = Token {
        transport: if sel & 2 != 0 && qsel & 8 != 0 {
            Transport::Dc
        } else {
            Transport::Rc
        },
        qpn,
        gid: client_gid(input.u8()),
        rkey: 0,
        addr: 0,
        len: 0,
        port: 1,
        lid: 0,
    };
    let offset = (sel & 4 != 0).then(|| u64::from(input.u16()));
    let mut headers = vec![
        h(v2::PROTOCOL_HEADER, v2::PROTOCOL),
        h(v2::OP_HEADER, if put { "PUT" } else { "GET" }),
        h(v2::TARGET_HEADER, "/bkt/dir/obj"),
        h(v2::SIZE_HEADER, size.to_string()),
        h(v2::TOKEN_HEADER, token_hex(&token)),
        h(v2::PSN_HEADER, format!("{psn:06x}")),
        h(v2::COOKIE_HEADER, format!("{cookie:08x}")),
    ];
    if let Some(o) = offset {
        headers.push(h(v2::OFFSET_HEADER, o.to_string()));
    }
    // What the headers say, when every value is one the protocol allows.
    let exact = (|| {
        let p = PrepareRequest {
            op: if put { v2::Direction::Put } else { v2::Direction::Get },
            target: v2::ObjectPath::new("bkt", "dir/obj").ok()?,
            size: v2::Size::new(size)?,
            offset,
            token: (token.transport == Transport::Rc).then_some(token)?,
            psn: v2::Psn::new(psn)?,
            cookie: v2::Cookie::new(cookie)?,
            client_mr: None,
            part: None,
        };
        Some(ControlRequest::Prepare(p))
    })();
    if let Some(ControlRequest::Prepare(p)) = &exact {
        // The harness's spelling is the protocol's own.
        let mine: Vec<(&str, String)> = headers
            .iter()
            .map(|(n, v)| (v2_name(n), String::from_utf8_lossy(v).into_owned()))
            .collect();
        let mut theirs = p.to_headers();
        let mut mine = mine;
        theirs.sort();
        mine.sort();
        assert_eq!(theirs, mine, "PREPARE prints other headers");
    }
    Http {
        method: "POST",
        path: v2::PREPARE_PATH,
        query: None,
        headers,
        signer: 0,
        forged: false,
        exact,
    }
}

fn v2_name(n: &str) -> &'static str {
    NAMES.iter().copied().find(|x| *x == n).unwrap_or("?")
}

/// A session id: one the harness holds, one that ended, or any.
fn session_for(input: &mut Input<'_>, s: &Server) -> (SessionId, Option<Sess>) {
    let sel = input.u8();
    match sel % 4 {
        0..=1 if !s.model.is_empty() => {
            let m = s.model[usize::from(input.u8()) % s.model.len()].clone();
            (m.id, Some(m))
        }
        2 if !s.gone.is_empty() => (s.gone[usize::from(input.u8()) % s.gone.len()], None),
        _ => {
            let mut id = [0u8; 16];
            id.iter_mut().for_each(|b| *b = input.u8());
            (SessionId(id), None)
        }
    }
}

fn ready_request(input: &mut Input<'_>, s: &Server) -> Http {
    let (id, known) = session_for(input, s);
    let sel = input.u8();
    let cookie = match (sel % 4, &known) {
        (0..=2, Some(m)) => m.cookie,
        (3, Some(m)) => m.cookie ^ u32::from(input.u8()).max(1),
        _ => input.u32(),
    };
    let mut headers = vec![
        h(v2::PROTOCOL_HEADER, v2::PROTOCOL),
        h(v2::SESSION_HEADER, id.to_string()),
        h(v2::COOKIE_HEADER, format!("{cookie:08x}")),
    ];
    let qpn = match ((sel >> 2) % 4, &known) {
        (0..=1, Some(m)) => m.client_qpn,
        _ => u32::from(input.u16()),
    };
    let (addr, rkey) = (u64::from(input.u32()) << 8, input.u32());
    let mr = match (sel >> 4) % 4 {
        0..=1 => {
            headers.push(h(v2::MR_ADDR_HEADER, format!("{addr:x}")));
            headers.push(h(v2::MR_RKEY_HEADER, format!("{rkey:x}")));
            headers.push(h(v2::QPN_HEADER, format!("{qpn:x}")));
            v2::Qpn::new(qpn).map(|q| Some((v2::RemoteMr { addr, rkey }, q)))
        }
        2 => Some(None),
        _ => {
            // Part of the buffer only.
            headers.push(h(v2::MR_ADDR_HEADER, format!("{addr:x}")));
            None
        }
    };
    let exact = (|| {
        Some(ControlRequest::Ready(ReadyRequest {
            session: id,
            cookie: v2::Cookie::new(cookie)?,
            client_mr: mr?,
        }))
    })();
    Http {
        method: "POST",
        path: v2::READY_PATH,
        query: None,
        headers,
        signer: 0,
        forged: false,
        exact,
    }
}

fn cancel_request(input: &mut Input<'_>, s: &Server) -> Http {
    let (id, _) = session_for(input, s);
    Http {
        method: "POST",
        path: v2::CANCEL_PATH,
        query: None,
        headers: vec![
            h(v2::PROTOCOL_HEADER, v2::PROTOCOL),
            h(v2::SESSION_HEADER, id.to_string()),
        ],
        signer: 0,
        forged: false,
        exact: Some(ControlRequest::Cancel(CancelRequest { session: id })),
    }
}

/// Mutates the request, then signs it as a client would, or forges it.
fn sign(input: &mut Input<'_>, mut req: Http) -> Http {
    if mutate(input, &mut req.headers) {
        req.exact = None;
    }
    let sel = input.u8();
    req.signer = usize::from(sel & 1);
    // The HTTP around it.
    match (sel >> 1) % 16 {
        0 => {
            req.method = "GET";
            req.exact = None;
        }
        1 => {
            req.path = [
                v2::PREPARE_PATH,
                v2::READY_PATH,
                v2::CANCEL_PATH,
                "/.hipobj-rc/other",
                "/bkt/key",
            ][usize::from(input.u8()) % 5];
            req.exact = None;
        }
        2 => {
            req.query = Some("x=1");
            req.exact = None;
        }
        3 => {
            req.headers.push(h("content-length", "5"));
            req.exact = None;
        }
        4 => req.headers.push(h("content-length", "0")),
        5 => {
            req.headers.push(h("transfer-encoding", "chunked"));
            req.exact = None;
        }
        _ => {}
    }
    let (key, secret) = KEYS[req.signer];
    let forge = input.u8();
    let mut date = sigv4::amz_date(NOW);
    let mut signing_path = req.path;
    let mut signing_secret = secret.to_owned();
    let mut signing_key = key.to_owned();
    let mut after: Option<u8> = None;
    match forge % 24 {
        0 => signing_secret = "not-the-secret".into(),
        1 => signing_key = "mallory".into(),
        2 => {
            signing_path = if req.path == v2::READY_PATH {
                v2::CANCEL_PATH
            } else {
                v2::READY_PATH
            }
        }
        3 => date = sigv4::amz_date(NOW - sigv4::SKEW_SECS - 1 - u64::from(input.u16())),
        4 => date = sigv4::amz_date(NOW + sigv4::SKEW_SECS + 1 + u64::from(input.u16())),
        5..=7 => after = Some(forge),
        // Within the skew: accepted.
        8 => date = sigv4::amz_date(NOW - u64::from(input.u16()) % (sigv4::SKEW_SECS + 1)),
        _ => {}
    }
    req.forged = matches!(forge % 24, 0..=7);
    if req.forged {
        req.exact = None;
    }
    req.headers.push(h("host", "127.0.0.1:9000"));
    req.headers.push(h("x-amz-date", date.clone()));
    let signed: Vec<(String, String)> = req
        .headers
        .iter()
        .map(|(n, v)| (n.clone(), String::from_utf8_lossy(v).into_owned()))
        .collect();
    let auth = sigv4::sign(
        "POST",
        signing_path,
        &signed,
        &signing_key,
        &signing_secret,
        &date,
    );
    match after {
        Some(5) => req.headers.push(h("x-amz-rdma-late", "1")),
        Some(6) => {
            // A signed value changed: one more visible character.
            let i = usize::from(input.u8()) % req.headers.len();
            req.headers[i].1.push(b'Z');
        }
        Some(_) => return req,
        None => {}
    }
    req.headers.push(("authorization".into(), auth.into_bytes()));
    req
}

/// Session bytes for a GET: the object has exactly `len` bytes.
struct Object(u64);

impl Source for Object {
    type Error = ();
    fn open(&mut self) -> Result<Selected, ()> {
        Ok(Selected {
            len: self.0,
            partial: false,
        })
    }
    fn fill(&mut self, off: u64, buf: &mut [u8]) -> Result<(), ()> {
        buf.iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = (off as usize + i) as u8);
        Ok(())
    }
}

#[derive(Default)]
struct Stored {
    len: u64,
    drained: u64,
    committed: bool,
}

impl Sink for Stored {
    type Error = ();
    fn open(&mut self, len: u64) -> Result<(), ()> {
        self.len = len;
        Ok(())
    }
    fn drain(&mut self, off: u64, chunk: &[u8]) -> Result<(), ()> {
        assert_eq!(off, self.drained, "the sink is drained out of order");
        self.drained += chunk.len() as u64;
        Ok(())
    }
    fn commit(&mut self) -> Result<(), ()> {
        self.committed = true;
        Ok(())
    }
}

impl Server {
    fn submit(&mut self, input: &mut Input<'_>, req: Http) {
        // What an http::HeaderMap holds: lowercase names, values without
        // control bytes (hyper refuses a request with others).
        let headers: Vec<(String, Vec<u8>)> = req
            .headers
            .iter()
            .filter(|(n, v)| {
                !n.is_empty()
                    && n.bytes().all(|b| b.is_ascii_graphic() && b != b':')
                    && v.iter().all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
            })
            .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
            .collect();
        let hp = pairs(&headers);
        let http = ControlHttp {
            method: req.method,
            path: req.path,
            query: req.query,
            headers: &hp,
        };
        let checked = check_control(&http, true, &self.keys, NOW);
        debug(format_args!(
            "{} {} forged {} -> {checked:?}",
            req.method, req.path, req.forged
        ));
        let (key, control) = match checked {
            Ok(x) => x,
            Err(r) => {
                assert!(r.status != Status::Ok && r.status != Status::Cancelled);
                assert!(req.exact.is_none(), "an exact request was refused: {r:?}");
                return;
            }
        };
        assert!(!req.forged, "a forged request was accepted as {key}");
        assert_eq!(key, KEYS[req.signer].0, "accepted under another key");
        assert!(req.method == "POST" && req.query.is_none());
        let round = match &control {
            ControlRequest::Prepare(p) => {
                assert_eq!(req.path, v2::PREPARE_PATH);
                PrepareRequest::from_headers(p.to_headers().iter().map(|(n, v)| (*n, v.as_bytes())))
                    .map(ControlRequest::Prepare)
            }
            ControlRequest::Ready(r) => {
                assert_eq!(req.path, v2::READY_PATH);
                ReadyRequest::from_headers(r.to_headers().iter().map(|(n, v)| (*n, v.as_bytes())))
                    .map(ControlRequest::Ready)
            }
            ControlRequest::Cancel(c) => {
                assert_eq!(req.path, v2::CANCEL_PATH);
                CancelRequest::from_headers(c.to_headers().iter().map(|(n, v)| (*n, v.as_bytes())))
                    .map(ControlRequest::Cancel)
            }
        };
        assert_eq!(
            round.as_ref(),
            Ok(&control),
            "an accepted message does not round-trip"
        );
        if let Some(want) = &req.exact {
            assert_eq!(&control, want, "the server read other values than were sent");
        }
        let caller = Caller {
            access_key: key,
            address: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        };
        let owner = req.signer;
        match control {
            ControlRequest::Prepare(p) => self.prepare(&caller, owner, &p),
            ControlRequest::Ready(r) => self.ready(input, &caller, owner, &r),
            ControlRequest::Cancel(c) => {
                self.sessions.cancel(&caller, &c.session);
                if let Some(i) = self
                    .model
                    .iter()
                    .position(|m| m.id == c.session && m.owner == owner)
                {
                    let m = self.model.remove(i);
                    self.gone.push(m.id);
                    self.ended(&m);
                }
            }
        }
    }

    fn prepare(&mut self, caller: &Caller, owner: usize, p: &PrepareRequest) {
        let before = self.sessions.open_sessions();
        let t = &p.token;
        let servable = t.transport == Transport::Rc
            && (2..=0x00ff_ffff).contains(&t.qpn)
            && t.gid != [0; 16]
            && t.gid[0] != 0xff;
        let r = self.sessions.prepare(caller, p, std::time::Instant::now());
        debug(format_args!("prepare {:?} {} -> {r:?}", p.op, p.size));
        match r {
            Ok(resp) => {
                assert!(servable, "a session for a token no client QP can have: {t:?}");
                if let Some(mapped) = Gid(t.gid).to_ipv4() {
                    // The caller is on loopback: only this host's addresses.
                    assert!(mapped.is_loopback(), "a token of another host was served");
                }
                let put = p.op == v2::Direction::Put;
                // Either way one staging buffer holds the session's bytes.
                assert!(p.size.get() as usize <= STAGING_MAX);
                assert!(before < MAX_SESSIONS, "a session over the limit");
                assert_eq!(self.sessions.open_sessions(), before + 1);
                assert_eq!(resp.token.transport, Transport::Rc);
                assert_eq!(resp.token.len, p.size.get_u64());
                assert_eq!(self.p.verbs.qp_state(resp.token.qpn), Some(QpState::Init));
                if put {
                    // The PUT's client WRITEs into the staging buffer the answer names,
                    // which grants that and nothing else.
                    let access = self
                        .p
                        .verbs
                        .mr_access(resp.token.rkey)
                        .expect("a PUT's staging buffer is registered");
                    assert!(access.contains(AccessFlags::REMOTE_WRITE));
                    assert!(!access.contains(AccessFlags::REMOTE_READ));
                } else {
                    // A GET's staging comes at READY: its answer names no server memory.
                    assert_eq!(
                        (resp.token.addr, resp.token.rkey),
                        (0, 0),
                        "a GET's PREPARE answer names server memory"
                    );
                }
                let back =
                    PrepareResponse::from_headers(resp.to_headers().iter().map(|(n, v)| (*n, v.as_bytes())));
                assert_eq!(back, Ok(resp), "the PREPARE response does not round-trip");
                self.model.push(Sess {
                    id: resp.session,
                    owner,
                    put,
                    size: p.size.get_u64(),
                    cookie: p.cookie.get(),
                    client_qpn: t.qpn,
                    server_qpn: resp.token.qpn,
                });
            }
            Err(e) => {
                assert_eq!(
                    self.sessions.open_sessions(),
                    before,
                    "a refused PREPARE changed the sessions"
                );
                if let V2Failure::Status(s, _) = &e {
                    assert!(*s != Status::Ok);
                }
            }
        }
    }

    fn ready(&mut self, input: &mut Input<'_>, caller: &Caller, owner: usize, r: &ReadyRequest) {
        let before = self.sessions.open_sessions();
        let known = self
            .model
            .iter()
            .position(|m| m.id == r.session)
            .map(|i| self.model[i].clone());
        let claimed = self.sessions.claim(caller, r, std::time::Instant::now());
        debug(format_args!("claim -> {:?}", claimed.as_ref().err()));
        let claimed = match claimed {
            Ok(c) => c,
            Err(V2Failure::Status(Status::Forbidden, _)) => {
                let m = known.expect("403 for a session the harness does not hold");
                assert_eq!(m.owner, owner, "another key's READY dropped a session");
                assert_ne!(m.cookie, r.cookie.get(), "403 with the session's cookie");
                self.model.retain(|x| x.id != m.id);
                self.gone.push(m.id);
                self.ended(&m);
                assert_eq!(self.sessions.open_sessions(), before - 1);
                return;
            }
            Err(e) => {
                assert_eq!(
                    self.sessions.open_sessions(),
                    before,
                    "a refused READY changed the sessions: {e:?}"
                );
                if let Some(m) = &known
                    && m.owner == owner
                {
                    assert_eq!(m.cookie, r.cookie.get(), "a wrong cookie kept the session");
                }
                return;
            }
        };
        let m = known.expect("a session the harness does not hold was claimed");
        assert_eq!(m.owner, owner, "another key claimed a session");
        assert_eq!(m.cookie, r.cookie.get(), "claimed with another cookie");
        match r.client_mr {
            Some((_, q)) => assert_eq!(q.get(), m.client_qpn, "claimed naming another QP"),
            None => assert!(m.put, "a GET claimed without the client's buffer"),
        }
        self.model.retain(|x| x.id != m.id);
        self.gone.push(m.id);
        let sel = input.u8();
        if m.put {
            // The client's write, as it reaches the session's QP.
            let imm = match sel % 4 {
                0 | 1 => m.cookie,
                2 => m.cookie ^ 1,
                _ => input.u32(),
            };
            let len = match (sel >> 2) % 4 {
                0 | 1 => m.size as u32,
                2 => (m.size as u32).wrapping_add(1),
                _ => (m.size as u32).wrapping_sub(1),
            };
            let broken = sel >> 4 == 0xf;
            // The fake NIC delivers it the moment the session's QP reaches
            // RTS, inside `run`.
            let delivered = if broken {
                self.p.verbs.arm_break(m.server_qpn);
                false
            } else {
                self.p.verbs.arm_write_with_imm(m.server_qpn, imm, len)
            };
            let mut sink = Stored::default();
            let r = self.sessions.run(claimed, Request::Put(&mut sink));
            debug(format_args!(
                "PUT imm {imm:#x} len {len}: {delivered} -> {:?}",
                r.as_ref().err()
            ));
            match r {
                Ok(n) => {
                    assert!(
                        delivered && imm == m.cookie && u64::from(len) == m.size,
                        "a PUT completed without the cookie's write of its size"
                    );
                    assert_eq!(n, m.size);
                    assert!(sink.committed && sink.len == m.size && sink.drained == m.size);
                }
                Err(_) => assert!(!sink.committed, "a failed PUT committed"),
            }
        } else {
            let len = match sel % 4 {
                0..=2 => m.size,
                _ => m.size + 1,
            };
            let r = self.sessions.run(claimed, Request::Get(&mut Object(len)));
            assert!(r.is_err(), "a GET completed on a NIC that moves no bytes");
        }
        self.ended(&m);
    }

    /// A session that ended: its QP is out of RTS (or gone).
    fn ended(&self, m: &Sess) {
        let state = self.p.verbs.qp_state(m.server_qpn);
        assert!(
            !matches!(state, Some(QpState::Rts | QpState::Rtr)),
            "an ended session's QP is in {state:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------------------------

const BUF: usize = 16 * 1024;

fn buffer() -> MemRegion {
    static BUF_REGION: OnceLock<MemRegion> = OnceLock::new();
    *BUF_REGION.get_or_init(|| MemRegion::from_static(Box::leak(vec![0u8; BUF].into_boxed_slice())))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    Landed(u32, u32),
    Broken,
}

fn client(input: &mut Input<'_>, mw: bool) {
    let (p, lib) = start(mw, 1);
    let inst = lib.instance().expect("initialized");
    let buf = buffer();
    inst.register_host(buf).expect("register");
    let mut rounds = 0;
    while !input.done() && rounds < 6 {
        rounds += 1;
        let sel = input.u8();
        let dir = if sel & 1 == 0 {
            Direction::Get
        } else {
            Direction::Put
        };
        let size = usize::from(input.u16()) % (BUF + 2);
        let offset = usize::from(input.u16()) % BUF;
        let mut s = match inst.rc_v2_session(dir, buf.addr(), size, offset) {
            // The fake NIC delivers a write before the answer is handed
            // over: waiting for a proof that is not there would only slow
            // every input that plays a server answering without one.
            Ok(mut s) => {
                s.set_proof_wait(Duration::ZERO);
                s
            }
            Err(e) => {
                assert!(size == 0 || offset + size > BUF, "a session refused: {e}");
                continue;
            }
        };
        assert!(
            size > 0 && offset + size <= BUF,
            "a session for {size} bytes at {offset}"
        );
        let (cookie, qpn) = (s.cookie(), s.qpn());
        assert!(cookie != 0 && (1..1 << 24).contains(&s.psn()));
        let prep = s
            .prepare_request(
                "bkt",
                "dir/obj",
                (dir == Direction::Get).then_some(u64::from(sel >> 4)),
            )
            .expect("a PREPARE");
        assert_eq!(prep.cookie.get(), cookie);
        assert_eq!(prep.size.get_u64(), size as u64);
        assert_eq!(prep.token.qpn, qpn);
        assert_eq!(prep.token.transport, Transport::Rc);
        let back = PrepareRequest::from_headers(prep.to_headers().iter().map(|(n, v)| (*n, v.as_bytes())));
        assert_eq!(back.as_ref(), Ok(&prep), "PREPARE does not round-trip");
        assert!(s.ready_request().is_err(), "READY before PREPARE was answered");
        assert_eq!(s.cancel_id(), None);

        // The PREPARE answer.
        let a = input.u8();
        let status = match a % 16 {
            0 => 409,
            1 => 503,
            2 => 501,
            3 => input.u16(),
            _ => 200,
        };
        let mut token = match (a >> 4) % 8 {
            0 => bogus(input.u8()),
            _ => server_token(input.u8()),
        };
        token.rkey = input.u32();
        token.addr = u64::from(input.u32());
        token.len = match input.u8() % 8 {
            0 => size as u64 - 1,
            _ => size as u64,
        };
        let mut id = [0u8; 16];
        id.iter_mut().for_each(|b| *b = input.u8());
        let psn = input.u32() & 0x00ff_ffff;
        let mut headers = vec![
            h(v2::PROTOCOL_HEADER, v2::PROTOCOL),
            h(v2::REPLY_HEADER, format!("200:{}", token_hex(&token))),
            h(v2::SESSION_HEADER, SessionId(id).to_string()),
            h(v2::PSN_HEADER, format!("{psn:06x}")),
            h(v2::QPN_HEADER, format!("{:x}", token.qpn)),
            h(v2::MR_ADDR_HEADER, format!("{:x}", token.addr)),
            h(v2::MR_RKEY_HEADER, format!("{:x}", token.rkey)),
        ];
        let mutated = mutate(input, &mut headers);
        let parsed = PrepareResponse::from_headers(pairs(&headers));
        let r = s.prepared_from(status, pairs(&headers));
        debug(format_args!("prepared {status} {token:?} -> {r:?}"));
        let usable = |t: &Token| {
            let gid = Gid(t.gid);
            t.transport == Transport::Rc
                && (2..1 << 24).contains(&t.qpn)
                && t.gid != [0; 16]
                && t.gid[0] != 0xff
                && gid
                    .to_ipv4()
                    .is_none_or(|v| !(v.is_unspecified() || v.is_multicast() || v.is_broadcast()))
                && t.port != 0
                && (dir == Direction::Get || t.len >= size as u64)
        };
        match &r {
            Ok(()) => {
                let a = parsed.as_ref().expect("accepted an answer that does not parse");
                assert_eq!(status, 200, "accepted PREPARE status {status}");
                assert!(
                    usable(&a.token),
                    "connected to an unusable server token {:?}",
                    a.token
                );
                assert_eq!(s.cancel_id(), Some(a.session));
                assert_eq!(p.verbs.qp_state(qpn), Some(QpState::Rts));
                if dir == Direction::Put {
                    assert_eq!(s.staging(), Some(a.staging()));
                }
            }
            Err(_) => {
                if !mutated && status == 200 && psn != 0 {
                    assert!(!usable(&token), "refused an honest PREPARE answer: {r:?}");
                }
                let owed = match (&parsed, status) {
                    (_, st) if st != 200 => None,
                    (Ok(a), _) => Some(a.session),
                    (Err(_), _) => pairs(&headers)
                        .iter()
                        .find(|(n, _)| n.eq_ignore_ascii_case(v2::SESSION_HEADER))
                        .and_then(|(_, v)| SessionId::parse(v)),
                };
                assert_eq!(s.cancel_id(), owed, "the CANCEL owed is wrong");
                check_ended(&p, qpn);
                assert!(s.ready_request().is_err());
                continue;
            }
        }
        let ready = s.ready_request().expect("READY after PREPARE");
        assert_eq!(ready.cookie.get(), cookie, "READY carries another cookie");
        let (mr, rq) = ready.client_mr.expect("READY names the client's QP");
        assert_eq!(rq.get(), qpn);
        if dir == Direction::Get {
            assert_eq!(mr.addr, buf.addr() as u64 + offset as u64);
            assert_eq!(mr.rkey, prep.token.rkey);
            check_grant(&p, mw, qpn, mr.rkey, mr.addr, size as u64);
        }
        let back = ReadyRequest::from_headers(ready.to_headers().iter().map(|(n, v)| (*n, v.as_bytes())));
        assert_eq!(back, Ok(ready), "READY does not round-trip");

        // What reaches the client's QP before the READY answer.
        let mut events = Vec::new();
        let mut started = false;
        let n = input.u8() % 4;
        for _ in 0..n {
            let e = input.u8();
            match e % 8 {
                0..=4 => {
                    let imm = match (e >> 3) % 4 {
                        0 | 1 => cookie,
                        2 => cookie ^ 1,
                        _ => input.u32(),
                    };
                    let len = match (e >> 5) % 4 {
                        0 | 1 => size as u32,
                        2 => size as u32 + 1,
                        _ => size as u32 - 1,
                    };
                    let on = if e & 0x80 != 0 && e & 0x40 != 0 {
                        let qps = p.verbs.qp_nums();
                        qps.get(usize::from(input.u8()) % qps.len().max(1))
                            .copied()
                            .unwrap_or(0)
                    } else {
                        qpn
                    };
                    let landed = p.verbs.deliver_write_with_imm(on, imm, len);
                    if landed && on == qpn {
                        events.push(Event::Landed(imm, len));
                    }
                }
                5 => {
                    if p.verbs.break_qp(qpn) {
                        events.push(Event::Broken);
                    }
                }
                _ => {
                    let r = s.start();
                    started |= r.is_ok();
                    if dir == Direction::Put {
                        // The fake NIC moves no bytes: the write cannot be posted.
                        assert!(r.is_err());
                    }
                }
            }
        }

        // The READY answer.
        let b = input.u8();
        let status = match b % 16 {
            0 => 408,
            1 => 500,
            2 => input.u16(),
            _ => 200,
        };
        let echo = match (b >> 4) % 4 {
            0..=2 => cookie,
            _ => input.u32(),
        };
        let bytes = match (b >> 6) % 4 {
            0 | 1 => size as u64,
            2 => size as u64 + 1,
            _ => size as u64 - 1,
        };
        let mut headers = vec![
            h(v2::PROTOCOL_HEADER, v2::PROTOCOL),
            h(v2::COOKIE_HEADER, format!("{echo:08x}")),
            h(v2::BYTES_HEADER, bytes.to_string()),
        ];
        if input.u8() & 1 != 0 {
            headers.push(h(v2::ETAG_HEADER, "\"abc\""));
        }
        mutate(input, &mut headers);
        let parsed = ReadyResponse::from_headers(pairs(&headers));
        let r = s.finish_from(status, pairs(&headers));
        debug(format_args!(
            "finish {status} {echo:#x} {bytes}: {events:?} -> {r:?}"
        ));
        match &r {
            Ok(n) => {
                assert_eq!(
                    dir,
                    Direction::Get,
                    "a PUT completed on a NIC that moves no bytes"
                );
                assert_eq!(status, 200);
                let a = parsed
                    .as_ref()
                    .expect("finished on an answer that does not parse");
                assert_eq!(
                    (a.cookie.get(), a.bytes),
                    (cookie, size as u64),
                    "finished on a wrong echo"
                );
                assert_eq!(
                    events.first(),
                    Some(&Event::Landed(cookie, size as u32)),
                    "finished without the cookie's write of the size first"
                );
                assert_eq!(*n, size as u64);
                assert!(s.is_done());
                assert_eq!(s.cancel_id(), None);
            }
            Err(e) => {
                assert!(!s.is_done());
                if e.kind() != ErrorKind::InvalidValue {
                    assert_eq!(s.cancel_id(), None, "a READY answer left a CANCEL owed");
                }
                let _ = started;
            }
        }
        s.abort();
        check_ended(&p, qpn);
        drop(s);
        check_ended(&p, qpn);
    }
    lib.shutdown();
    drop(inst);
    assert!(
        p.verbs.live().is_zero(),
        "shutdown left verbs objects alive: {:?}",
        p.verbs.live()
    );
}

/// GET between PREPARE and READY: the server may write exactly the range,
/// and nothing else is granted.
fn check_grant(p: &FakePlatform, mw: bool, qpn: u32, rkey: u32, addr: u64, len: u64) {
    if mw {
        let live = p.verbs.live_mw_binds();
        assert_eq!(live.len(), 1, "windows bound: {live:?}");
        let b = &live[0];
        assert_eq!(
            (b.rkey, b.qpn, b.addr, b.len),
            (rkey, qpn, addr, len),
            "the window is not the range"
        );
        assert_eq!(b.access, AccessFlags::REMOTE_WRITE);
    } else {
        let access = p.verbs.qp_access(qpn).expect("the session's QP");
        assert!(access.contains(AccessFlags::REMOTE_WRITE));
        assert!(!access.contains(AccessFlags::REMOTE_READ));
    }
}

/// An ended session: its QP is out of RTS (or gone) and nothing grants.
fn check_ended(p: &FakePlatform, qpn: u32) {
    let state = p.verbs.qp_state(qpn);
    assert!(
        !matches!(state, Some(QpState::Rts | QpState::Rtr)),
        "an ended session's QP is in {state:?}"
    );
    assert!(
        p.verbs.live_mw_binds().is_empty(),
        "a window outlived its session"
    );
    if let Some(access) = p.verbs.qp_access(qpn) {
        assert!(
            !access.contains(AccessFlags::REMOTE_WRITE) && !access.contains(AccessFlags::REMOTE_READ),
            "the session's QP keeps {access:?}"
        );
    }
}
