//! What the target's tests do from a bare client QP's side: the token it
//! sends, the connect to the server QP a 409 names, and its completions.
#![allow(clippy::unwrap_used, dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use hipobj_platform::fake::ClientQp;
use hipobj_platform::rc::{self, RcPath};
use hipobj_platform::vendor::{QpLimits, VendorProfile};
use hipobj_platform::{Gid, WorkCompletion};
use hipobj_proto::{Reply, Token, Transport};
use hipobj_softroce::{SoftConfig, SoftVerbs};

/// A soft NIC device named `name`.
pub(crate) fn soft(name: &str) -> Arc<SoftVerbs> {
    Arc::new(SoftVerbs::new(SoftConfig {
        name: name.into(),
        ..SoftConfig::default()
    }))
}

/// A token for the first `len` bytes of the client's buffer.
pub(crate) fn token(c: &ClientQp, len: u64) -> Token {
    Token {
        transport: Transport::Rc,
        qpn: c.qp.qp_num(),
        gid: c.sel.gid.0,
        rkey: c.buf.mr().rkey(),
        addr: c.buf.addr(),
        len,
        port: c.sel.port,
        lid: 0,
    }
}

/// Connects the client QP to the server QP a 409 reply names (the same
/// sequence the target uses, from the other end).
pub(crate) fn connect(c: &ClientQp, reply: &Reply) {
    let Reply::Bind { token, psn } = reply else {
        panic!("not a bind reply: {reply}")
    };
    let attr = c.device.attr().unwrap();
    let port = c.device.query_port(c.sel.port).unwrap();
    let path = RcPath {
        port: c.sel.port,
        sgid_index: c.sel.gid_index as u8,
        mtu: c.sel.mtu,
        dest_qpn: token.qpn,
        dgid: Gid(token.gid),
        rq_psn: *psn,
        sq_psn: 0,
        max_dest_rd_atomic: 16,
        max_rd_atomic: 1,
    };
    rc::to_rts(
        c.qp.as_ref(),
        &path,
        VendorProfile::Generic,
        &QpLimits::new(&attr, &port),
    )
    .unwrap();
}

/// The next completion on the client QP, if one comes within `wait`.
pub(crate) fn completion(c: &ClientQp, wait: Duration) -> Option<WorkCompletion> {
    let deadline = Instant::now() + wait;
    let mut wc = [WorkCompletion::EMPTY; 1];
    while Instant::now() < deadline {
        if c.cq.poll(&mut wc).unwrap() == 1 {
            return Some(wc[0]);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}
