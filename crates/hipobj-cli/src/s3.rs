//! `hipobj get` and `hipobj put`: objects through a registered buffer.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use hipobj_s3::credentials;
use std::sync::atomic::{AtomicUsize, Ordering};

use hipobj::ErrorKind;
use hipobj_s3::{FailoverClient, Parallel, PlainFailover, RdmaS3Client, RetryPolicy, Span, Transfer};

use crate::error::{CliError, CliResult};
use crate::progress::Progress;

/// Largest buffer one registration may cover.
pub(crate) const MAX_PART: u64 = 4 << 30;
/// S3's smallest part but the last.
pub(crate) const MIN_PART: u64 = 5 << 20;
/// S3's most parts in one upload.
pub(crate) const MAX_PARTS: u64 = 10_000;

/// `s3://bucket/key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct S3Url {
    /// The bucket.
    pub bucket: String,
    /// The key (may be a prefix for `bench`).
    pub key: String,
}

impl S3Url {
    /// Parses `s3://bucket/key`; `need_key` says whether an empty key is an error.
    pub(crate) fn parse(url: &str, need_key: bool) -> CliResult<Self> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| CliError::plain(format!("{url:?} is not an S3 URL: write s3://bucket/key")))?;
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(CliError::plain(format!(
                "{url:?} names no bucket: write s3://bucket/key"
            )));
        }
        if need_key && key.is_empty() {
            return Err(CliError::plain(format!(
                "{url:?} names no object key: write s3://bucket/key"
            )));
        }
        Ok(Self {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
        })
    }
}

/// Options shared by the commands that talk to S3.
#[derive(Clone, Debug, clap::Args)]
pub(crate) struct Conn {
    /// The S3 endpoint (default: AWS, from the region). Path-style addressing is used with it.
    /// Several gateways over one store: repeat the flag or give a comma list; calls go to the
    /// first and move on to the next when a gateway does not answer.
    #[arg(long, env = "AWS_ENDPOINT_URL", value_delimiter = ',')]
    pub endpoint_url: Vec<String>,
    /// The AWS profile to read credentials and region from.
    #[arg(long)]
    pub profile: Option<String>,
    /// The region (default: from the environment or profile, else us-east-1).
    #[arg(long)]
    pub region: Option<String>,
    /// RDMA devices that may be used, comma-separated (nicHint). The C examples and
    /// hipobj.torch read the same variable.
    #[arg(long, env = "HIPOBJ_NIC")]
    pub nic_hint: Option<String>,
    /// The GPU whose closest NIC to use (-1: the current GPU, or none).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub gpu: i32,
    /// Fail instead of falling back to plain HTTP when RDMA cannot be used.
    #[arg(long)]
    pub require_rdma: bool,
    /// PEM file of the CA certificates an https endpoint's certificate must chain to, trusted
    /// instead of the system's (as the AWS CLI's --ca-bundle).
    #[arg(long, env = "AWS_CA_BUNDLE", value_name = "FILE")]
    pub ca_bundle: Option<PathBuf>,
}

/// The RDMA side of a session: the library's client and, over it, one
/// `RdmaS3Client` per endpoint with failover.
pub(crate) struct Rdma {
    /// The library's client (registers buffers).
    pub client: hipobj::Client,
    /// The endpoints' RDMA clients.
    pub gateways: FailoverClient,
}

/// The pause before a call is sent to the next endpoint.
const FAILOVER_BACKOFF: Duration = Duration::from_millis(100);

/// Each gateway tried once per call, the RDMA calls and the plain ones alike.
fn failover_policy() -> RetryPolicy {
    RetryPolicy {
        attempts: None,
        backoff: FAILOVER_BACKOFF,
    }
}

/// Everything a command needs to move objects.
pub(crate) struct Session {
    /// The runtime the SDK runs on (two workers: the calls block on it).
    pub rt: tokio::runtime::Runtime,
    /// The endpoints as given, for messages (empty: AWS's own).
    endpoints: Vec<String>,
    /// One S3 client per endpoint, in the same order (one for AWS), for
    /// the requests that carry no token.
    plain: PlainFailover,
    /// The endpoint the next call goes to first.
    current: AtomicUsize,
    /// The RDMA clients, or why there are none.
    pub rdma: Result<Rdma, CliError>,
}

