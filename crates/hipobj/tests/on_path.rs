//! Issue 24, finding 2, on the soft NIC: a party on the HTTP path between
//! the client and its server answers the client's requests itself. It has a
//! soft NIC of its own (another 127.x address) and the server double's
//! target on it, so its 409 names a real QP that would take the client's
//! binding, write the GET's bytes with the proof, or RDMA-READ a PUT's
//! buffer. The application's `Control` knows the endpoint (the real
//! server's address): the client refuses to bind to the party's QP, so the
//! GET fails with the buffer untouched and the PUT fails with nothing read.
//! With the party's address listed in the switch (`AllowPeer`), the same
//! exchange binds and the party's bytes land, which is what happened on
//! every call before the check.
#![allow(clippy::unwrap_used)]

mod support;

use std::net::IpAddr;
use std::sync::Arc;

use hipobj::{AllowPeer, Client, Control, ControlError, ErrorKind, Options};
use hipobj_platform::{NoGpu, NoTopology, Platform, Verbs};
use hipobj_softroce::{SoftConfig, SoftVerbs};
use hipobj_target::{Target, TargetConfig};

use support::server::{Action, Server};

fn soft(name: &str) -> Arc<SoftVerbs> {
    Arc::new(SoftVerbs::new(SoftConfig {
        name: name.into(),
        ..SoftConfig::default()
    }))
}

/// A server double on its own soft NIC, and the NIC's address.
fn server_on(name: &str) -> (Server, IpAddr) {
    let verbs = soft(name);
    let target = Target::open(
        verbs.as_ref() as &dyn Verbs,
        &NoTopology,
        Some(name),
        TargetConfig {
            completion_timeout: std::time::Duration::from_secs(5),
            ..TargetConfig::default()
        },
    )
    .unwrap();
    let ip = verbs.device().unwrap().ip();
    (Server::new(target), IpAddr::V4(ip))
}

/// The application's S3 exchange, with the party on the path: every
/// request reaches the party, which answers as a server would. The endpoint
/// the application addressed is `endpoint`.
struct OnPath<'a> {
    party: &'a Server,
    op: Action,
    endpoint: IpAddr,
    requests: usize,
    reply: Option<String>,
}

impl Control for OnPath<'_> {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        self.requests += 1;
        self.reply = self.party.serve(&self.op, token).ok();
        Ok(())
    }

    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        let r = self
            .reply
            .take()
            .ok_or_else(|| ControlError("no x-amz-rdma-reply".into()))?;
        reply[..r.len()].copy_from_slice(r.as_bytes());
        Ok(r.len())
    }

    fn server_addrs(&self) -> Option<Vec<IpAddr>> {
        Some(vec![self.endpoint])
    }
}

fn client(name: &str, allow_peer: AllowPeer) -> Client {
    Client::builder(Platform {
        verbs: soft(name),
        gpu: Arc::new(NoGpu::new("test")),
        topology: Arc::new(NoTopology),
    })
    .nic_hint(name)
    .options(Options {
        max_transfers: 2,
        allow_peer,
        ..Options::default()
    })
    .build()
    .unwrap()
}

#[test]
fn an_on_path_party_naming_its_own_qp_gets_no_binding() {
    let (_server, server_ip) = server_on("softroce-op-srv");
    let (party, party_ip) = server_on("softroce-op-party");
    assert_ne!(server_ip, party_ip);
    let forged = vec![0xeeu8; 64 << 10];
    party.objects.lock().unwrap().insert("obj".into(), forged.clone());
    let c = client("softroce-op-client", AllowPeer::default());

    // GET: refused at the 409, before any QP is connected; nothing lands.
    let mut reg = c.register(vec![0u8; 64 << 10]).unwrap();
    let mut ctl = OnPath {
        party: &party,
        op: Action::Get("obj".into()),
        endpoint: server_ip,
        requests: 0,
        reply: None,
    };
    let e = c.get(&mut reg, 0, 64 << 10, &mut ctl).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RdmaError, "{e}");
    assert!(e.to_string().contains(&party_ip.to_string()), "{e}");
    assert_eq!(ctl.requests, 1, "nothing is sent after the refused 409");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        reg.to_vec().iter().all(|&b| b == 0),
        "no byte of the party's landed"
    );

    // PUT: the party never reads the buffer, so it stores nothing.
    reg.fill(0x5a);
    let mut ctl = OnPath {
        party: &party,
        op: Action::Put("stolen".into()),
        endpoint: server_ip,
        requests: 0,
        reply: None,
    };
    let e = c.put(&reg, 0, 64 << 10, &mut ctl).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RdmaError, "{e}");
    assert!(!party.objects.lock().unwrap().contains_key("stolen"));
}

#[test]
fn with_the_party_listed_in_the_switch_the_same_exchange_binds_to_it() {
    let (_server, server_ip) = server_on("softroce-op2-srv");
    let (party, party_ip) = server_on("softroce-op2-party");
    let forged = vec![0xeeu8; 64 << 10];
    party.objects.lock().unwrap().insert("obj".into(), forged.clone());
    let c = client("softroce-op2-client", AllowPeer::Listed(vec![party_ip]));
    let mut reg = c.register(vec![0u8; 64 << 10]).unwrap();
    let mut ctl = OnPath {
        party: &party,
        op: Action::Get("obj".into()),
        endpoint: server_ip,
        requests: 0,
        reply: None,
    };
    c.get(&mut reg, 0, 64 << 10, &mut ctl).unwrap();
    assert_eq!(ctl.requests, 2, "one binding round, then the transfer");
    assert_eq!(reg.into_inner(), forged, "what the check stops when it is on");
}
