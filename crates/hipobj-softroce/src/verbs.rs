//! [`SoftVerbs`]: the soft NIC behind the [`Verbs`] seam.
//!
//! A device binds one IPv4 address at UDP port 4791 and shows it as GID
//! index 0 in its IPv4-mapped form (RoCE v2). Each process on a machine takes
//! its own 127.x.y.z (all of 127/8 is loopback on Linux), so a GID alone
//! locates the peer.
//!
//! Selection (see `docs/soft-roce.md`):
//!
//! * the device is named `softroce0` (or `HIPOBJ_SOFTROCE_NAME`);
//! * `HIPOBJ_SOFTROCE_ADDR=127.a.b.c` fixes its address; unset, it derives
//!   one from the process id in 127/8 (never 127.0.0.1) and moves on to the
//!   next candidate while the address is taken;
//! * `HIPOBJ_SOFTROCE_MTU` (1024, 2048, 4096; default 4096) is the port MTU;
//! * `HIPOBJ_SOFTROCE_PCAP=path` writes a capture of everything the device
//!   sends and receives;
//! * `HIPOBJ_SOFTROCE_LOSS`, `_DUP`, `_REORDER` (fractions 0..1) and
//!   `_SEED` inject faults on transmit;
//! * `HIPOBJ_SOFTROCE_LINK=udp` (default) sends over a UDP socket, `raw`
//!   over a raw IPv4 socket (needs CAP_NET_RAW) that carries the IPv4 and
//!   UDP headers the NIC built and checks each ICRC against the headers
//!   that arrived, as a NIC on an interface does;
//! * `HIPOBJ_SOFTROCE_STATS=seconds` makes the worker write the engine's
//!   counters (retransmissions, duplicates, fatal NAKs, ...) to stderr that
//!   often while they change, and once when the device closes;
//! * `HIPOBJ_SOFTROCE_BUSY_POLL_US=n` keeps the worker polling for `n` µs
//!   after its last packet before it sleeps (default 50, 0 turns it off);
//! * `HIPOBJ_SOFTROCE_PLACE_AHEAD=0` drops what arrives after a loss and
//!   recovers by go-back-N alone, as IBA describes and rxe does (default 1:
//!   WRITE middle packets and READ responses after a gap are placed).

use std::collections::HashMap;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use hipobj_platform::{
    AccessFlags, BindMwWr, CompletionQueue, Device, DeviceAttr, Gid, LinkLayer, MemRegion, MemoryRegion,
    MemoryWindow, Mtu, PortAttr, PortState, ProtectionDomain, QpAttr, QpAttrMask, QpInitAttr, QpState,
    QueuePair, RecvWr, SendWr, Verbs, VerbsError, VerbsErrorKind, WorkCompletion,
};

use crate::engine::{Counters, Cq, Engine, EngineConfig, MwBind, QpConfig};
use crate::link::faults::FaultConfig;
use crate::link::pcap::PcapWriter;
use crate::link::udp::{self, RawSocket, Waker};
use crate::wire::ROCE_PORT;
use crate::worker::{Link, Nic, Worker, WorkerOpts};

/// The default device name.
pub const DEFAULT_NAME: &str = "softroce0";

/// What the name of every device's worker thread (the soft NIC's DMA
/// engine) starts with; the device's name follows. The kernel keeps 15
/// bytes of a thread's name, so the prefix survives in `/proc/*/task/*/comm`
/// whatever the device is called, and a profiler or `hipobj bench` can tell
/// the NIC's CPU time (which a hardware NIC would not take from the host)
/// from the application's.
pub const WORKER_THREAD_PREFIX: &str = "nic:";

/// The worker thread's name: the prefix and as much of the device's name as
/// fits in the kernel's 15 bytes (a longer name is not truncated for us: the
/// thread would keep its parent's name).
fn worker_thread_name(device: &str) -> String {
    let mut name = String::from(WORKER_THREAD_PREFIX);
    for c in device.chars().filter(|&c| c != '\0') {
        if name.len() + c.len_utf8() > 15 {
            break;
        }
        name.push(c);
    }
    name
}

/// How a device picks its IPv4 address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddrChoice {
    /// Exactly this address; opening fails if it is taken.
    Fixed(Ipv4Addr),
    /// An address in 127/8 derived from the process id, moving on to the
    /// next candidate while one is taken.
    FromPid,
}