impl Session {
    /// Loads the credentials and region, builds the S3 clients, and opens the NIC.
    pub(crate) fn open(conn: &Conn) -> CliResult<Self> {
        Self::open_with(conn, None)
    }

    /// As [`Session::open`], with the library's settings given instead of
    /// read from the environment.
    pub(crate) fn open_with(conn: &Conn, options: Option<hipobj::Options>) -> CliResult<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(crate::cpu::RUNTIME_THREAD_NAME)
            .enable_all()
            .build()
            .map_err(|e| CliError::plain(format!("cannot start the I/O runtime: {e}")))?;
        let endpoints: Vec<String> = conn.endpoint_url.iter().map(|u| u.trim().to_owned()).collect();
        for url in &endpoints {
            check_endpoint(url)?;
        }
        let clients = rt.block_on(s3_clients(conn, &endpoints))?;
        let rdma = hipobj_client(conn, options).and_then(|h| {
            let eps = clients
                .iter()
                .map(|s3| {
                    RdmaS3Client::new(s3.clone(), h.clone(), rt.handle().clone()).fallback(!conn.require_rdma)
                })
                .collect();
            let gateways = FailoverClient::new(eps)
                .map_err(CliError::from)?
                .policy(failover_policy());
            Ok(Rdma { client: h, gateways })
        });
        let plain = PlainFailover::new(clients)?.policy(failover_policy());
        if let Err(e) = &rdma
            && conn.require_rdma
        {
            return Err(CliError {
                code: e.code,
                message: e.message.clone(),
            });
        }
        Ok(Self {
            rt,
            endpoints,
            plain,
            current: AtomicUsize::new(0),
            rdma,
        })
    }

    /// Says on stderr, once, that RDMA is not used and why.
    pub(crate) fn warn_no_rdma(&self) {
        if let Err(e) = &self.rdma {
            eprintln!("hipobj: no RDMA: {e}; using plain HTTP");
        }
    }

    fn name(&self, index: usize) -> &str {
        self.endpoints
            .get(index)
            .map_or("the default AWS endpoint", String::as_str)
    }

    fn current(&self) -> usize {
        self.current.load(Ordering::Relaxed) % self.plain.len()
    }

    /// Says on stderr where each failed try went and where the call went
    /// next (`last`: where the final try went).
    fn note_failovers(&self, failed: &[(usize, hipobj_s3::Error)], last: usize) {
        for (i, (at, e)) in failed.iter().enumerate() {
            let to = failed.get(i + 1).map_or(last, |f| f.0);
            eprintln!(
                "hipobj: gateway {} failed: {e}; failing over to {}",
                self.name(*at),
                self.name(to)
            );
        }
    }

    /// Runs a plain S3 request (no token) through `PlainFailover` from the
    /// current endpoint, and on the next ones while it fails in a way that
    /// says the gateway is the problem (each endpoint is tried once). The
    /// error names `url`.
    pub(crate) fn plain<T>(
        &self,
        url: &S3Url,
        call: impl FnMut(&aws_sdk_s3::Client) -> hipobj_s3::Result<T>,
    ) -> CliResult<T> {
        let gw = self.plain.clone().starting_at(self.current());
        let r = gw.try_each(call);
        self.current.store(gw.current(), Ordering::Relaxed);
        match r {
            Ok(served) => {
                self.note_failovers(&served.failed, served.endpoint);
                Ok(served.value)
            }
            Err(f) => {
                self.note_failovers(&f.failed, f.endpoint);
                let n = gw.len();
                let every = f.error.may_fail_over() && n > 1;
                let mut err = url_error(url, f.error);
                if every {
                    err.message = format!("{} (every one of the {n} endpoints was tried)", err.message);
                }
                Err(err)
            }
        }
    }

    /// The S3 client of the endpoint calls go to first (the first given,
    /// until a failover moved on). `hipobj bench` measures that one gateway.
    pub(crate) fn s3_client(&self) -> &aws_sdk_s3::Client {
        &self.plain.endpoints()[self.current()]
    }

    /// Runs an RDMA call through `FailoverClient` from the current
    /// endpoint, says on stderr where it failed over, and stays where it
    /// was served.
    pub(crate) fn rdma_call<T>(
        &self,
        rdma: &Rdma,
        url: &S3Url,
        call: impl FnMut(&RdmaS3Client) -> hipobj_s3::Result<T>,
    ) -> CliResult<T> {
        let gw = rdma.gateways.clone().starting_at(self.current());
        let r = gw.run(call);
        self.current.store(gw.current(), Ordering::Relaxed);
        match r {
            Ok(served) => {
                self.note_failovers(&served.failed, served.endpoint);
                Ok(served.value)
            }
            // The same sentence as a plain request's (a wrong secret reads
            // the same on get and put).
            Err(e) => Err(url_error(url, e)),
        }
    }
}

