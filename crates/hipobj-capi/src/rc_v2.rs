//! hipobj-rc-v2 sessions for C (the `hipObjRcV2*` calls): the table of
//! live session handles, request headers as text lines, and answers read
//! from a response's raw header block. No pointer is read here; `api.rs`
//! does that and calls these.
//!
//! A handle is the address of the session's shared cell, used only as a
//! key into [`SESSIONS`] and never dereferenced, so a stale, forged or
//! double-freed handle is refused instead of read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use hipobj::{Direction, Error, ErrorKind, Instance, RcV2Session};

/// One C session.
#[derive(Debug)]
pub(crate) struct CSession {
    /// The instance the session began on: a call after a shutdown (or
    /// under a later instance) is refused.
    instance: Arc<Instance>,
    session: RcV2Session,
}

type Cell = Arc<Mutex<CSession>>;

/// Live sessions by handle.
static SESSIONS: Mutex<Option<HashMap<usize, Cell>>> = Mutex::new(None);

fn table() -> MutexGuard<'static, Option<HashMap<usize, Cell>>> {
    SESSIONS.lock().unwrap_or_else(PoisonError::into_inner)
}

fn lock(cell: &Cell) -> MutexGuard<'_, CSession> {
    cell.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `HIPOBJ_RCV2_HEADERS_MAX`: room that holds any request's header lines
/// and the NUL, for a bucket of up to 63 bytes and a key of up to 1024
/// (a test checks the worst case).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const HEADERS_MAX: usize = 4096;

fn invalid(why: &str) -> Error {
    Error::new(ErrorKind::InvalidValue, why)
}

/// Starts a session on `inst` and returns its handle.
pub(crate) fn begin(
    inst: Arc<Instance>,
    dir: Direction,
    addr: usize,
    size: usize,
    offset: usize,
) -> Result<usize, Error> {
    let session = inst.rc_v2_session(dir, addr, size, offset)?;
    let cell = Arc::new(Mutex::new(CSession {
        instance: inst,
        session,
    }));
    let handle = Arc::as_ptr(&cell) as usize;
    table().get_or_insert_with(HashMap::new).insert(handle, cell);
    Ok(handle)
}

/// The live session behind `handle`.
fn find(handle: usize) -> Result<Cell, Error> {
    table()
        .as_ref()
        .and_then(|t| t.get(&handle).cloned())
        .ok_or_else(|| invalid("not a live hipobj-rc-v2 session"))
}

/// Runs `f` on the session behind `handle`, which must belong to the
/// current instance (`current`); a session that outlived its instance is
/// given up and the call reports `NotInitialized`.
fn with_live<T>(
    handle: usize,
    current: Result<Arc<Instance>, Error>,
    f: impl FnOnce(&mut RcV2Session) -> Result<T, Error>,
) -> Result<T, Error> {
    let cell = find(handle)?;
    let mut c = lock(&cell);
    match current {
        Ok(i) if Arc::ptr_eq(&i, &c.instance) => f(&mut c.session),
        Ok(_) | Err(_) => {
            c.session.abort();
            Err(Error::new(
                ErrorKind::NotInitialized,
                "hipObject was shut down after this session began",
            ))
        }
    }
}

/// Request headers as the C side gets them: `name: value\n` each.
fn lines(headers: &[(&'static str, String)]) -> String {
    let mut s = String::new();
    for (n, v) in headers {
        s.push_str(n);
        s.push_str(": ");
        s.push_str(v);
        s.push('\n');
    }
    s
}

/// The `x-amz-rdma-*` headers of a raw response header block: one header a
/// line (LF or CRLF), lines without a colon (the status line, the blank
/// end) skipped, names lower-cased, values trimmed of spaces and tabs.
/// Other headers and names that are not UTF-8 are skipped.
pub(crate) fn rdma_headers(block: &[u8]) -> Vec<(String, &[u8])> {
    block
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let colon = line.iter().position(|&b| b == b':')?;
            let name = std::str::from_utf8(trim(&line[..colon])).ok()?;
            let name = name.to_ascii_lowercase();
            name.starts_with(hipobj_proto::rc_v2::HEADER_PREFIX)
                .then(|| (name, trim(&line[colon + 1..])))
        })
        .collect()
}

/// `v` without leading and trailing spaces, tabs and CRs.
fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t' | b'\r', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t' | b'\r'] = v {
        v = rest;
    }
    v
}

/// An HTTP status as the core takes it.
fn status(code: i32) -> Result<u16, Error> {
    u16::try_from(code)
        .ok()
        .filter(|c| (100..=599).contains(c))
        .ok_or_else(|| invalid("an HTTP status is 100 to 599"))
}

/// `hipObjRcV2PrepareHeaders`.
pub(crate) fn prepare_headers(
    handle: usize,
    current: Result<Arc<Instance>, Error>,
    bucket: &str,
    key: &str,
    object_offset: u64,
) -> Result<String, Error> {
    with_live(handle, current, |s| {
        Ok(lines(
            &s.prepare_request(bucket, key, Some(object_offset))?.to_headers(),
        ))
    })
}

