//! Application-driven tokens (`hipObjGetRdmaToken`, `hipObjPutRdmaToken`,
//! `hipObjHandleRdmaReply`): the token connection, the one grant it holds,
//! and the checks of the replies that come back for it.

use std::sync::{Arc, MutexGuard, PoisonError};

use hipobj_proto::{Reply, Token};

use super::Instance;
use super::proof::{check_count, grant_of, peer_of, proven_reply};
use crate::buffers::{BufEntry, check_get_size, check_size};
use crate::connection::Connection;
use crate::direction::Direction;
use crate::error::{Error, ErrorKind, Result};
use crate::peer::{ControlChannel, Servers};

impl Instance {
    fn lock_token_conn(&self) -> MutexGuard<'_, TokenConn> {
        self.token_conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `hipObjGetRdmaToken`: a token for the first `size` bytes of a
    /// registered buffer, naming the token connection, that lets the server
    /// do what a transfer in direction `dir` needs and nothing else: with
    /// memory windows, a window over exactly those bytes with only that
    /// right, bound on the token connection, until
    /// [`Instance::release_token`], a failed reply, the buffer's
    /// deregistration, or the next token (one grant per token connection: a
    /// new token revokes the previous one, and a reply is checked against
    /// the latest token only). A GET token's connection has a receive
    /// posted for each WRITE the GET may take (docs/protocol.md §2).
    pub fn rdma_token(&self, addr: usize, size: usize, dir: Direction) -> Result<hipobj_proto::HexToken> {
        let entry = self.find_usable(addr)?;
        check_size(size, "token")?;
        if dir == Direction::Get {
            check_get_size(size)?;
        }
        entry.check_range(0, size)?;
        let mut tc = self.lock_token_conn();
        tc.grant = None;
        // The previous token's grant ends here. A connection that failed
        // while idle (or took a stray completion) goes back to INIT, so
        // nothing that reached it earlier can count for this token.
        let reusable = tc
            .conn
            .as_mut()
            .is_some_and(|c| c.close_grant().is_ok() && c.refresh().is_ok() && !c.is_broken());
        if !reusable {
            self.replace_token_conn(&mut tc)?;
        }
        let conn = tc
            .conn
            .as_mut()
            .ok_or_else(|| Error::new(ErrorKind::RdmaError, "the token connection could not be rebuilt"))?;
        if dir == Direction::Get
            && let Err(e) = conn.ready_for_get()
        {
            let _ = self.replace_token_conn(&mut tc);
            return Err(e);
        }
        let granted = conn.next_rkey(entry.rkey(dir)).and_then(|rkey| {
            conn.open_grant(&grant_of(&entry, dir, 0, size, rkey))
                .map(|()| rkey)
        });
        let rkey = match granted {
            Ok(rkey) => rkey,
            Err(e) => {
                let _ = self.replace_token_conn(&mut tc);
                return Err(e);
            }
        };
        let token = self.mint(conn.qp_num(), &entry, 0, size, rkey).encode();
        tc.grant = Some(TokenGrant {
            entry,
            dir,
            size,
            rkey,
        });
        tc.may_bind = true;
        Ok(token)
    }

    /// `hipObjPutRdmaToken`: ends what the token grants (invalidates its
    /// window, or closes the token connection's remote access). A token that
    /// is not the latest, or not ours, grants nothing already.
    pub fn release_token(&self, token: &str) {
        if self.forked() {
            return;
        }
        let Ok(t) = Token::decode(token.as_bytes()) else {
            return;
        };
        self.revoke_token_grant(|qpn, g| g.rkey == t.rkey && t.qpn == qpn);
    }

    /// Ends the application-driven grant if `which` (given the token
    /// connection's QP number) selects it; a connection that cannot end it
    /// is replaced.
    /// Ends the application-driven grant if it is over the buffer
    /// registered at `addr` (which is being deregistered).
    pub(super) fn revoke_token_for_buffer(&self, addr: usize) {
        self.revoke_token_grant(|_, g| g.entry.addr() == addr);
    }

    fn revoke_token_grant(&self, which: impl Fn(u32, &TokenGrant) -> bool) {
        let mut tc = self.lock_token_conn();
        let TokenConn { conn, grant, .. } = &mut *tc;
        let Some(c) = conn.as_mut() else {
            *grant = None;
            return;
        };
        if grant.as_ref().is_some_and(|g| which(c.qp_num(), g)) {
            *grant = None;
            if c.close_grant().is_err() {
                let _ = self.replace_token_conn(&mut tc);
            }
        }
    }

    /// Swaps the token connection for a new one, so that the server's
    /// binding to the old QP number can never reach a buffer again. The old
    /// QP leaves RTS first (or is destroyed, which ends its window's binding
    /// too), so a replacement that fails leaves nothing a server can write
    /// through; the token it granted is forgotten.
    fn replace_token_conn(&self, tc: &mut TokenConn) -> Result<()> {
        tc.grant = None;
        tc.may_bind = false;
        if let Some(mut old) = tc.conn.take() {
            // Reset is enough to stop it; the QP itself goes with `old`.
            old.disable();
            drop(old);
        }
        tc.conn = Some(Connection::new(self.device.clone())?);
        Ok(())
    }