fn hipobj_client(conn: &Conn, options: Option<hipobj::Options>) -> CliResult<hipobj::Client> {
    let mut b = hipobj::Client::builder(hipobj_system::platform()).gpu_device(conn.gpu);
    if let Some(o) = options {
        b = b.options(o);
    }
    if let Some(h) = &conn.nic_hint {
        b = b.nic_hint(h.clone());
    }
    b.build()
        .map_err(|e| CliError::coded(e.kind(), format!("the RDMA client could not start: {e}")))
}

/// One S3 client per endpoint (one for AWS when none is given), all with
/// the same credentials and region.
async fn s3_clients(conn: &Conn, endpoints: &[String]) -> CliResult<Vec<aws_sdk_s3::Client>> {
    // The flag, else AWS_CA_BUNDLE (clap reads it; an empty value is none).
    let given = conn.ca_bundle.as_deref().filter(|p| !p.as_os_str().is_empty());
    let http = hipobj_s3::tls::CaBundle::resolve(given)
        .and_then(|ca| hipobj_s3::tls::http_client(ca.as_ref()))
        .map_err(|e| CliError::plain(e.to_string()))?;
    // The region and the SDK's default credential chain, as the Python
    // package has them (hipobj_s3::credentials).
    let profile = conn.profile.as_deref();
    let region = credentials::region(conn.region.as_deref(), profile).await;
    let creds = credentials::provider(
        &credentials::Source::chain(profile),
        region.clone(),
        Some(http.clone()),
    )
    .await;
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .region(region)
        .credentials_provider(creds.clone())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(5))
                .build(),
        );
    if let Some(p) = &conn.profile {
        loader = loader.profile_name(p);
    }
    let sdk = loader.load().await;
    use aws_sdk_s3::config::ProvideCredentials as _;
    if creds.provide_credentials().await.is_err() {
        return Err(CliError::coded(
            ErrorKind::S3Error,
            "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or name a profile with --profile or AWS_PROFILE",
        ));
    }
    if endpoints.is_empty() {
        return Ok(vec![aws_sdk_s3::Client::new(&sdk)]);
    }
    // The endpoint is set on each client, so that it overrides whatever
    // the loader read (AWS_ENDPOINT_URL itself may hold a list).
    Ok(endpoints
        .iter()
        .map(|url| {
            let b = aws_sdk_s3::config::Builder::from(&sdk)
                .endpoint_url(url)
                .force_path_style(true);
            aws_sdk_s3::Client::from_conf(b.build())
        })
        .collect())
}

fn check_endpoint(url: &str) -> CliResult {
    let ok = (url.starts_with("http://") || url.starts_with("https://"))
        && url
            .split_once("://")
            .is_some_and(|(_, rest)| !rest.is_empty() && !rest.starts_with('/'));
    if ok {
        Ok(())
    } else {
        Err(CliError::plain(format!(
            "--endpoint-url {url:?} is not an http:// or https:// URL"
        )))
    }
}

/// Parses a size: `4096`, `4KiB`, `1MiB`, `64MB`, `2GiB` (binary units
/// for both spellings; `k`/`m`/`g` alone too).
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (write e.g. 4096, 4KiB, 64MiB)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(format!("{s:?} has an unknown unit (use KiB, MiB, GiB)")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("{s:?} is too large"))
}

