//! One large transfer as many: a GetObject split into ranged GETs and a
//! PutObject into the parts of a multipart upload, several in flight, each
//! a transfer of its own (its own token, on its own connection and QP from
//! the hipObject client's pool), all landing in one registration at their
//! offsets.
//!
//! - The first part goes alone: it finds the protocol (the probe, the
//!   binding exchange) and the server's limit on one transfer. A part the
//!   server refuses for its length (`400 InvalidRDMAToken` naming "this
//!   server's limit of N", or `413`) is tried again smaller, and the limit
//!   is remembered for the endpoint (this client and its clones); no part
//!   is ever sent over plain HTTP because of it.
//! - The rest go [`Parallel::in_flight`] at a time once the first moved by
//!   RDMA, over the binding exchange or over hipobj-rc-v2 (each part a v2
//!   session of its own: its own QP, its own server session; a PUT's parts
//!   only where the server advertised the `mp` extension). Plain HTTP
//!   moves one transfer at a time, so more parts would only add requests:
//!   the rest of a GET goes as one ranged GET (or as few as the server's
//!   limit allows).
//! - Each part is retried as any transfer is ([`crate::TokenRetries`]:
//!   with a fresh token, only when no byte can have moved). The call
//!   succeeds only when every part did, each with exactly its bytes and,
//!   for a GET, the same ETag (else the object changed meanwhile); on the
//!   first failure no new part starts, and the call fails. A failed
//!   multipart upload is aborted.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use hipobj::{ErrorKind, Registration};

use crate::error::{Error, Result};
use crate::{Protocol, RdmaS3Client, S3Call, Span, Transfer, completed_part};

/// How a large transfer is split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parallel {
    /// Bytes per part (the last may be shorter); a server's smaller limit,
    /// once learned, wins. A multipart upload's parts but the last must be
    /// at least 5 MiB on S3.
    pub part_size: usize,
    /// Parts in flight at once (at least 1). Each takes a connection of the
    /// hipObject client's pool (`HIPOBJ_MAX_TRANSFERS`, 16 by default).
    pub in_flight: usize,
}

impl Parallel {
    /// The default part size: see docs/performance.md, "Parts in flight".
    pub const DEFAULT_PART_SIZE: usize = 16 << 20;
    /// The default parts in flight (docs/performance.md).
    pub const DEFAULT_IN_FLIGHT: usize = 4;
}

impl Default for Parallel {
    fn default() -> Self {
        Self {
            part_size: Self::DEFAULT_PART_SIZE,
            in_flight: Self::DEFAULT_IN_FLIGHT,
        }
    }
}

/// No limit learned below this: a server that refuses a 64 KiB transfer
/// for its length is refusing something else.
const SMALLEST_PART: u64 = 64 << 10;

/// The largest transfer the endpoint was seen to accept (0: none learned),
/// shared by a client's clones.
#[derive(Clone, Debug, Default)]
pub(crate) struct Limit(Arc<AtomicU64>);

impl Limit {
    fn get(&self) -> Option<u64> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n),
        }
    }

    fn lower_to(&self, n: u64) {
        let _ = self.0.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
            (old == 0 || n < old).then_some(n)
        });
    }
}

/// The limit that an error refusing a `tried`-byte transfer for its length
/// names, or `None` when it is no such refusal.
pub(crate) fn refused_length(e: &Error, tried: u64) -> Option<u64> {
    let named = match (e.status(), e.s3_code()) {
        (Some(413), _) => Some(named_limit(e.detail()).unwrap_or(tried / 2)),
        (Some(400), Some("InvalidRDMAToken")) if e.detail().contains("limit of") => named_limit(e.detail()),
        _ => None,
    }?;
    (named >= SMALLEST_PART && named < tried).then_some(named)
}

