//! What a server's reply may claim, checked before it is believed: the
//! server end a token names, the full form of a success from the bound
//! queue pair, and its byte count; and what a grant covers. Shared by the
//! transfer sequence and the application-driven tokens.

use hipobj_proto::{Reply, Token, Transport};

use crate::buffers::BufEntry;
use crate::connection::{Connection, Grant, Peer};
use crate::direction::Direction;
use crate::error::{Error, ErrorKind, Result};
use crate::peer::Servers;

/// What a transfer of `size` bytes at `offset` in direction `dir` grants:
/// exactly that range, with only the right the server's RDMA needs.
pub(super) fn grant_of(entry: &BufEntry, dir: Direction, offset: usize, size: usize, rkey: u32) -> Grant<'_> {
    Grant {
        mr: entry.window_mr(),
        addr: entry.token_addr().wrapping_add(offset as u64),
        len: size as u64,
        access: match dir {
            Direction::Get => hipobj_platform::AccessFlags::REMOTE_WRITE,
            Direction::Put => hipobj_platform::AccessFlags::REMOTE_READ,
        },
        rkey,
    }
}

/// The server end a server token names, after checking that it can be one:
/// an RC QP number in 2..2^24 (0 and 1 are special QPs), a unicast GID that
/// is not `::` (nor an IPv4-mapped unspecified, multicast or broadcast
/// address), and a port of at least 1, on a server `servers` accepts
/// (crate::peer). Anything else fails the call before any QP is touched.
pub(super) fn peer_of(token: &Token, servers: Servers<'_>) -> Result<Peer> {
    let bad = |why: String| {
        Err(Error::new(
            ErrorKind::S3Error,
            format!("the server's token is unusable: {why}"),
        ))
    };
    if token.transport != Transport::Rc {
        return bad("it is not for a reliable connection".into());
    }
    if !(2..=hipobj_proto::PSN_MAX).contains(&token.qpn) {
        return bad(format!("QP number {:#x} is not in 2..2^24", token.qpn));
    }
    let gid = hipobj_platform::Gid(token.gid);
    if token.gid == [0; 16] {
        return bad("its GID is ::".into());
    }
    if token.gid[0] == 0xff {
        return bad(format!("its GID {gid} is multicast"));
    }
    if let Some(v4) = gid.to_ipv4()
        && (v4.is_unspecified() || v4.is_multicast() || v4.is_broadcast())
    {
        return bad(format!("its GID {gid} maps {v4}, which is not a unicast address"));
    }
    if token.port == 0 {
        return bad("its port is 0".into());
    }
    servers.check(gid)?;
    Ok(Peer { gid, qpn: token.qpn })
}

/// Checks a success reply before anything else is believed: it must be the
/// full form (`NNN:<token>:<count>`, docs/protocol.md §2), on a connection
/// that is bound, naming the server QP it is bound to. Returns that server
/// end and the count.
pub(super) fn proven_reply(conn: &Connection, reply: &Reply, servers: Servers<'_>) -> Result<(Peer, u64)> {
    let Reply::Done { token, bytes, .. } = *reply else {
        return Err(Error::new(
            ErrorKind::RdmaError,
            format!(
                "the server's success reply {reply} names no server queue pair and byte count; anyone can write that, so it proves nothing"
            ),
        ));
    };
    let bound = conn.peer().ok_or_else(|| {
        Error::new(
            ErrorKind::RdmaError,
            "the server reported success, but the connection was never bound to it, so no RDMA can have happened",
        )
    })?;
    if peer_of(&token, servers)? != bound {
        return Err(Error::new(
            ErrorKind::RdmaError,
            "the server answered from a different queue pair than the connection is bound to",
        ));
    }
    Ok((bound, bytes))
}

/// A success must count exactly the bytes asked for. Fewer is the object
/// (or range) ending early, an S3-level shortfall; more cannot have fit in
/// the token's range, so the server is lying.
pub(super) fn check_count(bytes: u64, asked: u64) -> Result<()> {
    if bytes < asked {
        return Err(Error::new(
            ErrorKind::S3Error,
            format!(
                "the server moved {bytes} bytes of the {asked} asked for (the object or range is shorter)"
            ),
        ));
    }
    if bytes > asked {
        return Err(Error::new(
            ErrorKind::RdmaError,
            format!("the server claims to have moved {bytes} bytes, more than the {asked} the token allows"),
        ));
    }
    Ok(())
}