/// A human size.
pub(crate) fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Resolves `--range` (`A-B`, `A-`, `-N`, with or without `bytes=`) against
/// the object's size into (first byte, length).
pub(crate) fn resolve_range(range: &str, size: u64) -> CliResult<(u64, u64)> {
    let r = range.trim().strip_prefix("bytes=").unwrap_or(range.trim());
    let bad = || CliError::plain(format!("--range {range:?} is not A-B, A- or -N"));
    let (a, b) = r.split_once('-').ok_or_else(bad)?;
    let (first, last) = match (a.is_empty(), b.is_empty()) {
        (true, false) => {
            let n: u64 = b.parse().map_err(|_| bad())?;
            (
                size.saturating_sub(n),
                size.checked_sub(1).ok_or_else(|| empty_range(range, size))?,
            )
        }
        (false, true) => (
            a.parse().map_err(|_| bad())?,
            size.checked_sub(1).ok_or_else(|| empty_range(range, size))?,
        ),
        (false, false) => {
            let (a, b): (u64, u64) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
            (a, b.min(size.saturating_sub(1)))
        }
        (true, true) => return Err(bad()),
    };
    if first >= size || last < first {
        return Err(empty_range(range, size));
    }
    Ok((first, last - first + 1))
}

fn empty_range(range: &str, size: u64) -> CliError {
    CliError::plain(format!(
        "--range {range:?} selects no byte of the {size}-byte object"
    ))
}

/// Where `get` writes: a temporary file beside the target, renamed into
/// place only when complete, or stdout.
enum Sink {
    File {
        tmp: tempfile::NamedTempFile,
        path: PathBuf,
    },
    Stdout(std::io::StdoutLock<'static>),
}

impl Sink {
    fn open(target: &str) -> CliResult<Self> {
        if target == "-" {
            return Ok(Self::Stdout(std::io::stdout().lock()));
        }
        let path = PathBuf::from(target);
        if path.is_dir() {
            return Err(CliError::plain(format!(
                "cannot write {target}: it is a directory"
            )));
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let tmp = tempfile::Builder::new()
            .prefix(".hipobj-")
            .suffix(".part")
            .tempfile_in(&dir)
            .map_err(|e| CliError::plain(format!("cannot write {target}: {}", io_reason(&e))))?;
        Ok(Self::File { tmp, path })
    }

    fn write(&mut self, bytes: &[u8]) -> CliResult {
        let r = match self {
            Self::File { tmp, .. } => tmp.write_all(bytes),
            Self::Stdout(s) => s.write_all(bytes),
        };
        r.map_err(|e| CliError::plain(format!("writing the output failed: {}", io_reason(&e))))
    }

    fn finish(self) -> CliResult {
        match self {
            Self::File { tmp, path } => {
                tmp.as_file().sync_all().map_err(|e| {
                    CliError::plain(format!("writing {} failed: {}", path.display(), io_reason(&e)))
                })?;
                tmp.persist(&path).map_err(|e| {
                    CliError::plain(format!(
                        "cannot move the download into {}: {}",
                        path.display(),
                        io_reason(&e.error)
                    ))
                })?;
                Ok(())
            }
            Self::Stdout(mut s) => s
                .flush()
                .map_err(|e| CliError::plain(format!("writing the output failed: {}", io_reason(&e)))),
        }
    }
}

/// An I/O error as words, without Rust's `(os error N)` suffix.
pub(crate) fn io_reason(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_lowercase(),
        None => s,
    }
}

/// Notes a declined transfer on stderr, once per command.
#[derive(Default)]
struct Declines(bool);

impl Declines {
    fn note(&mut self, t: &Transfer) {
        if let Some(why) = &t.declined
            && !self.0
        {
            self.0 = true;
            eprintln!("hipobj: {why}; moved the bytes over plain HTTP instead");
        }
    }
}

fn head_size(session: &Session, url: &S3Url) -> CliResult<u64> {
    session.plain(url, |s3| {
        let head = session
            .rt
            .block_on(s3.head_object().bucket(&url.bucket).key(&url.key).send())
            .map_err(|e| hipobj_s3::Error::from_sdk("HeadObject", &e))?;
        Ok(head
            .content_length()
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0))
    })
}