/// `hipObjRcV2HandlePrepare`.
pub(crate) fn handle_prepare(
    handle: usize,
    current: Result<Arc<Instance>, Error>,
    code: i32,
    block: &[u8],
) -> Result<(), Error> {
    let code = status(code)?;
    let headers = rdma_headers(block);
    with_live(handle, current, |s| {
        s.prepared_from(code, headers.iter().map(|(n, v)| (n.as_str(), *v)))
    })
}

/// `hipObjRcV2ReadyHeaders`.
pub(crate) fn ready_headers(handle: usize, current: Result<Arc<Instance>, Error>) -> Result<String, Error> {
    with_live(handle, current, |s| Ok(lines(&s.ready_request()?.to_headers())))
}

/// `hipObjRcV2StartWrite`.
pub(crate) fn start(handle: usize, current: Result<Arc<Instance>, Error>) -> Result<(), Error> {
    with_live(handle, current, RcV2Session::start)
}

/// `hipObjRcV2HandleReady`: the bytes moved.
pub(crate) fn handle_ready(
    handle: usize,
    current: Result<Arc<Instance>, Error>,
    code: i32,
    block: &[u8],
) -> Result<u64, Error> {
    let code = status(code)?;
    let headers = rdma_headers(block);
    with_live(handle, current, |s| {
        s.finish_from(code, headers.iter().map(|(n, v)| (n.as_str(), *v)))
    })
}

/// `hipObjRcV2CancelHeaders`: gives the session up, and returns the
/// CANCEL's lines, or "" when none is owed. Needs no instance.
pub(crate) fn cancel_headers(handle: usize) -> Result<String, Error> {
    let cell = find(handle)?;
    let mut c = lock(&cell);
    c.session.abort();
    Ok(c.session
        .cancel_request()
        .map(|r| lines(&r.to_headers()))
        .unwrap_or_default())
}

/// `hipObjRcV2End`: removes the session and ends it. A call still running
/// on it elsewhere keeps it until that call returns.
pub(crate) fn end(handle: usize) -> Result<(), Error> {
    let cell = table()
        .as_mut()
        .and_then(|t| t.remove(&handle))
        .ok_or_else(|| invalid("not a live hipobj-rc-v2 session"))?;
    lock(&cell).session.abort();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_curl_header_block_yields_only_the_rdma_headers() {
        let block = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Amz-Rdma-Session:  00ff \r\nx-amz-rdma-psn:\tabc\r\nbad line\r\n\xff: x\r\n\r\n";
        let h = rdma_headers(block);
        assert_eq!(
            h,
            vec![
                ("x-amz-rdma-session".to_owned(), &b"00ff"[..]),
                ("x-amz-rdma-psn".to_owned(), &b"abc"[..]),
            ]
        );
        assert!(rdma_headers(b"").is_empty());
        assert!(rdma_headers(b":\n:::").is_empty());
    }

    #[test]
    fn statuses_outside_http_are_refused() {
        for bad in [-1, 0, 99, 600, 70_000] {
            assert_eq!(status(bad).map_err(|e| e.kind()), Err(ErrorKind::InvalidValue));
        }
        assert_eq!(status(200).ok(), Some(200));
    }

    #[test]
    fn the_largest_prepare_fits_headers_max() {
        use hipobj_proto::rc_v2::{Cookie, Direction, ObjectPath, PrepareRequest, Psn, Size};
        // Every key byte percent-encoded: three bytes on the wire each.
        let key = "\u{1}".repeat(1024);
        let r = PrepareRequest {
            op: Direction::Put,
            target: ObjectPath::new(&"b".repeat(63), &key).expect("a target"),
            size: Size::new(u64::from(hipobj_proto::rc_v2::MAX_SIZE)).expect("a size"),
            offset: Some(u64::MAX),
            token: hipobj_proto::Token {
                transport: hipobj_proto::Transport::Rc,
                qpn: u32::MAX,
                gid: [0xff; 16],
                rkey: u32::MAX,
                addr: u64::MAX,
                len: u64::MAX,
                port: u8::MAX,
                lid: u16::MAX,
            },
            psn: Psn::new(0xff_ffff).expect("a PSN"),
            cookie: Cookie::new(u32::MAX).expect("a cookie"),
            client_mr: None,
            part: None,
        };
        let text = lines(&r.to_headers());
        assert!(text.len() > 3 * 1024, "the key is encoded: {}", text.len());
        assert!(text.len() < HEADERS_MAX, "{} bytes", text.len());
    }

    #[test]
    fn lines_end_each_header_with_a_newline() {
        assert_eq!(lines(&[("a", "1".into()), ("b", "x y".into())]), "a: 1\nb: x y\n");
    }
}
