//! The in-process S3 server double for transfer tests
//! (`hipobj_target::double::ObjectServer`, objects in memory, RDMA by the
//! target's one entry point) behind the `Control` seam. It answers exactly
//! as docs/protocol.md says a server must.
#![allow(dead_code, clippy::unwrap_used)]

use std::ops::Deref;

use hipobj::{Control, ControlError};
use hipobj_target::Target;
pub(crate) use hipobj_target::double::Action;
use hipobj_target::double::ObjectServer;

/// The double (its target is `server.target`).
pub(crate) struct Server {
    inner: ObjectServer,
}

impl Deref for Server {
    type Target = ObjectServer;
    fn deref(&self) -> &ObjectServer {
        &self.inner
    }
}

/// One S3 request against the server, as the client's callbacks drive it.
pub(crate) struct Request<'a> {
    pub server: &'a Server,
    pub op: Action,
    pub reply: Option<String>,
    pub rounds: usize,
}

impl Server {
    pub(crate) fn new(target: Target) -> Self {
        Self {
            inner: ObjectServer::new(target),
        }
    }

    pub(crate) fn wrap(inner: ObjectServer) -> Self {
        Self { inner }
    }

    pub(crate) fn request(&self, op: Action) -> Request<'_> {
        Request {
            server: self,
            op,
            reply: None,
            rounds: 0,
        }
    }
}

impl Control for Request<'_> {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        self.rounds += 1;
        // An S3 error carries no x-amz-rdma-reply: recv_reply then fails.
        self.reply = self.server.serve(&self.op, token).ok();
        Ok(())
    }

    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        let r = self
            .reply
            .take()
            .ok_or_else(|| ControlError("the response has no x-amz-rdma-reply header".into()))?;
        reply[..r.len()].copy_from_slice(r.as_bytes());
        Ok(r.len())
    }
}

/// Puts then gets objects of `sizes` through `inst` and `server`, checking
/// every byte; returns the number of binding rounds seen.
pub(crate) fn put_get_roundtrip(inst: &hipobj::Instance, server: &Server, sizes: &[usize]) {
    for &size in sizes {
        let src = crate::support::host_buf(size);
        let dst = crate::support::host_buf(size);
        let pattern: Vec<u8> = (0..size).map(|i| (i * 7 + size) as u8).collect();
        crate::support::fill(src, &pattern);
        inst.register_host(src).unwrap();
        inst.register_host(dst).unwrap();
        let key = format!("obj-{size}");
        let mut put = server.request(Action::Put(key.clone()));
        inst.transfer(hipobj::Direction::Put, src.addr(), size, 0, &mut put)
            .unwrap();
        assert_eq!(
            server.objects.lock().unwrap()[&key],
            pattern,
            "PUT of {size} bytes"
        );
        let mut get = server.request(Action::Get(key));
        inst.transfer(hipobj::Direction::Get, dst.addr(), size, 0, &mut get)
            .unwrap();
        assert!(crate::support::read(dst) == pattern, "GET of {size} bytes");
        inst.deregister(src.addr()).unwrap();
        inst.deregister(dst.addr()).unwrap();
    }
}

/// Plays an application that drives a GET itself: a token from
/// `rdma_token`, its own request (sent twice when the server binds), and
/// every reply handed to `handle_token_reply`. Returns the bytes received.
pub(crate) fn app_driven_get(inst: &hipobj::Instance, server: &Server, key: &str, len: usize) -> Vec<u8> {
    let dst = crate::support::host_buf(len);
    inst.register_host(dst).unwrap();
    let token = inst.rdma_token(dst.addr(), len, hipobj::Direction::Get).unwrap();
    let mut request = server.request(Action::Get(key.to_owned()));
    let mut codes = Vec::new();
    loop {
        request.send_request(token.as_str()).unwrap();
        let mut reply = [0u8; 512];
        let n = request.recv_reply(&mut reply).unwrap();
        let code = inst.handle_token_reply(&reply[..n]).unwrap();
        codes.push(code);
        if code != 409 {
            break;
        }
        assert!(codes.len() < 3, "the server asked to bind twice");
    }
    assert_eq!(*codes.last().unwrap(), 200, "codes {codes:?}");
    let got = crate::support::read(dst);
    inst.deregister(dst.addr()).unwrap();
    got
}
