//! One transfer (`hipObjGet`, `hipObjPut`): a leased connection, its grant,
//! the request/reply exchange through the application's `Control`, and the
//! proof of its success.

use std::net::IpAddr;

use hipobj_proto::{Reply, Token};

use super::Instance;
use super::proof::{check_count, grant_of, peer_of, proven_reply};
use crate::buffers::{BufEntry, BufKind, check_get_size, check_size};
use crate::connection::{Connection, Grant, Peer};
use crate::control::Control;
use crate::direction::{Direction, SyncDirection};
use crate::error::{Error, ErrorKind, Result};
use crate::peer::{AllowPeer, Servers};
use crate::pool::Lease;

/// Size of the buffer the reply is read into.
pub(super) const REPLY_CAPACITY: usize = 512;

impl Instance {
    /// Leases a connection whose CQ is empty. A completion before anything
    /// was sent means the QP failed, or a peer wrote with an immediate
    /// outside any transfer (which must not count as a later GET's proof):
    /// such a connection is destroyed and another leased.
    pub(crate) fn acquire_idle(&self) -> Result<Lease> {
        self.check_process()?;
        let mut tries = self.pool.size() + 1;
        loop {
            let mut lease = self.pool.acquire()?;
            match lease.conn().check() {
                Ok(()) => return Ok(lease),
                Err(e) if tries == 0 => return Err(e),
                // Dropping the lease destroys and replaces the connection.
                Err(_) => tries -= 1,
            }
        }
    }

    /// Leases an idle connection and grants `ask` on it under a fresh token:
    /// the first step of a transfer, before anything reaches the server.
    /// A connection that turns out to have died while idle (its QP went to
    /// ERR after the lease's CQ check, so the grant was flushed or refused)
    /// is destroyed with its lease and the step runs again on another, as
    /// [`Instance::acquire_idle`] does for one caught by the check: nothing
    /// was sent, no byte moved. Any other failure is returned with the
    /// lease, whose grant the caller ends.
    fn lease_and_grant(
        &self,
        ask: &Ask<'_>,
        mint: &dyn Fn(u32, u32) -> Token,
    ) -> Result<(Lease, Result<Token>)> {
        let mut tries = self.pool.size() + 1;
        loop {
            let mut lease = self.acquire_idle()?;
            let conn = lease.conn();
            if let Err(e) = ask.ready(conn) {
                return Ok((lease, Err(e)));
            }
            let token = match conn.next_rkey(ask.entry.rkey(ask.dir)) {
                Ok(rkey) => mint(conn.qp_num(), rkey),
                Err(e) => return Ok((lease, Err(e))),
            };
            match conn.open_grant(&ask.grant(token.rkey)) {
                Ok(()) => return Ok((lease, Ok(token))),
                Err(_) if conn.found_dead() && tries > 0 => tries -= 1,
                Err(e) => return Ok((lease, Err(e))),
            }
        }
    }

    /// `hipObjGet` and `hipObjPut`: one transfer of `size` bytes at `offset`
    /// into the buffer registered at `addr`, driven through `control`.
    pub fn transfer(
        &self,
        dir: Direction,
        addr: usize,
        size: usize,
        offset: usize,
        control: &mut dyn Control,
    ) -> Result<()> {
        let entry = self.find_usable(addr)?;
        check_size(size, "transfer")?;
        if dir == Direction::Get {
            check_get_size(size)?;
        }
        entry.check_range(offset, size)?;
        if dir == Direction::Put {
            self.stage(&entry, offset, size, SyncDirection::ToHost)?;
        }
        let ask = Ask {
            entry: &entry,
            dir,
            offset,
            size,
            fallback_servers: self.server_addrs(),
            allow_peer: &self.options.allow_peer,
        };
        let mint = |qpn, rkey| self.mint(qpn, &entry, offset, size, rkey);
        // Until `note_success`, the lease destroys its connection when
        // dropped: every `?` below, and a panic, leave the QP out of RTS.
        let (mut lease, granted) = self.lease_and_grant(&ask, &mint)?;
        let outcome = granted.and_then(|token| run_exchange(&mut lease, &ask, token, &mint, control));
        // Whatever happened, the grant ends before the call returns: the
        // window is invalidated (or the QP's remote access closed). If that
        // fails, the connection is broken and destroyed, which ends it too.
        let closed = lease.conn().close_grant();
        let peer = outcome?;
        closed?;
        lease.conn().check()?;
        if matches!(entry.kind(), BufKind::Device { .. }) {
            self.platform
                .gpu
                .synchronize()
                .map_err(|e| Error::gpu(ErrorKind::RdmaError, "synchronizing the GPU", &e))?;
        }
        lease.note_success(peer.gid);
        drop(lease);
        if dir == Direction::Get {
            self.stage(&entry, offset, size, SyncDirection::ToDevice)?;
        }
        Ok(())
    }
}

fn exchange(control: &mut dyn Control, token: &str) -> Result<Reply> {
    control
        .send_request(token)
        .map_err(|e| Error::new(ErrorKind::S3Error, format!("sending the S3 request failed: {e}")))?;
    let mut buf = [0u8; REPLY_CAPACITY];
    let n = control
        .recv_reply(&mut buf)
        .map_err(|e| Error::new(ErrorKind::S3Error, format!("receiving the S3 reply failed: {e}")))?;
    let reply = buf.get(..n).ok_or_else(|| {
        Error::new(
            ErrorKind::S3Error,
            format!("the reply callback reported {n} bytes, more than the {REPLY_CAPACITY}-byte buffer"),
        )
    })?;
    hipobj_proto::parse_reply(reply).map_err(|e| {
        Error::new(
            ErrorKind::S3Error,
            format!(
                "the x-amz-rdma-reply value {:?} is malformed: {e}",
                String::from_utf8_lossy(reply)
            ),
        )
    })
}

