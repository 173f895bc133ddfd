//! An in-process S3 server double for transfer tests: the server's RDMA half
//! (`hipobj_peer::RdmaPeer`) behind the `Control` seam, with objects kept in
//! memory. It answers exactly as docs/protocol.md says a server must.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hipobj::{Control, ControlError};
use hipobj_peer::{RdmaPeer, Step};
use hipobj_proto::Token;

/// Objects by key, and the peer that moves them.
pub struct Server {
    pub peer: Arc<RdmaPeer>,
    pub objects: Mutex<HashMap<String, Vec<u8>>>,
}

/// What one request asks for.
#[derive(Clone, Debug)]
pub enum Op {
    /// GetObject of a key.
    Get(String),
    /// PutObject of a key.
    Put(String),
}

/// One S3 request against the server, as the client's callbacks drive it.
pub struct Request<'a> {
    pub server: &'a Server,
    pub op: Op,
    pub reply: Option<String>,
    pub rounds: usize,
}

impl Server {
    pub fn new(peer: RdmaPeer) -> Self {
        Self {
            peer: Arc::new(peer),
            objects: Mutex::new(HashMap::new()),
        }
    }

    pub fn request(&self, op: Op) -> Request<'_> {
        Request {
            server: self,
            op,
            reply: None,
            rounds: 0,
        }
    }

    fn serve(&self, op: &Op, token: &Token) -> Result<String, String> {
        match self.move_bytes(op, token) {
            // As the real server does: an RDMA that failed on a binding
            // dropped it; bind afresh and answer 409.
            Err(hipobj_peer::PeerError::Transfer(_)) => match self.peer.step(token) {
                Ok(Step::Bind(reply)) => Ok(reply.to_string()),
                _ => Err("RDMATransferFailed".into()),
            },
            Err(e) => Err(e.to_string()),
            Ok(reply) => Ok(reply),
        }
    }

    fn move_bytes(&self, op: &Op, token: &Token) -> Result<String, hipobj_peer::PeerError> {
        let peer = &self.peer;
        if let Step::Bind(reply) = peer.step(token)? {
            return Ok(reply.to_string());
        }
        match op {
            Op::Get(key) => {
                let data = self
                    .objects
                    .lock()
                    .unwrap()
                    .get(key)
                    .cloned()
                    .ok_or_else(|| hipobj_peer::PeerError::InvalidToken("NoSuchKey".into()))?;
                let n = data.len() as u64;
                let moved = peer.write_to_client(token, n, &mut |off, chunk| {
                    let off = off as usize;
                    chunk.copy_from_slice(&data[off..off + chunk.len()]);
                    Ok(())
                })?;
                Ok(peer.success_reply(token, 200, moved)?.to_string())
            }
            Op::Put(key) => {
                let mut body = Vec::with_capacity(token.len as usize);
                let moved = peer.read_from_client(token, token.len, &mut |_, chunk| {
                    body.extend_from_slice(chunk);
                    Ok(())
                })?;
                self.objects.lock().unwrap().insert(key.clone(), body);
                Ok(peer.success_reply(token, 200, moved)?.to_string())
            }
        }
    }
}

impl Control for Request<'_> {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        self.rounds += 1;
        let token = Token::decode(token.as_bytes()).map_err(|e| ControlError(e.to_string()))?;
        // An S3 error carries no x-amz-rdma-reply: recv_reply then fails.
        self.reply = self.server.serve(&self.op, &token).ok();
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
pub fn put_get_roundtrip(inst: &hipobj::Instance, server: &Server, sizes: &[usize]) {
    for &size in sizes {
        let src = crate::support::host_buf(size);
        let dst = crate::support::host_buf(size);
        let pattern: Vec<u8> = (0..size).map(|i| (i * 7 + size) as u8).collect();
        crate::support::fill(src, &pattern);
        inst.register_host(src).unwrap();
        inst.register_host(dst).unwrap();
        let key = format!("obj-{size}");
        let mut put = server.request(Op::Put(key.clone()));
        inst.transfer(hipobj::Direction::Put, src.addr(), size, 0, &mut put)
            .unwrap();
        assert_eq!(
            server.objects.lock().unwrap()[&key],
            pattern,
            "PUT of {size} bytes"
        );
        let mut get = server.request(Op::Get(key));
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
pub fn app_driven_get(inst: &hipobj::Instance, server: &Server, key: &str, len: usize) -> Vec<u8> {
    let dst = crate::support::host_buf(len);
    inst.register_host(dst).unwrap();
    let token = inst.rdma_token(dst.addr(), len, hipobj::Direction::Get).unwrap();
    let mut request = server.request(Op::Get(key.to_owned()));
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