/// How a device reaches the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LinkKind {
    /// A UDP socket at the device's address, port 4791.
    #[default]
    Udp,
    /// A raw IPv4 socket at the device's address (needs CAP_NET_RAW).
    Raw,
}

/// Everything that shapes a soft device.
#[derive(Clone, Debug)]
pub struct SoftConfig {
    /// The device name.
    pub name: String,
    /// Its address.
    pub addr: AddrChoice,
    /// The port's active MTU.
    pub mtu: Mtu,
    /// Faults injected on transmit.
    pub faults: FaultConfig,
    /// Where to write a pcap capture, if anywhere.
    pub pcap: Option<PathBuf>,
    /// Packets in flight per QP.
    pub window: u32,
    /// The link.
    pub link: LinkKind,
    /// Whether the UDP link sends runs of equal-size packets as UDP GSO
    /// super-packets (it always receives with UDP GRO). The raw link never
    /// uses GSO.
    pub gso: bool,
    /// How often the worker writes the engine's counters to stderr (when
    /// they changed, and once when the device closes); `None`: never.
    pub stats: Option<Duration>,
    /// How long the worker keeps looking for packets without sleeping after
    /// the last one it sent or received (busy polling); zero: it sleeps as
    /// soon as there is nothing to do. Polling trades a core for the
    /// wake-up latency that every round trip pays twice. Default 50 µs.
    pub busy_poll: Duration,
    /// Whether packets that arrive after a loss are placed at once rather
    /// than dropped and sent again by go-back-N (see
    /// [`EngineConfig::place_ahead`](crate::engine::EngineConfig::place_ahead)).
    /// Default on.
    pub place_ahead: bool,
}

impl Default for SoftConfig {
    fn default() -> Self {
        Self {
            name: DEFAULT_NAME.into(),
            addr: AddrChoice::FromPid,
            mtu: Mtu::Mtu4096,
            faults: FaultConfig::NONE,
            pcap: None,
            window: 256,
            link: LinkKind::Udp,
            gso: true,
            stats: None,
            busy_poll: Duration::from_micros(50),
            place_ahead: true,
        }
    }
}

fn env_err(var: &str, value: &str, what: &str) -> VerbsError {
    VerbsError::new(
        "softroce_from_env",
        VerbsErrorKind::InvalidArgument,
        format!("{var}={value:?} is not {what}"),
    )
}

fn env_fraction(var: &str) -> Result<f64, VerbsError> {
    match std::env::var(var) {
        Ok(v) => v
            .parse::<f64>()
            .ok()
            .filter(|f| (0.0..=1.0).contains(f))
            .ok_or_else(|| env_err(var, &v, "a fraction between 0 and 1")),
        Err(_) => Ok(0.0),
    }
}