/// One sentence for a failed plain request about `url`.
fn url_error(url: &S3Url, e: hipobj_s3::Error) -> CliError {
    match e.status() {
        Some(404) => {
            let what = e.s3_code().unwrap_or("NotFound");
            let thing = if what == "NoSuchBucket" {
                format!("bucket {}", url.bucket)
            } else {
                format!("s3://{}/{}", url.bucket, url.key)
            };
            CliError::coded(
                ErrorKind::S3Error,
                format!("{thing} does not exist ({what}, HTTP 404)"),
            )
        }
        // A wrong key or secret: HeadObject (get) has no body, so no code,
        // and PutObject says SignatureDoesNotMatch; both read the same.
        Some(403)
            if matches!(
                e.s3_code(),
                None | Some("SignatureDoesNotMatch" | "InvalidAccessKeyId" | "InvalidToken" | "ExpiredToken")
            ) =>
        {
            CliError::coded(
                ErrorKind::S3Error,
                format!(
                    "the server refused the credentials for s3://{}/{} (HTTP 403): check the access key and secret (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the profile)",
                    url.bucket, url.key
                ),
            )
        }
        Some(403) => {
            let code = e.s3_code().unwrap_or("AccessDenied");
            CliError::coded(
                ErrorKind::S3Error,
                format!(
                    "the server refused access to s3://{}/{} ({code}, HTTP 403): check that these credentials may use the bucket",
                    url.bucket, url.key
                ),
            )
        }
        _ => e.into(),
    }
}

/// `hipobj get`.
pub(crate) fn get(
    session: &Session,
    url: &S3Url,
    target: &str,
    range: Option<&str>,
    part_size: u64,
    parallel: usize,
) -> CliResult {
    let mut sink = Sink::open(target)?;
    let size = head_size(session, url)?;
    let (first, len) = match range {
        Some(r) => resolve_range(r, size)?,
        None => (0, size),
    };
    if len == 0 {
        return sink.finish();
    }
    let chunk = part_size.min(len);
    let chunk_usize =
        usize::try_from(chunk).map_err(|_| CliError::plain("--part-size is too large for this machine"))?;
    let mut declines = Declines::default();
    let whole = range.is_none() && len == chunk;
    let progress = Progress::new(&format!("get s3://{}/{}", url.bucket, url.key), len);
    match &session.rdma {
        Ok(client) => {
            // A window of `parallel` parts, filled by that many ranged GETs
            // in flight, then written out in order. Registered memory is
            // only ever copied out, never lent out (a server may write it
            // while registered).
            let window = window_of(chunk, parallel, len)?;
            let mut out = vec![0u8; window];
            let mut reg = client.client.register(vec![0u8; window])?;
            let split = Parallel {
                part_size: chunk_usize,
                in_flight: parallel,
            };
            let mut at = first;
            while at < first + len {
                let n = (window as u64).min(first + len - at);
                // A try that failed part way may have written part of the
                // buffer; the try that succeeds writes all of it.
                let t = session.rdma_call(client, url, |c| {
                    c.clone().parallel(split).get_ranges(
                        &mut reg,
                        Span::whole(n as usize),
                        &url.bucket,
                        &url.key,
                        at,
                    )
                })?;
                declines.note(&t);
                check_count(t.bytes, n)?;
                let out = &mut out[..n as usize];
                reg.read_into(0, out)?;
                sink.write(out)?;
                progress.add(n);
                at += n;
            }
        }
        Err(_) => {
            session.warn_no_rdma();
            let mut buf = vec![0u8; chunk_usize];
            let mut at = first;
            while at < first + len {
                let n = chunk.min(first + len - at);
                let r = (!whole).then(|| format!("bytes={at}-{}", at + n - 1));
                let got = plain_get(session, url, r, &mut buf[..n as usize])?;
                check_count(got, n)?;
                sink.write(&buf[..n as usize])?;
                progress.add(n);
                at += n;
            }
        }
    }
    sink.finish()
}

/// The registered buffer of `parallel` parts of `chunk` bytes, no larger
/// than the `len` bytes to move.
fn window_of(chunk: u64, parallel: usize, len: u64) -> CliResult<usize> {
    let w = chunk.saturating_mul(parallel.max(1) as u64).min(len);
    usize::try_from(w)
        .ok()
        .filter(|&w| w as u64 <= MAX_PART)
        .ok_or_else(|| {
            CliError::plain("--part-size times --parallel is over the 4 GiB limit of one registered buffer")
        })
}

fn check_count(got: u64, want: u64) -> CliResult {
    if got == want {
        Ok(())
    } else {
        Err(CliError::coded(
            ErrorKind::S3Error,
            format!(
                "the server sent {got} bytes where {want} were expected; did the object change meanwhile?"
            ),
        ))
    }
}