/// One transfer's range and direction: what its grant covers; and which
/// servers its replies may name.
struct Ask<'a> {
    entry: &'a BufEntry,
    dir: Direction,
    offset: usize,
    size: usize,
    /// The instance's server addresses, for a `Control` that names none.
    fallback_servers: Option<Vec<IpAddr>>,
    allow_peer: &'a AllowPeer,
}

impl Ask<'_> {
    fn grant(&self, rkey: u32) -> Grant<'_> {
        grant_of(self.entry, self.dir, self.offset, self.size, rkey)
    }

    /// Readies `conn` to prove this transfer: a GET needs a receive posted
    /// for every WRITE it may take.
    fn ready(&self, conn: &mut Connection) -> Result<()> {
        match self.dir {
            Direction::Get => conn.ready_for_get(),
            Direction::Put => Ok(()),
        }
    }

    /// The servers a reply that just came back through `control` may name:
    /// those of the request it answers, as the control knows them.
    fn servers(&self, control: &dyn Control) -> Option<Vec<IpAddr>> {
        control.server_addrs().or_else(|| self.fallback_servers.clone())
    }
}

/// The request/reply exchange of one transfer (docs/protocol.md §3), and the
/// proof of its success. `token` is the first request's token; `mint`
/// makes another for a QP number and key.
///
/// - The leased connection already grants exactly `ask`'s range and right
///   under `token`'s key, if it is bound ([`Instance::lease_and_grant`]);
///   one in INIT, which nothing can reach, grants once a binding round has
///   connected it.
/// - A 409 from a server the leased connection is not bound to first ends
///   that connection's grant and trades it for one bound to that server,
///   else an unbound one (no binding round spent), which grants under a key
///   of its own, and sends the request again with a token for it.
/// - A 409 for an unbound connection, or one bound to that server, binds it
///   and grants: at most once per transfer.
/// - A success must be the full form, from the bound server QP, with the
///   token's length as its count; a GET's WRITEs WITH IMMEDIATE must have
///   landed exactly the token's range on the connection (docs/protocol.md
///   §2).
///
/// The caller ends the grant, whatever this returns. Returns the server end
/// that completed it.
fn run_exchange(
    lease: &mut Lease,
    ask: &Ask<'_>,
    mut token: Token,
    mint: &dyn Fn(u32, u32) -> Token,
    control: &mut dyn Control,
) -> Result<Peer> {
    let fresh = |conn: &mut Connection| -> Result<Token> {
        let rkey = conn.next_rkey(ask.entry.rkey(ask.dir))?;
        Ok(mint(conn.qp_num(), rkey))
    };
    let mut reply = exchange(control, token.encode().as_str())?;
    let mut swapped = false;
    let mut bound_once = false;
    while let Reply::Bind { token: server, psn } = reply {
        let endpoint = ask.servers(control);
        let servers = Servers {
            endpoint: endpoint.as_deref(),
            allow: ask.allow_peer,
            channel: control.control_channel(),
        };
        let peer = peer_of(&server, servers)?;
        let current = lease.conn().peer();
        let elsewhere = current.is_some_and(|p| p.gid != peer.gid);
        if elsewhere && !swapped {
            // The connection traded away goes back to the pool bound and
            // usable: nothing it granted may outlive this transfer.
            lease.conn().close_grant()?;
        }
        if elsewhere && !swapped && lease.swap_for(peer.gid) {
            swapped = true;
            // The connection traded in must be as idle as a leased one: a
            // completion it took while another transfer held it (a WRITE
            // WITH IMMEDIATE its server sent then) must not pass for this
            // GET's proof. Such a connection is destroyed with the lease.
            lease.conn().check()?;
            ask.ready(lease.conn())?;
            token = fresh(lease.conn())?;
            lease.conn().open_grant(&ask.grant(token.rkey))?;
        } else if bound_once {
            return Err(Error::new(
                ErrorKind::S3Error,
                "the server asked to bind the connection twice in one transfer",
            ));
        } else {
            lease.conn().connect(peer, psn)?;
            // The binding round resends the same token, unless the
            // reconnect had to replace the window (a QP the server's failed
            // RDMA left in ERR): the old key's window is gone.
            if !lease.conn().window_takes(token.rkey) {
                token = fresh(lease.conn())?;
            }
            lease.conn().open_grant(&ask.grant(token.rkey))?;
            bound_once = true;
        }
        reply = exchange(control, token.encode().as_str())?;
    }
    if !reply.is_success() {
        let code = reply.http_code();
        let why = if code == hipobj_proto::REPLY_NOT_IMPLEMENTED {
            "the server declined RDMA (501); fall back to plain HTTP".to_owned()
        } else {
            format!("the server's x-amz-rdma-reply is {code}, not a success")
        };
        return Err(Error::new(ErrorKind::S3Error, why));
    }
    let conn = lease.conn();
    let endpoint = ask.servers(control);
    let servers = Servers {
        endpoint: endpoint.as_deref(),
        allow: ask.allow_peer,
        channel: control.control_channel(),
    };
    let (bound, bytes) = proven_reply(conn, &reply, servers)?;
    check_count(bytes, token.len)?;
    match ask.dir {
        Direction::Get => conn.take_landed(token.rkey, token.len)?,
        Direction::Put => conn.check()?,
    }
    Ok(bound)
}