impl SoftConfig {
    /// The configuration the `HIPOBJ_SOFTROCE_*` environment variables
    /// describe (defaults for those unset).
    pub fn from_env() -> Result<Self, VerbsError> {
        let mut c = Self::default();
        if let Ok(name) = std::env::var("HIPOBJ_SOFTROCE_NAME") {
            c.name = name;
        }
        if let Ok(v) = std::env::var("HIPOBJ_SOFTROCE_ADDR") {
            let ip: Ipv4Addr = v
                .parse()
                .map_err(|_| env_err("HIPOBJ_SOFTROCE_ADDR", &v, "an IPv4 address"))?;
            c.addr = AddrChoice::Fixed(ip);
        }
        if let Ok(v) = std::env::var("HIPOBJ_SOFTROCE_MTU") {
            c.mtu = v
                .parse::<usize>()
                .ok()
                .and_then(Mtu::from_bytes)
                .filter(|m| *m >= Mtu::Mtu1024)
                .ok_or_else(|| env_err("HIPOBJ_SOFTROCE_MTU", &v, "1024, 2048 or 4096"))?;
        }
        if let Ok(v) = std::env::var("HIPOBJ_SOFTROCE_LINK") {
            c.link = match v.as_str() {
                "udp" => LinkKind::Udp,
                "raw" => LinkKind::Raw,
                _ => return Err(env_err("HIPOBJ_SOFTROCE_LINK", &v, "udp or raw")),
            };
        }
        if let Ok(v) = std::env::var("HIPOBJ_SOFTROCE_GSO") {
            c.gso = match v.as_str() {
                "1" => true,
                "0" => false,
                _ => return Err(env_err("HIPOBJ_SOFTROCE_GSO", &v, "0 or 1")),
            };
        }
        if let Ok(v) = std::env::var("HIPOBJ_SOFTROCE_PLACE_AHEAD") {
            c.place_ahead = match v.as_str() {
                "1" => true,
                "0" => false,
                _ => return Err(env_err("HIPOBJ_SOFTROCE_PLACE_AHEAD", &v, "0 or 1")),
            };
        }
        if let Ok(v) = std::env::var("HIPOBJ_SOFTROCE_PCAP") {
            c.pcap = Some(PathBuf::from(v));
        }
        if let Ok(v) = std::env::var("HIPOBJ_SOFTROCE_STATS") {
            let secs = v
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
                .ok_or_else(|| env_err("HIPOBJ_SOFTROCE_STATS", &v, "seconds between 0 and 86400"))?;
            c.stats = Some(Duration::from_secs_f64(secs));
        }
        if let Ok(v) = std::env::var("HIPOBJ_SOFTROCE_BUSY_POLL_US") {
            let us = v
                .parse::<u64>()
                .ok()
                .filter(|us| *us <= 1_000_000)
                .ok_or_else(|| {
                    env_err(
                        "HIPOBJ_SOFTROCE_BUSY_POLL_US",
                        &v,
                        "microseconds from 0 to 1000000",
                    )
                })?;
            c.busy_poll = Duration::from_micros(us);
        }
        c.faults = FaultConfig {
            loss: env_fraction("HIPOBJ_SOFTROCE_LOSS")?,
            dup: env_fraction("HIPOBJ_SOFTROCE_DUP")?,
            reorder: env_fraction("HIPOBJ_SOFTROCE_REORDER")?,
            seed: match std::env::var("HIPOBJ_SOFTROCE_SEED") {
                Ok(v) => v
                    .parse()
                    .map_err(|_| env_err("HIPOBJ_SOFTROCE_SEED", &v, "an integer"))?,
                Err(_) => 0,
            },
        };
        Ok(c)
    }
}

/// Candidate addresses for a process: 127.(64 + pid / 65536 % 64).(pid / 256
/// % 256).(pid % 256), then the ones after it, skipping .0 and .255 in the
/// last octet. The second octet stays in 64..=127, clear of 127.0.0.1.
fn candidates(pid: u32) -> impl Iterator<Item = Ipv4Addr> {
    let base = (pid % (64 << 16)) + (64 << 16);
    (0..4096u32).filter_map(move |k| {
        let v = base.wrapping_add(k) % (64 << 16) + (64 << 16);
        let [_, b, c, d] = v.to_be_bytes();
        (d != 0 && d != 255).then(|| Ipv4Addr::new(127, b, c, d))
    })
}

fn os_err(op: &'static str, e: &std::io::Error, what: String) -> VerbsError {
    VerbsError::with_errno(
        op,
        VerbsErrorKind::Os,
        e.raw_os_error().unwrap_or(0),
        format!("{what}: {e}"),
    )
}

/// The soft RoCE backend.
#[derive(Debug)]
pub struct SoftVerbs {
    config: SoftConfig,
    open: Mutex<Weak<DevInner>>,
}

impl SoftVerbs {
    /// A backend with one device shaped by `config`. Nothing is bound until
    /// the device is opened.
    pub fn new(config: SoftConfig) -> Self {
        Self {
            config,
            open: Mutex::new(Weak::new()),
        }
    }

    /// A backend configured by the `HIPOBJ_SOFTROCE_*` environment variables.
    pub fn from_env() -> Result<Self, VerbsError> {
        Ok(Self::new(SoftConfig::from_env()?))
    }

    /// The configuration.
    pub fn config(&self) -> &SoftConfig {
        &self.config
    }

    /// Opens the device. While any handle to it (or any object made from
    /// it) is alive, opening again hands out the same device: it binds its
    /// address once.
    pub fn device(&self) -> Result<Arc<SoftDevice>, VerbsError> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(inner) = open.upgrade() {
            return Ok(Arc::new(SoftDevice { inner }));
        }
        let inner = Arc::new(DevInner::open(&self.config)?);
        *open = Arc::downgrade(&inner);
        Ok(Arc::new(SoftDevice { inner }))
    }

    /// The counters of the device, if it is open.
    pub fn counters(&self) -> Option<Counters> {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.upgrade().map(|d| d.engine().counters())
    }
}