pub(crate) fn plain_get(
    session: &Session,
    url: &S3Url,
    range: Option<String>,
    dst: &mut [u8],
) -> CliResult<u64> {
    // Each try writes `dst` from its start; only the one that succeeds counts.
    session.plain(url, |s3| {
        let get = hipobj_s3::plain::get_object(s3, &url.bucket, &url.key, range.as_deref(), |at, chunk| {
            let slot = dst.get_mut(at..at + chunk.len()).ok_or_else(|| {
                hipobj_s3::Error::new(ErrorKind::S3Error, "the server sent more bytes than asked for")
            })?;
            slot.copy_from_slice(chunk);
            Ok(())
        });
        Ok(session.rt.block_on(get)?.bytes)
    })
}

/// Where `put` reads from.
enum Source {
    File(std::fs::File, u64),
    Memory(Vec<u8>),
}

impl Source {
    fn open(src: &str) -> CliResult<Self> {
        if src == "-" {
            let mut v = Vec::new();
            std::io::stdin()
                .lock()
                .read_to_end(&mut v)
                .map_err(|e| CliError::plain(format!("reading stdin failed: {}", io_reason(&e))))?;
            return Ok(Self::Memory(v));
        }
        let p = Path::new(src);
        let f = std::fs::File::open(p)
            .map_err(|e| CliError::plain(format!("cannot read {src}: {}", io_reason(&e))))?;
        let meta = f
            .metadata()
            .map_err(|e| CliError::plain(format!("cannot read {src}: {}", io_reason(&e))))?;
        if meta.is_dir() {
            return Err(CliError::plain(format!("cannot read {src}: it is a directory")));
        }
        Ok(Self::File(f, meta.len()))
    }

    fn len(&self) -> u64 {
        match self {
            Self::File(_, n) => *n,
            Self::Memory(v) => v.len() as u64,
        }
    }

    /// Fills `dst` with the bytes at `at`.
    fn read_at(&mut self, at: u64, dst: &mut [u8]) -> CliResult {
        match self {
            Self::File(f, _) => {
                use std::io::{Seek, SeekFrom};
                f.seek(SeekFrom::Start(at))
                    .and_then(|_| f.read_exact(dst))
                    .map_err(|e| CliError::plain(format!("reading the input failed: {}", io_reason(&e))))
            }
            Self::Memory(v) => {
                let start = usize::try_from(at).map_err(|_| CliError::plain("input offset too large"))?;
                let s = v
                    .get(start..start + dst.len())
                    .ok_or_else(|| CliError::plain("the input is shorter than it was"))?;
                dst.copy_from_slice(s);
                Ok(())
            }
        }
    }
}

/// Checks `--part-size` and the number of parts an object of `size` needs.
pub(crate) fn check_part_size(part_size: u64, size: u64) -> CliResult {
    if part_size > MAX_PART {
        return Err(CliError::coded(
            ErrorKind::SizeTooLarge,
            format!(
                "--part-size {} is over the 4 GiB limit of one registered buffer",
                human(part_size)
            ),
        ));
    }
    if part_size < MIN_PART {
        return Err(CliError::plain(format!(
            "--part-size {} is under S3's 5 MiB minimum part size",
            human(part_size)
        )));
    }
    let parts = size.div_ceil(part_size);
    if parts > MAX_PARTS {
        return Err(CliError::coded(
            ErrorKind::SizeTooLarge,
            format!(
                "{} in parts of {} is {parts} parts, over S3's limit of {MAX_PARTS}; raise --part-size",
                human(size),
                human(part_size)
            ),
        ));
    }
    Ok(())
}