/// N of "limit of N" in a server's message.
fn named_limit(detail: &str) -> Option<u64> {
    let rest = &detail[detail.find("limit of ")? + "limit of ".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// What the parts of one call came to, folded into one [`Transfer`].
#[derive(Default)]
struct Summary {
    bytes: u64,
    etag: Option<Option<String>>,
    rdma: bool,
    declined: Option<String>,
    object_size: Option<u64>,
    parts: u32,
}

impl Summary {
    fn add(&mut self, t: &Transfer, want: usize, op: &str, check_etag: bool) -> Result<()> {
        if t.bytes != want as u64 {
            return Err(Error::new(
                ErrorKind::S3Error,
                format!(
                    "{op}: a part moved {} bytes where {want} were asked for; did the object change meanwhile?",
                    t.bytes
                ),
            ));
        }
        if check_etag {
            match &self.etag {
                Some(e) if *e != t.etag => {
                    return Err(Error::new(
                        ErrorKind::S3Error,
                        format!(
                            "{op}: the parts came from different versions of the object (ETag {:?}, then {:?}): it changed while it was read",
                            e, t.etag
                        ),
                    ));
                }
                Some(_) => {}
                None => self.etag = Some(t.etag.clone()),
            }
        }
        self.bytes += t.bytes;
        self.rdma = if self.parts == 0 {
            t.rdma
        } else {
            self.rdma && t.rdma
        };
        if self.declined.is_none() {
            self.declined.clone_from(&t.declined);
        }
        self.object_size = self.object_size.or(t.object_size);
        self.parts += 1;
        Ok(())
    }

    fn transfer(self, status: u16) -> Transfer {
        Transfer {
            bytes: self.bytes,
            etag: self.etag.flatten(),
            rdma: self.rdma,
            declined: self.declined,
            object_size: self.object_size,
            status,
        }
    }
}

/// Splits `len` bytes from `from` into parts of `part` bytes.
fn split(from: usize, len: usize, part: usize) -> Vec<(usize, usize)> {
    let part = part.max(1);
    let mut out = Vec::new();
    let mut at = from;
    while at < len {
        let n = part.min(len - at);
        out.push((at, n));
        at += n;
    }
    out
}

/// Bytes per part of an upload of `len` bytes, parts of `asked` bytes
/// wanted and `part` allowed now. Once a server's limit made `part`
/// smaller than asked, `len` is shared evenly among as few parts as the
/// limit allows, so that no part is left a short remainder: every part of
/// a multipart upload but its last must be 5 MiB on S3, and a caller that
/// uploads in windows (the CLI) makes a window's last part a middle one.
fn upload_part_len(asked: usize, part: usize, len: usize) -> usize {
    let part = part.max(1);
    if part >= asked {
        return part.min(len);
    }
    len.div_ceil(len.div_ceil(part))
}

/// Runs `call` on every part, `in_flight` at a time, on scoped threads;
/// the first error stops new parts from starting and is the result.
fn run_parallel<T: Send>(
    parts: &[(usize, usize)],
    in_flight: usize,
    call: impl Fn(usize, usize, usize) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let results: Mutex<Vec<Option<T>>> = Mutex::new((0..parts.len()).map(|_| None).collect());
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..in_flight.clamp(1, parts.len().max(1)) {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(at, n)) = parts.get(i) else {
                        return;
                    };
                    match call(i, at, n) {
                        Ok(t) => {
                            if let Some(slot) =
                                results.lock().unwrap_or_else(PoisonError::into_inner).get_mut(i)
                            {
                                *slot = Some(t);
                            }
                        }
                        Err(e) => {
                            stop.store(true, Ordering::Relaxed);
                            first_error
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .get_or_insert(e);
                            return;
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = first_error.into_inner().unwrap_or_else(PoisonError::into_inner) {
        return Err(e);
    }
    results
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
        .into_iter()
        .map(|t| t.ok_or_else(|| Error::new(ErrorKind::InternalError, "a part was never run")))
        .collect()
}

fn range_of(first: u64, at: usize, n: usize) -> String {
    let start = first + at as u64;
    format!("bytes={start}-{}", start + n as u64 - 1)
}

impl RdmaS3Client {
    /// This client with `parallel` as the way it splits large transfers
    /// (see [`Parallel`]).
    #[must_use]
    pub fn parallel(mut self, parallel: Parallel) -> Self {
        self.parallel = Parallel {
            part_size: parallel.part_size.max(1),
            in_flight: parallel.in_flight.max(1),
        };
        self
    }

    /// How this client splits large transfers.
    pub fn parallel_settings(&self) -> Parallel {
        self.parallel
    }

    /// The largest transfer the endpoint was seen to accept, once one was
    /// refused for its length (shared by this client's clones).
    pub fn learned_limit(&self) -> Option<u64> {
        self.limit.get()
    }

    /// Bytes per part now: the part size, or the endpoint's limit if lower.
    pub(crate) fn part_len(&self) -> usize {
        let p = self.parallel.part_size;
        match self.limit.get().and_then(|l| usize::try_from(l).ok()) {
            Some(l) => p.min(l).max(1),
            None => p,
        }
    }

    /// Bytes per ranged GET to an endpoint known to speak plain HTTP, whose
    /// transfers go one at a time: as many as its limit allows
    /// (`usize::MAX` when none was learned), as more parts would only add
    /// requests. `None` for the RDMA protocols, whose parts go in flight.
    fn serial_part_len(&self) -> Option<usize> {
        match self.protocol.get() {
            Protocol::Plain(_) => Some(
                self.limit
                    .get()
                    .and_then(|l| usize::try_from(l).ok())
                    .unwrap_or(usize::MAX),
            ),
            Protocol::Unknown | Protocol::Binding | Protocol::RcV2 => None,
        }
    }

    /// Whether the parts after a first that moved by RDMA (`rdma`) go in
    /// flight: over either RDMA protocol, each part its own transfer.
    fn parts_in_flight(&self, rdma: bool) -> bool {
        rdma && matches!(self.protocol.get(), Protocol::Binding | Protocol::RcV2)
    }

    /// Notes the limit `e` names when it refused a `tried`-byte transfer
    /// for its length; says whether it did.
    pub(crate) fn learn_limit(&self, e: &Error, tried: usize) -> bool {
        match refused_length(e, tried as u64) {
            Some(n) => {
                self.limit.lower_to(n);
                true
            }
            None => false,
        }
    }

    /// Whether a whole-object transfer of `len` bytes (a PutObject when
    /// `put`) is split.
    pub(crate) fn splits(&self, len: usize, put: bool) -> bool {
        len > self.part_len()
            && self.args.is_default()
            && match self.protocol.get() {
                Protocol::Unknown | Protocol::Binding => true,
                // Parts in flight, each a session; a PUT only where parts
                // go by RDMA (`mp`).
                Protocol::RcV2 => !put || self.protocol.v2_parts(),
                Protocol::Plain(_) => false,
            }
    }

    /// GetObject of the whole object into `at` of `reg`, in parts: a
    /// HeadObject finds its size first (which must fit `at.len`).
    pub(crate) fn get_split(
        &self,
        reg: &mut Registration<'_>,
        at: Span,
        bucket: &str,
        key: &str,
    ) -> Result<Transfer> {
        let size = self.object_size(bucket, key)?;
        let n = usize::try_from(size)
            .ok()
            .filter(|&n| n <= at.len)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::SizeTooLarge,
                    format!(
                        "the object ({size} bytes) is larger than the {}-byte buffer",
                        at.len
                    ),
                )
            })?;
        if n == 0 {
            return self.get_single(reg, at, bucket, key, None);
        }
        let mut t = self.get_ranges(
            reg,
            Span {
                offset: at.offset,
                len: n,
            },
            bucket,
            key,
            0,
        )?;
        t.object_size = Some(size);
        t.status = 200;
        Ok(t)
    }

    /// GetObject of bytes `first..first + at.len` of the object into `at`
    /// of `reg`, split into ranged GETs of [`Parallel::part_size`] (or the
    /// server's limit), [`Parallel::in_flight`] at a time. Succeeds only
    /// when every part moved exactly its bytes, all of the same ETag.
    pub fn get_ranges(
        &self,
        reg: &mut Registration<'_>,
        at: Span,
        bucket: &str,
        key: &str,
        first: u64,
    ) -> Result<Transfer> {
        if at.len == 0 || at.offset.checked_add(at.len).is_none_or(|e| e > reg.len()) {
            return Err(Error::new(
                ErrorKind::InvalidValue,
                "the span is empty or runs past the registration's end",
            ));
        }
        let mut sum = Summary::default();
        // The first part alone: it finds the protocol and the limit.
        let done = loop {
            let n = self
                .serial_part_len()
                .unwrap_or_else(|| self.part_len())
                .min(at.len);
            let range = range_of(first, 0, n);
            let span = Span {
                offset: at.offset,
                len: n,
            };
            match self.get_single(reg, span, bucket, key, Some(&range)) {
                Ok(t) => {
                    sum.add(&t, n, "GetObject", true)?;
                    break n;
                }
                Err(e) if self.learn_limit(&e, n) => {}
                Err(e) => return Err(e),
            }
        };
        let in_parallel = self.parts_in_flight(sum.rdma);
        let v2 = self.protocol.get() == Protocol::RcV2;
        let part = if in_parallel {
            self.part_len()
        } else {
            self.serial_part_len().unwrap_or(at.len)
        };
        let rest = split(done, at.len, part);
        if in_parallel {
            let shared: &Registration<'_> = reg;
            let got = run_parallel(&rest, self.parallel.in_flight, |_, off, n| {
                let range = range_of(first, off, n);
                let span = Span {
                    offset: at.offset + off,
                    len: n,
                };
                if v2 {
                    self.v2_get_part(shared, span, bucket, key, &range)
                } else {
                    self.get_part_rdma(shared, span, bucket, key, &range)
                }
            })?;
            for (t, &(_, n)) in got.iter().zip(&rest) {
                sum.add(t, n, "GetObject", true)?;
            }
        } else {
            for &(off, n) in &rest {
                let range = range_of(first, off, n);
                let span = Span {
                    offset: at.offset + off,
                    len: n,
                };
                let t = self.get_single(reg, span, bucket, key, Some(&range))?;
                sum.add(&t, n, "GetObject", true)?;
            }
        }
        Ok(sum.transfer(206))
    }

    /// One ranged GET by the binding exchange into a part of a shared
    /// registration; a decline here fails (the first part moved by RDMA).
    fn get_part_rdma(
        &self,
        reg: &Registration<'_>,
        at: Span,
        bucket: &str,
        key: &str,
        range: &str,
    ) -> Result<Transfer> {
        let op = S3Call::Get { range: Some(range) };
        let run = self.run_retried(bucket, key, op, false, |ex| {
            self.hipobj.get_part(reg, at.offset, at.len, ex)
        });
        match self
            .conclude(run.outcome, run.last, op)
            .map_err(|e| e.tried(run.tries))?
        {
            Ok(t) => Ok(t),
            Err((why, _)) => Err(Error::new(
                ErrorKind::S3Error,
                format!(
                    "GetObject {range}: the server declined RDMA for this part after moving the first by RDMA ({why}); no part goes over plain HTTP"
                ),
            )),
        }
    }

    /// UploadPart of the `at.len` bytes at `at.offset` of `reg` as parts
    /// `first_number`, `first_number + 1`, ... of `upload_id`, split by
    /// [`Parallel::part_size`] (or the server's limit),
    /// [`Parallel::in_flight`] at a time. Gives the parts for
    /// CompleteMultipartUpload, in order, and what they came to.
    #[allow(clippy::too_many_arguments)]
    pub fn upload_parts(
        &self,
        reg: &Registration<'_>,
        at: Span,
        bucket: &str,
        key: &str,
        upload_id: &str,
        first_number: i32,
    ) -> Result<(Vec<CompletedPart>, Transfer)> {
        if at.len == 0 {
            return Err(Error::new(ErrorKind::InvalidValue, "no bytes to upload"));
        }
        let mut sum = Summary::default();
        let mut parts = Vec::new();
        let done = loop {
            let n = upload_part_len(self.parallel.part_size, self.part_len(), at.len);
            let span = Span {
                offset: at.offset,
                len: n,
            };
            match self.upload_part(reg, span, bucket, key, upload_id, first_number) {
                Ok(t) => {
                    sum.add(&t, n, "UploadPart", false)?;
                    parts.push(completed_part(first_number, t.etag));
                    break n;
                }
                // Part `first_number` is sent again, smaller: it replaces
                // nothing, as the refused one was never stored.
                Err(e) if self.learn_limit(&e, n) => {}
                Err(e) => return Err(e),
            }
        };
        let rest = split(
            done,
            at.len,
            upload_part_len(self.parallel.part_size, self.part_len(), at.len),
        );
        let number = |i: usize| -> Result<i32> {
            i32::try_from(i + 1)
                .ok()
                .and_then(|i| first_number.checked_add(i))
                .filter(|&n| n <= 10_000)
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::SizeTooLarge,
                        "over S3's 10000 parts: raise the part size",
                    )
                })
        };
        let in_flight = if self.parts_in_flight(sum.rdma) {
            self.parallel.in_flight
        } else {
            1
        };
        let got = run_parallel(&rest, in_flight, |i, off, n| {
            let span = Span {
                offset: at.offset + off,
                len: n,
            };
            let num = number(i)?;
            self.upload_part(reg, span, bucket, key, upload_id, num)
                .map(|t| (num, t))
        })?;
        for ((num, t), &(_, n)) in got.into_iter().zip(&rest) {
            sum.add(&t, n, "UploadPart", false)?;
            parts.push(completed_part(num, t.etag));
        }
        Ok((parts, sum.transfer(200)))
    }

    /// PutObject of `at` of `reg` as a multipart upload of
    /// [`RdmaS3Client::upload_parts`]; the upload is aborted when a part
    /// fails, so nothing is left behind.
    pub(crate) fn put_split(
        &self,
        reg: &Registration<'_>,
        at: Span,
        bucket: &str,
        key: &str,
    ) -> Result<Transfer> {
        let (s3, b, k) = (self.s3.clone(), bucket.to_owned(), key.to_owned());
        let up = self
            .rt
            .block_on(async move { s3.create_multipart_upload().bucket(b).key(k).send().await })
            .map_err(|e| Error::from_sdk("CreateMultipartUpload", &e))?;
        let id = up
            .upload_id()
            .ok_or_else(|| Error::new(ErrorKind::S3Error, "CreateMultipartUpload returned no upload id"))?
            .to_owned();
        let done = self
            .upload_parts(reg, at, bucket, key, &id, 1)
            .and_then(|(parts, t)| {
                let (s3, b, k, id) = (self.s3.clone(), bucket.to_owned(), key.to_owned(), id.clone());
                let whole = CompletedMultipartUpload::builder().set_parts(Some(parts)).build();
                let out = self
                    .rt
                    .block_on(async move {
                        s3.complete_multipart_upload()
                            .bucket(b)
                            .key(k)
                            .upload_id(id)
                            .multipart_upload(whole)
                            .send()
                            .await
                    })
                    .map_err(|e| Error::from_sdk("CompleteMultipartUpload", &e))?;
                Ok(Transfer {
                    etag: out.e_tag().map(str::to_owned),
                    ..t
                })
            });
        match done {
            Ok(t) => Ok(t),
            Err(e) => {
                let (s3, b, k) = (self.s3.clone(), bucket.to_owned(), key.to_owned());
                let aborted = self.rt.block_on(async move {
                    s3.abort_multipart_upload()
                        .bucket(b)
                        .key(k)
                        .upload_id(id)
                        .send()
                        .await
                });
                match aborted {
                    Ok(_) => Err(e),
                    Err(a) => Err(Error::new(
                        e.kind(),
                        format!(
                            "{}; and aborting the multipart upload failed too, so its parts may be left behind: {}",
                            e.detail(),
                            Error::from_sdk("AbortMultipartUpload", &a)
                        ),
                    )),
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_for_length_names_the_limit() {
        let e = Error::new(
            ErrorKind::S3Error,
            "GetObject failed with HTTP 400: InvalidRDMAToken: the token's length 536870912 is over this server's limit of 67108864",
        );
        // Built by hand, so no status: no refusal.
        assert_eq!(refused_length(&e, 1 << 29), None);
        assert_eq!(named_limit(e.detail()), Some(64 << 20));
        assert_eq!(named_limit("no number"), None);
    }

    #[test]
    fn a_learned_limit_shares_an_upload_evenly_and_leaves_no_short_middle_part() {
        const MIB: usize = 1 << 20;
        // No limit: the parts asked for, the remainder last.
        assert_eq!(upload_part_len(16 * MIB, 16 * MIB, 40 * MIB), 16 * MIB);
        assert_eq!(upload_part_len(16 * MIB, 16 * MIB, 3 * MIB), 3 * MIB);
        // A 64 MiB window under a 62 MiB limit: two halves, not 62 + 2.
        assert_eq!(upload_part_len(64 * MIB, 62 * MIB, 64 * MIB), 32 * MIB);
        for limit in [10 * MIB, 13 * MIB + 7, 31 * MIB, 63 * MIB + 1] {
            for window in [64 * MIB, 128 * MIB + 5, 256 * MIB - 3] {
                let n = upload_part_len(64 * MIB, limit, window);
                let parts = split(0, window, n);
                assert!(parts.iter().all(|&(_, len)| len <= limit), "{limit} {window}");
                assert_eq!(parts.iter().map(|p| p.1).sum::<usize>(), window);
                assert!(
                    parts.iter().all(|&(_, len)| len >= 5 * MIB),
                    "{limit} {window}: {parts:?}"
                );
            }
        }
    }

    #[test]
    fn parts_cover_the_span_in_order() {
        assert_eq!(split(0, 10, 4), vec![(0, 4), (4, 4), (8, 2)]);
        assert_eq!(split(4, 10, 4), vec![(4, 4), (8, 2)]);
        assert!(split(10, 10, 4).is_empty());
    }

    #[test]
    fn the_first_error_is_the_result_and_stops_new_parts() {
        let parts = split(0, 100, 1);
        let started = AtomicUsize::new(0);
        let r: Result<Vec<()>> = run_parallel(&parts, 4, |i, _, _| {
            started.fetch_add(1, Ordering::Relaxed);
            if i == 3 {
                Err(Error::new(ErrorKind::S3Error, "part 3"))
            } else {
                Ok(())
            }
        });
        assert_eq!(r.unwrap_err().detail(), "part 3");
        let ok = run_parallel(&parts, 3, |i, at, n| Ok((i, at, n))).unwrap();
        assert_eq!(ok.len(), 100);
        assert!(
            ok.iter()
                .enumerate()
                .all(|(k, &(i, at, n))| k == i && at == i && n == 1)
        );
    }
}