impl Verbs for SoftVerbs {
    fn backend(&self) -> &'static str {
        "softroce"
    }

    fn device_names(&self) -> Result<Vec<String>, VerbsError> {
        Ok(vec![self.config.name.clone()])
    }

    fn open_device(&self, name: &str) -> Result<Arc<dyn Device>, VerbsError> {
        if name != self.config.name {
            return Err(VerbsError::new(
                "ibv_open_device",
                VerbsErrorKind::NotFound,
                format!(
                    "no soft RoCE device named {name} (this one is {})",
                    self.config.name
                ),
            ));
        }
        Ok(self.device()?)
    }
}

/// The device itself, shared by every handle and child object.
struct DevInner {
    name: String,
    ip: Ipv4Addr,
    mtu: Mtu,
    nic: Arc<Nic>,
    /// Our CQs by the address of their `SoftCq`, to find the engine's queue
    /// behind an `Arc<dyn CompletionQueue>`.
    cqs: Mutex<HashMap<usize, Weak<Cq>>>,
    worker: Mutex<Option<Worker>>,
}

impl fmt::Debug for DevInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {}", self.name, self.ip)
    }
}

impl Drop for DevInner {
    fn drop(&mut self) {
        // Stops and joins the worker before the engine goes.
        self.worker.lock().unwrap_or_else(PoisonError::into_inner).take();
    }
}

impl DevInner {
    fn open(config: &SoftConfig) -> Result<Self, VerbsError> {
        let op = "ibv_open_device";
        let what = match config.link {
            LinkKind::Udp => "bind",
            LinkKind::Raw => "open a raw IPv4 socket (needs CAP_NET_RAW) at",
        };
        let open = |ip: Ipv4Addr| -> std::io::Result<Link> {
            let at = SocketAddrV4::new(ip, ROCE_PORT);
            match config.link {
                LinkKind::Udp => udp::bind(at).map(Link::Udp),
                LinkKind::Raw => RawSocket::open(at).map(Link::Raw),
            }
        };
        let sock = match config.addr {
            AddrChoice::Fixed(ip) => {
                open(ip).map_err(|e| os_err(op, &e, format!("cannot {what} {ip}:{ROCE_PORT}")))?
            }
            AddrChoice::FromPid => {
                let mut bound = None;
                for ip in candidates(std::process::id()) {
                    match open(ip) {
                        Ok(s) => {
                            bound = Some(s);
                            break;
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {}
                        Err(e) => return Err(os_err(op, &e, format!("cannot {what} {ip}:{ROCE_PORT}"))),
                    }
                }
                bound.ok_or_else(|| {
                    VerbsError::with_errno(
                        op,
                        VerbsErrorKind::Os,
                        libc::EADDRINUSE,
                        "every candidate address in 127/8 is taken",
                    )
                })?
            }
        };
        let ip = match &sock {
            Link::Raw(r) => *r.local().ip(),
            Link::Udp(u) => match u.local_addr() {
                Ok(std::net::SocketAddr::V4(a)) => *a.ip(),
                Ok(other) => {
                    return Err(VerbsError::new(
                        op,
                        VerbsErrorKind::Os,
                        format!("bound {other}, not IPv4"),
                    ));
                }
                Err(e) => return Err(os_err(op, &e, "no local address".into())),
            },
        };
        let mut ec = EngineConfig::new(ip);
        ec.mtu = config.mtu;
        ec.window = config.window.max(1);
        ec.read_chunk = (ec.window / 2).max(1);
        ec.place_ahead = config.place_ahead;
        let waker = Waker::new().map_err(|e| os_err(op, &e, "eventfd".into()))?;
        let nic = Arc::new(Nic::new(Engine::new(ec), waker));
        let pcap = match &config.pcap {
            Some(path) => Some(
                PcapWriter::create(path)
                    .map_err(|e| os_err(op, &e, format!("cannot write {}", path.display())))?,
            ),
            None => None,
        };
        let opts = WorkerOpts {
            faults: config.faults,
            gso: config.gso,
            stats: config.stats,
            busy_poll: config.busy_poll,
        };
        let worker = Worker::spawn(nic.clone(), sock, opts, pcap, worker_thread_name(&config.name))
            .map_err(|e| os_err(op, &e, "cannot start the worker thread".into()))?;
        Ok(Self {
            name: config.name.clone(),
            ip,
            mtu: config.mtu,
            nic,
            cqs: Mutex::new(HashMap::new()),
            worker: Mutex::new(Some(worker)),
        })
    }

    fn engine(&self) -> std::sync::MutexGuard<'_, Engine> {
        self.nic.lock()
    }
}