/// `hipobj put`.
pub(crate) fn put(session: &Session, src: &str, url: &S3Url, part_size: u64, parallel: usize) -> CliResult {
    let mut source = Source::open(src)?;
    let size = source.len();
    check_part_size(part_size, size)?;
    let mut declines = Declines::default();
    if size == 0 {
        // Nothing to register: an empty object is a plain request.
        return plain_put(session, url, &[], None).map(|_| ());
    }
    let whole = one_put(size, part_size, || match &session.rdma {
        Ok(c) => session.rdma_call(c, url, |g| g.takes_puts_whole(&url.bucket, &url.key)),
        Err(_) => Ok(false),
    })?;
    let chunk = if whole { size } else { part_size };
    let mut buf = vec![
        0u8;
        usize::try_from(chunk)
            .map_err(|_| CliError::plain("--part-size is too large for this machine"))?
    ];
    let progress = Progress::new(&format!("put s3://{}/{}", url.bucket, url.key), size);
    if whole {
        source.read_at(0, &mut buf)?;
        let done = match &session.rdma {
            Ok(c) => {
                let reg = c.client.register(std::mem::take(&mut buf))?;
                let t = session.rdma_call(c, url, |g| {
                    g.put_object(&reg, Span::whole(size as usize), &url.bucket, &url.key)
                })?;
                declines.note(&t);
                Ok(())
            }
            Err(_) => {
                session.warn_no_rdma();
                plain_put(session, url, &buf, None).map(|_| ())
            }
        };
        progress.add(size);
        return done;
    }
    let up = session.plain(url, |s3| {
        let create = s3
            .create_multipart_upload()
            .bucket(&url.bucket)
            .key(&url.key)
            .send();
        session
            .rt
            .block_on(create)
            .map_err(|e| hipobj_s3::Error::from_sdk("CreateMultipartUpload", &e))
    })?;
    let id = up
        .upload_id()
        .ok_or_else(|| CliError::coded(ErrorKind::S3Error, "CreateMultipartUpload returned no upload id"))?
        .to_owned();
    let result = upload_parts(
        session,
        &mut source,
        url,
        &id,
        (chunk, parallel),
        size,
        &mut buf,
        &mut declines,
        &progress,
    );
    match result {
        Ok(parts) => {
            let done = aws_sdk_s3::types::CompletedMultipartUpload::builder()
                .set_parts(Some(parts))
                .build();
            // Sent again through the next gateway when one dies before
            // answering: completing an upload twice is answered 200 by S3.
            session.plain(url, |s3| {
                let complete = s3
                    .complete_multipart_upload()
                    .bucket(&url.bucket)
                    .key(&url.key)
                    .upload_id(&id)
                    .multipart_upload(done.clone())
                    .send();
                session
                    .rt
                    .block_on(complete)
                    .map(|_| ())
                    .map_err(|e| hipobj_s3::Error::from_sdk("CompleteMultipartUpload", &e))
            })
        }
        Err(e) => {
            // Leave no half-uploaded parts behind.
            let _ = session.plain(url, |s3| {
                let abort = s3
                    .abort_multipart_upload()
                    .bucket(&url.bucket)
                    .key(&url.key)
                    .upload_id(&id)
                    .send();
                session
                    .rt
                    .block_on(abort)
                    .map_err(|e| hipobj_s3::Error::from_sdk("AbortMultipartUpload", &e))
            });
            Err(e)
        }
    }
}

/// Whether `put` sends a file of `size` bytes as one PutObject rather than
/// a multipart upload: when it fits one part, or when the server takes
/// PUTs whole (`takes_whole`: hipobj-rc-v2 without parts, which gets the
/// file in one registration rather than parts over plain HTTP) and the
/// file fits one hipobj-rc-v2 transfer. A larger file goes in parts, which
/// such a server takes over plain HTTP only (refused under
/// `--require-rdma`): one transfer over 2^31-1 bytes would be refused by
/// the client itself.
fn one_put(size: u64, part_size: u64, takes_whole: impl FnOnce() -> CliResult<bool>) -> CliResult<bool> {
    if size <= part_size {
        return Ok(true);
    }
    if size > hipobj::RC_V2_MAX_SIZE {
        return Ok(false);
    }
    takes_whole()
}