    /// `hipObjHandleRdmaReply`: acts on the server's reply to a request that
    /// carried a token from [`Instance::rdma_token`], and returns its code.
    ///
    /// A binding reply (`409:<token>:<psn>`) connects the token connection to
    /// the server QP it names, grants what the latest token names under the
    /// key it already carries, and returns 409: send the same request again.
    /// Only one binding round is allowed per token (or per completed
    /// transfer): a second 409 in a row fails. A success is accepted only in
    /// its full form, checked as a transfer's is (docs/protocol.md §3)
    /// against the latest token (the only one that grants anything): it
    /// names the server QP the token connection is bound to, its byte count
    /// is that token's length, and for a GET token WRITEs WITH IMMEDIATE
    /// that tile the token's range completed on the connection (for a PUT
    /// token, nothing did). Any other reply, or a failed check, is an error:
    /// the grant ends and the token connection is replaced, so the server's
    /// binding to it can never write the buffer later.
    pub fn handle_token_reply(&self, reply: &[u8]) -> Result<u16> {
        self.check_process()?;
        let reply = hipobj_proto::parse_reply(reply).map_err(|e| {
            Error::invalid(format!(
                "the x-amz-rdma-reply value {:?} is malformed: {e}",
                String::from_utf8_lossy(reply)
            ))
        })?;
        let endpoint = self.server_addrs();
        // The C API's exchange: nothing says how it went (docs/protocol.md §8).
        let servers = self.servers(endpoint.as_deref(), ControlChannel::Unauthenticated);
        let mut tc = self.lock_token_conn();
        let outcome = check_token_reply(&mut tc, &reply, servers);
        match outcome {
            Ok(()) => {
                // After a completed transfer the next exchange may bind once.
                tc.may_bind = reply.is_success();
                Ok(reply.http_code())
            }
            Err(e) => {
                // A replacement that fails leaves no connection; the next
                // token request tries again.
                tc.grant = None;
                if let Some(c) = tc.conn.as_mut() {
                    let _ = c.close_grant();
                }
                let _ = self.replace_token_conn(&mut tc);
                Err(e)
            }
        }
    }
}

/// An application-driven token's grant: the latest token minted on the
/// token connection, and what its reply must match.
#[derive(Debug)]
struct TokenGrant {
    entry: Arc<BufEntry>,
    dir: Direction,
    size: usize,
    rkey: u32,
}

/// The token connection and the one token it grants.
#[derive(Debug)]
pub(super) struct TokenConn {
    /// `None` only after a replacement failed.
    conn: Option<Connection>,
    /// What the latest token grants, until `hipObjPutRdmaToken`, a failed
    /// reply, the buffer's deregistration or the next token.
    grant: Option<TokenGrant>,
    /// Whether the next 409 may bind: set by a new token or a completed
    /// transfer, cleared by any reply.
    may_bind: bool,
}

impl TokenConn {
    /// A token connection that grants nothing yet.
    pub(super) fn new(conn: Connection) -> Self {
        Self {
            conn: Some(conn),
            grant: None,
            may_bind: false,
        }
    }
}

/// Checks a reply to a request that carried the latest token, and acts on
/// a binding round (see [`Instance::handle_token_reply`]).
fn check_token_reply(tc: &mut TokenConn, reply: &Reply, servers: Servers<'_>) -> Result<()> {
    let may_bind = std::mem::replace(&mut tc.may_bind, false);
    let TokenConn { conn, grant, .. } = tc;
    let conn = conn.as_mut().ok_or_else(|| {
        Error::new(
            ErrorKind::RdmaError,
            "the token connection is gone (its replacement failed); get a new token",
        )
    })?;
    match *reply {
        Reply::Bind { token, psn } => {
            if !may_bind {
                return Err(Error::new(
                    ErrorKind::S3Error,
                    "the server asked to bind the token connection again: one binding round per token",
                ));
            }
            conn.connect(peer_of(&token, servers)?, psn)?;
            // Bound now: grant what the outstanding token names, under the
            // key it already carries, before the application sends it again.
            match grant.as_ref() {
                // Binding had to replace the connection's window (its QP had
                // failed, and a failed QP cannot invalidate): the token's key
                // named the old window, so it grants nothing any more.
                Some(g) if !conn.window_takes(g.rkey) => Err(Error::new(
                    ErrorKind::RdmaError,
                    "binding replaced the token connection's memory window (its queue pair had failed), so the token's key grants nothing: get a new token",
                )),
                Some(g) => conn.open_grant(&grant_of(&g.entry, g.dir, 0, g.size, g.rkey)),
                None => Ok(()),
            }
        }
        r if r.is_success() => {
            let (_, bytes) = proven_reply(conn, &r, servers)?;
            let Some(g) = grant.as_ref() else {
                return Err(Error::new(
                    ErrorKind::RdmaError,
                    "the server reported success, but no live token grants anything (released, revoked or never minted)",
                ));
            };
            // A GET proves itself by its WRITE WITH IMMEDIATE carrying the
            // token's key; a PUT by a count equal to the token's length, with
            // nothing on the CQ.
            // The server's count first: a short object is an S3 error.
            check_count(bytes, g.size as u64)?;
            match g.dir {
                Direction::Get => conn.take_landed(g.rkey, g.size as u64),
                Direction::Put => conn.check(),
            }
        }
        r => Err(Error::new(
            ErrorKind::S3Error,
            format!(
                "the server's x-amz-rdma-reply is {}, not a success",
                r.http_code()
            ),
        )),
    }
}