/// A handle to an open soft device (`struct ibv_context`).
#[derive(Debug)]
pub struct SoftDevice {
    inner: Arc<DevInner>,
}

impl SoftDevice {
    /// The IPv4 address the device is bound to.
    pub fn ip(&self) -> Ipv4Addr {
        self.inner.ip
    }

    /// GID index 0: the IPv4-mapped address.
    pub fn gid(&self) -> Gid {
        Gid::from_ipv4(self.inner.ip)
    }

    /// A snapshot of the engine's counters.
    pub fn counters(&self) -> Counters {
        self.inner.engine().counters()
    }

    /// Socket errors the worker met.
    pub fn link_errors(&self) -> u64 {
        self.inner
            .nic
            .link_errors
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Device for SoftDevice {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn attr(&self) -> Result<DeviceAttr, VerbsError> {
        let c = *self.inner.engine().config();
        Ok(DeviceAttr {
            vendor_id: 0,
            vendor_part_id: 0,
            phys_port_cnt: 1,
            max_qp: 1 << 16,
            max_qp_wr: c.max_qp_wr,
            max_cqe: 1 << 22,
            max_mr_size: 1 << 40,
            max_qp_rd_atom: 16,
            mw_type2: true,
        })
    }

    fn query_port(&self, port: u8) -> Result<PortAttr, VerbsError> {
        if port != 1 {
            return Err(VerbsError::new(
                "ibv_query_port",
                VerbsErrorKind::NotFound,
                format!("no port {port}"),
            ));
        }
        Ok(PortAttr {
            state: PortState::Active,
            max_mtu: Mtu::Mtu4096,
            active_mtu: self.inner.mtu,
            gid_tbl_len: 1,
            lid: 0,
            link_layer: LinkLayer::Ethernet,
        })
    }

    fn query_gid(&self, port: u8, index: u32) -> Result<Gid, VerbsError> {
        if port != 1 || index != 0 {
            return Err(VerbsError::new(
                "ibv_query_gid",
                VerbsErrorKind::NotFound,
                format!("no GID {index} on port {port}"),
            ));
        }
        Ok(self.gid())
    }

    fn supports_dmabuf(&self) -> bool {
        false
    }

    fn alloc_pd(&self) -> Result<Arc<dyn ProtectionDomain>, VerbsError> {
        let pd = self.inner.engine().alloc_pd();
        Ok(Arc::new(SoftPd {
            inner: Arc::new(PdInner {
                dev: self.inner.clone(),
                pd,
            }),
        }))
    }

    fn create_cq(&self, cqe: u32) -> Result<Arc<dyn CompletionQueue>, VerbsError> {
        if cqe == 0 || cqe > 1 << 22 {
            return Err(VerbsError::new(
                "ibv_create_cq",
                VerbsErrorKind::InvalidArgument,
                format!("{cqe} entries"),
            ));
        }
        let cq = Arc::new(Cq::new(cqe as usize));
        let soft = Arc::new(SoftCq {
            _dev: self.inner.clone(),
            cq: cq.clone(),
        });
        let key = Arc::as_ptr(&soft) as *const u8 as usize;
        let mut cqs = self.inner.cqs.lock().unwrap_or_else(PoisonError::into_inner);
        cqs.retain(|_, w| w.strong_count() > 0);
        cqs.insert(key, Arc::downgrade(&cq));
        Ok(soft)
    }
}

/// A completion queue (`struct ibv_cq`).
#[derive(Debug)]
struct SoftCq {
    _dev: Arc<DevInner>,
    cq: Arc<Cq>,
}

impl CompletionQueue for SoftCq {
    fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize, VerbsError> {
        self.cq.poll(out)
    }

    fn wait(&self, timeout: Duration) -> Result<bool, VerbsError> {
        Ok(self.cq.wait(timeout))
    }
}

#[derive(Debug)]
struct PdInner {
    dev: Arc<DevInner>,
    pd: u32,
}

/// A protection domain (`struct ibv_pd`).
#[derive(Debug)]
struct SoftPd {
    inner: Arc<PdInner>,
}

impl SoftPd {
    fn find_cq(&self, cq: &Arc<dyn CompletionQueue>) -> Result<Arc<Cq>, VerbsError> {
        let key = Arc::as_ptr(cq) as *const u8 as usize;
        let cqs = self.inner.dev.cqs.lock().unwrap_or_else(PoisonError::into_inner);
        cqs.get(&key).and_then(Weak::upgrade).ok_or_else(|| {
            VerbsError::new(
                "ibv_create_qp",
                VerbsErrorKind::InvalidArgument,
                "completion queue does not belong to this soft device",
            )
        })
    }
}

impl ProtectionDomain for SoftPd {
    fn reg_mr(&self, region: MemRegion, access: AccessFlags) -> Result<Box<dyn MemoryRegion>, VerbsError> {
        if !crate::mem::mapped::host_accessible(region.addr() as u64, region.len() as u64) {
            return Err(VerbsError::with_errno(
                "ibv_reg_mr",
                VerbsErrorKind::Os,
                14,
                format!(
                    "{region:?} is not readable and writable host memory (the soft NIC reaches host memory only)"
                ),
            ));
        }
        let key = self.inner.dev.engine().reg_mr(self.inner.pd, region, access)?;
        Ok(Box::new(SoftMr {
            pd: self.inner.clone(),
            key,
            region,
        }))
    }

    fn reg_dmabuf_mr(
        &self,
        _fd: BorrowedFd<'_>,
        _offset: u64,
        _len: usize,
        _iova: u64,
        _access: AccessFlags,
    ) -> Result<Box<dyn MemoryRegion>, VerbsError> {
        Err(VerbsError::new(
            "ibv_reg_dmabuf_mr",
            VerbsErrorKind::Unsupported,
            "the soft NIC reaches host memory only",
        ))
    }

    fn create_qp(&self, init: &QpInitAttr) -> Result<Box<dyn QueuePair>, VerbsError> {
        let send_cq = self.find_cq(&init.send_cq)?;
        let recv_cq = self.find_cq(&init.recv_cq)?;
        let qpn = self.inner.dev.engine().create_qp(QpConfig {
            pd: self.inner.pd,
            send_cq,
            recv_cq,
            max_send_wr: init.max_send_wr,
            max_recv_wr: init.max_recv_wr,
            max_send_sge: init.max_send_sge,
            max_recv_sge: init.max_recv_sge,
            sq_sig_all: init.sq_sig_all,
        })?;
        Ok(Box::new(SoftQp {
            pd: self.inner.clone(),
            qpn,
            _cqs: (init.send_cq.clone(), init.recv_cq.clone()),
        }))
    }

    fn alloc_mw(&self) -> Result<Box<dyn MemoryWindow>, VerbsError> {
        let key = self.inner.dev.engine().alloc_mw(self.inner.pd);
        Ok(Box::new(SoftMw {
            pd: self.inner.clone(),
            key: AtomicU32::new(key),
        }))
    }
}

/// A type-2 memory window (`struct ibv_mw`). Dropping it deallocates it:
/// once `drop` returns, none of its keys grants anything.
#[derive(Debug)]
struct SoftMw {
    pd: Arc<PdInner>,
    /// The key of the latest bind posted.
    key: AtomicU32,
}

impl Drop for SoftMw {
    fn drop(&mut self) {
        self.pd.dev.engine().dealloc_mw(self.key.load(Ordering::Relaxed));
    }
}

impl MemoryWindow for SoftMw {
    fn rkey(&self) -> u32 {
        self.key.load(Ordering::Relaxed)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A registered memory region (`struct ibv_mr`). Dropping it deregisters:
/// once `drop` returns, the worker never touches the memory again.
#[derive(Debug)]
struct SoftMr {
    pd: Arc<PdInner>,
    key: u32,
    region: MemRegion,
}

impl Drop for SoftMr {
    fn drop(&mut self) {
        self.pd.dev.engine().dereg_mr(self.key);
    }
}

impl MemoryRegion for SoftMr {
    fn lkey(&self) -> u32 {
        self.key
    }

    fn rkey(&self) -> u32 {
        self.key
    }

    fn addr(&self) -> u64 {
        self.region.addr() as u64
    }

    fn len(&self) -> usize {
        self.region.len()
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A queue pair (`struct ibv_qp`). Dropping it destroys it.
#[derive(Debug)]
struct SoftQp {
    pd: Arc<PdInner>,
    qpn: u32,
    _cqs: (Arc<dyn CompletionQueue>, Arc<dyn CompletionQueue>),
}

impl Drop for SoftQp {
    fn drop(&mut self) {
        self.pd.dev.engine().destroy_qp(self.qpn);
    }
}

impl QueuePair for SoftQp {
    fn qp_num(&self) -> u32 {
        self.qpn
    }

    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), VerbsError> {
        let now = self.pd.dev.nic.now();
        self.pd.dev.engine().modify_qp(now, self.qpn, attr, mask)?;
        self.pd.dev.nic.waker.wake();
        Ok(())
    }

    fn state(&self) -> Result<QpState, VerbsError> {
        self.pd.dev.engine().qp_state(self.qpn)
    }

    fn post_send(&self, wr: &SendWr<'_>) -> Result<(), VerbsError> {
        let now = self.pd.dev.nic.now();
        self.pd.dev.engine().post_send(now, self.qpn, wr)?;
        // A local invalidate moves no packets (see bind_mw): no wake.
        if !matches!(wr.op, hipobj_platform::SendOp::LocalInv { .. }) {
            self.pd.dev.nic.waker.wake();
        }
        Ok(())
    }

    fn post_recv(&self, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        self.pd.dev.engine().post_recv(self.qpn, wr)
    }

    fn bind_mw(&self, wr: &BindMwWr<'_>) -> Result<u32, VerbsError> {
        let foreign = |what: &str| {
            VerbsError::new(
                "ibv_post_send",
                VerbsErrorKind::InvalidArgument,
                format!("the {what} does not belong to this soft device"),
            )
        };
        let mw = wr
            .mw
            .as_any()
            .downcast_ref::<SoftMw>()
            .ok_or_else(|| foreign("memory window"))?;
        let mr = wr
            .mr
            .as_any()
            .downcast_ref::<SoftMr>()
            .ok_or_else(|| foreign("memory region"))?;
        if !Arc::ptr_eq(&mw.pd.dev, &self.pd.dev) || !Arc::ptr_eq(&mr.pd.dev, &self.pd.dev) {
            return Err(foreign("window or region"));
        }
        let now = self.pd.dev.nic.now();
        let key = self.pd.dev.engine().bind_mw(
            now,
            self.qpn,
            &MwBind {
                wr_id: wr.wr_id,
                mw_key: mw.key.load(Ordering::Relaxed),
                mr_key: mr.key,
                addr: wr.addr,
                length: wr.length,
                access: wr.access,
                signaled: wr.signaled,
                rkey: wr.rkey,
            },
        )?;
        mw.key.store(key, Ordering::Relaxed);
        // No wake: a bind moves no packets. It either ran already or waits
        // for earlier sends, whose ACKs the worker handles anyway.
        Ok(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_thread_names_fit_the_kernel_and_keep_the_prefix() {
        assert_eq!(worker_thread_name("softroce0"), "nic:softroce0");
        assert_eq!(worker_thread_name("a-very-long-device-name"), "nic:a-very-long");
        // Never split a character, never carry a NUL.
        assert_eq!(worker_thread_name("d\0évicééé"), "nic:dévicéé");
        assert!(worker_thread_name("ééééééééé").len() <= 15);
    }

    #[test]
    fn pid_candidates_stay_in_127_8_and_avoid_localhost() {
        for pid in [0, 1, 255, 256, 65535, 1 << 22, u32::MAX] {
            let c: Vec<Ipv4Addr> = candidates(pid).take(600).collect();
            assert!(c.len() > 500);
            for ip in c {
                let o = ip.octets();
                assert_eq!(o[0], 127);
                assert!((64..=127).contains(&o[1]), "{ip}");
                assert!(o[3] != 0 && o[3] != 255, "{ip}");
                assert_ne!(ip, Ipv4Addr::LOCALHOST);
            }
        }
        assert_ne!(candidates(100).next(), candidates(101).next());
    }
}