#[allow(clippy::too_many_arguments)]
fn upload_parts(
    session: &Session,
    source: &mut Source,
    url: &S3Url,
    id: &str,
    (chunk, parallel): (u64, usize),
    size: u64,
    buf: &mut [u8],
    declines: &mut Declines,
    progress: &Progress,
) -> CliResult<Vec<aws_sdk_s3::types::CompletedPart>> {
    let mut parts = Vec::new();
    let mut number = 0i32;
    let mut at = 0u64;
    match &session.rdma {
        Ok(c) => {
            // A window of `parallel` parts, read in, then uploaded that
            // many in flight. Filled by copy: registered memory is never
            // lent out.
            let window = window_of(chunk, parallel, size)?;
            let mut staging = vec![0u8; window];
            let mut reg = c.client.register(vec![0u8; window])?;
            let split = Parallel {
                part_size: usize::try_from(chunk)
                    .map_err(|_| CliError::plain("--part-size is too large for this machine"))?,
                in_flight: parallel,
            };
            while at < size {
                let n = (window as u64).min(size - at);
                let part = &mut staging[..n as usize];
                source.read_at(at, part)?;
                reg.write_from(0, part)?;
                let (done, t) = session.rdma_call(c, url, |g| {
                    g.clone().parallel(split).upload_parts(
                        &reg,
                        Span::whole(n as usize),
                        &url.bucket,
                        &url.key,
                        id,
                        number + 1,
                    )
                })?;
                declines.note(&t);
                number += i32::try_from(done.len()).map_err(|_| CliError::plain("too many parts"))?;
                parts.extend(done);
                progress.add(n);
                at += n;
            }
        }
        Err(_) => {
            session.warn_no_rdma();
            while at < size {
                let n = chunk.min(size - at);
                number += 1;
                source.read_at(at, &mut buf[..n as usize])?;
                let etag = plain_put(session, url, &buf[..n as usize], Some((id, number)))?;
                parts.push(hipobj_s3::completed_part(number, etag));
                progress.add(n);
                at += n;
            }
        }
    }
    Ok(parts)
}

pub(crate) fn plain_put(
    session: &Session,
    url: &S3Url,
    bytes: &[u8],
    part: Option<(&str, i32)>,
) -> CliResult<Option<String>> {
    let body = bytes::Bytes::copy_from_slice(bytes);
    session.plain(url, |s3| {
        let (b, k, body) = (&url.bucket, &url.key, body.clone());
        let sent = session.rt.block_on(async {
            match part {
                Some((id, n)) => hipobj_s3::plain::upload_part(s3, b, k, id, n, body).await,
                None => hipobj_s3::plain::put_object(s3, b, k, body).await,
            }
        })?;
        Ok(sent.etag)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file over hipobj-rc-v2's 2^31-1 bytes per transfer cannot go to a
    /// server without v2 parts as one PutObject by RDMA: it goes as a
    /// multipart upload (its parts over plain HTTP, or refused under
    /// --require-rdma), not as one transfer the client then refuses.
    #[test]
    fn a_put_over_one_rc_v2_transfer_goes_in_parts() {
        let part = 16 << 20;
        let whole = || Ok(true);
        let max = hipobj::RC_V2_MAX_SIZE;
        assert!(matches!(one_put(max, part, whole), Ok(true)));
        assert!(matches!(one_put(max + 1, part, whole), Ok(false)));
        assert!(matches!(one_put((2 << 30) + (1 << 20), part, whole), Ok(false)));
        // One part: whole, without asking the server.
        assert!(matches!(one_put(part, part, || panic!("asked")), Ok(true)));
        // A server that does not take PUTs whole gets parts.
        assert!(matches!(one_put(part + 1, part, || Ok(false)), Ok(false)));
    }

    #[test]
    fn urls() {
        assert_eq!(
            S3Url::parse("s3://b/k/x", true).ok(),
            Some(S3Url {
                bucket: "b".into(),
                key: "k/x".into()
            })
        );
        assert!(S3Url::parse("http://b/k", true).is_err());
        assert!(S3Url::parse("s3:///k", true).is_err());
        assert!(S3Url::parse("s3://b", true).is_err());
        assert!(S3Url::parse("s3://b", false).is_ok());
    }

    #[test]
    fn sizes_and_ranges() {
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert!(parse_size("x").is_err());
        assert!(parse_size("3 parsecs").is_err());
        assert_eq!(resolve_range("0-9", 100).ok(), Some((0, 10)));
        assert_eq!(resolve_range("bytes=90-", 100).ok(), Some((90, 10)));
        assert_eq!(resolve_range("-5", 100).ok(), Some((95, 5)));
        assert_eq!(resolve_range("50-1000", 100).ok(), Some((50, 50)));
        assert!(resolve_range("100-", 100).is_err());
        assert!(resolve_range("9-3", 100).is_err());
        assert!(resolve_range("a-b", 100).is_err());
        assert!(check_part_size(8 << 30, 1).is_err());
        assert!(check_part_size(1 << 20, 1).is_err());
        assert!(check_part_size(5 << 20, (5 << 20) * 10_001).is_err());
        assert!(check_part_size(64 << 20, 1 << 30).is_ok());
        assert_eq!(human(4096), "4 KiB");
        assert_eq!(human(1536), "1.5 KiB");
    }
}
