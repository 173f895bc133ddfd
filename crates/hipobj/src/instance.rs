//! The Instance: everything one `init` builds, and the operations on it.
//!
//! Everything but the buffer map, the pool and the abandoned copies is fixed
//! once the instance is built; those three have locks of their own, so the
//! instance needs none. Calls hold an `Arc<Instance>` for their whole run, so
//! an instance outlives a shutdown until the last call using it returns.

use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use hipobj_platform::{MemRegion, Platform, PointerKind};
use hipobj_proto::{Reply, Token, Transport};

use crate::abandoned::AbandonedCopies;
use crate::buffers::{BufEntry, BufKind, BufMrs, BufferMap, MAX_BUFFER_SIZE};
use crate::connection::{Connection, Grant, Peer};
use crate::control::Control;
use crate::device::RdmaDevice;
use crate::error::{Error, ErrorKind, Result};
use crate::nic::{self, Chosen};
use crate::options::Options;
use crate::peer::{AllowPeer, Servers};
use crate::pool::{ConnectionPool, Lease};

/// What `init` is asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Reserved; must be 0.
    pub flags: u32,
    /// The GPU to choose the closest NIC to, or -1 for the current device.
    pub gpu_device: i32,
    /// `nicHint`: comma-separated RDMA device names that may be chosen;
    /// `None` or empty allows all.
    pub nic_hint: Option<String>,
}

impl Config {
    /// The checks that need no platform.
    pub fn validate(&self) -> Result<()> {
        if self.flags != 0 {
            return Err(Error::invalid(format!(
                "config flags must be 0, not {:#x}",
                self.flags
            )));
        }
        if self.gpu_device < -1 {
            return Err(Error::invalid(format!(
                "gpuDevice must be -1 or a GPU index, not {}",
                self.gpu_device
            )));
        }
        Ok(())
    }
}

/// Which way a transfer moves bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// The server RDMA WRITEs into the buffer.
    Get,
    /// The server RDMA READs from the buffer.
    Put,
}

/// Which way `sync` copies a staged buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncDirection {
    /// Device memory to the staging buffer (before a PUT).
    ToHost,
    /// The staging buffer to device memory (after a GET).
    ToDevice,
}

/// Size of the buffer the reply is read into.
pub const REPLY_CAPACITY: usize = 512;

/// One initialized library.
#[derive(Debug)]
pub struct Instance {
    // Field order is drop order: copies that may still run, then buffers
    // (MRs before their memory), then QPs, then the device, then the platform.
    abandoned: AbandonedCopies,
    buffers: BufferMap,
    pool: Arc<ConnectionPool>,
    token_conn: Mutex<TokenConn>,
    device: Arc<RdmaDevice>,
    chosen: Chosen,
    options: Options,
    platform: Platform,
    /// The server's addresses, as the application gave them
    /// (`hipObjSetServerAddress`), for transfers whose `Control` does not
    /// say.
    server_addrs: Mutex<Option<Vec<IpAddr>>>,
}

impl Instance {
    /// Builds an instance: resolves the GPU, chooses and opens the NIC, and
    /// creates the token connection and the pool. Nothing is kept on failure.
    pub fn new(platform: Platform, options: Options, config: &Config) -> Result<Self> {
        config.validate()?;
        let (dev, chosen) = nic::choose(&platform, config)?;
        let device = Arc::new(RdmaDevice::new(dev, &chosen.selection)?);
        if options.require_mw && !device.windows() {
            return Err(Error::new(
                ErrorKind::RdmaError,
                format!(
                    "RDMA device {} has no type-2 memory windows, and HIPOBJ_REQUIRE_MW refuses the access-flag fallback",
                    chosen.selection.device
                ),
            ));
        }
        let token_conn = Connection::new(device.clone())?;
        let pool = Arc::new(ConnectionPool::new(device.clone(), options.max_transfers)?);
        Ok(Self {
            abandoned: AbandonedCopies::default(),
            buffers: BufferMap::default(),
            pool,
            token_conn: Mutex::new(TokenConn {
                conn: Some(token_conn),
                grant: None,
                may_bind: false,
            }),
            device,
            chosen,
            options,
            platform,
            server_addrs: Mutex::new(None),
        })
    }

    /// The settings in force.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Sets the addresses of the server that this instance's requests go
    /// to, for the transfers whose [`Control`] does not name them (the C
    /// API's, the application-driven tokens', hipobj-rc-v2 sessions
    /// without [`crate::RcV2Session::expect_server`]): a server token may
    /// then only name a GID among them, or among `HIPOBJ_ALLOW_PEER_GID`'s
    /// (docs/protocol.md §8). `None` (the default) checks nothing.
    pub fn set_server_addrs(&self, addrs: Option<Vec<IpAddr>>) {
        *self.server_addrs.lock().unwrap_or_else(PoisonError::into_inner) = addrs;
    }

    /// What [`Instance::set_server_addrs`] set.
    pub fn server_addrs(&self) -> Option<Vec<IpAddr>> {
        self.server_addrs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The check of a server token against `endpoint` and the switch.
    pub(crate) fn servers<'a>(&'a self, endpoint: Option<&'a [IpAddr]>) -> Servers<'a> {
        Servers {
            endpoint,
            allow: &self.options.allow_peer,
        }
    }

    /// The platform it runs on.
    pub(crate) fn platform(&self) -> &Platform {
        &self.platform
    }

    /// What init chose.
    pub fn chosen(&self) -> &Chosen {
        &self.chosen
    }

    /// The open device.
    pub fn device(&self) -> &RdmaDevice {
        &self.device
    }

    /// The connection pool.
    pub fn pool(&self) -> &Arc<ConnectionPool> {
        &self.pool
    }

    /// The registered buffers.
    pub fn buffers(&self) -> &BufferMap {
        &self.buffers
    }

    /// Staging copies that timed out and may still run.
    pub fn abandoned(&self) -> &AbandonedCopies {
        &self.abandoned
    }

    pub(crate) fn close(&self) {
        self.pool.close();
    }

    fn check_new_region(&self, region: &MemRegion) -> Result<()> {
        if region.addr() == 0 {
            return Err(Error::invalid("the buffer pointer is NULL"));
        }
        if region.is_empty() {
            return Err(Error::invalid("the buffer size is 0"));
        }
        if region.len() as u64 > MAX_BUFFER_SIZE {
            return Err(Error::new(
                ErrorKind::SizeTooLarge,
                format!(
                    "{} bytes is over the 4 GiB limit of one registration",
                    region.len()
                ),
            ));
        }
        if region.addr().checked_add(region.len()).is_none() {
            return Err(Error::invalid("the buffer wraps around the address space"));
        }
        self.buffers.check_free(region.addr(), region.len())
    }

    fn insert(&self, entry: BufEntry) -> Result<()> {
        // If another thread won a race for the same range, our registration
        // is released here, after the map's lock.
        self.buffers.insert(entry).map_err(|(e, _loser)| e)
    }

    /// Registers host memory (`hipObjBufRegisterHost`).
    pub fn register_host(&self, region: MemRegion) -> Result<()> {
        self.check_new_region(&region)?;
        let info = self.platform.gpu.pointer_info(region.addr()).map_err(|e| {
            Error::gpu(
                ErrorKind::InvalidValue,
                "asking the GPU runtime about the pointer",
                &e,
            )
        })?;
        if let PointerKind::Device(d) = info.kind {
            return Err(Error::invalid(format!(
                "{:#x} is memory of GPU {d}: register it with hipObjBufRegister",
                region.addr()
            )));
        }
        let pd = self.device.pd();
        let windows = self.device.windows();
        let mrs = BufMrs::register(windows, |access| pd.reg_mr(region, access))
            .map_err(|e| Error::rdma("registering host memory", &e))?;
        self.insert(BufEntry::direct(region.addr(), region.len(), BufKind::Host, mrs))
    }

    /// Registers GPU memory (`hipObjBufRegister`): as a dma-buf when enabled
    /// and supported, else with a plain MR, else through a pinned host
    /// staging buffer (unless GPU-direct is required).
    pub fn register_device(&self, region: MemRegion) -> Result<()> {
        self.check_new_region(&region)?;
        let gpu = &self.platform.gpu;
        let info = gpu.pointer_info(region.addr()).map_err(|e| {
            Error::gpu(
                ErrorKind::InvalidValue,
                "asking the GPU runtime about the pointer",
                &e,
            )
        })?;
        let PointerKind::Device(_) = info.kind else {
            return Err(Error::invalid(format!(
                "{:#x} is not GPU memory: register host memory with hipObjBufRegisterHost",
                region.addr()
            )));
        };
        let (base, size) = info.allocation.ok_or_else(|| {
            Error::invalid(format!(
                "the GPU runtime knows no allocation holding {:#x}",
                region.addr()
            ))
        })?;
        let inside =
            region.addr() >= base && region.len() <= size && region.addr() - base <= size - region.len();
        if !inside {
            return Err(Error::invalid(format!(
                "{:#x}+{} runs past the end of its GPU allocation {base:#x}+{size}",
                region.addr(),
                region.len()
            )));
        }
        let pd = self.device.pd();
        let windows = self.device.windows();
        if self.options.dmabuf && self.device.device().supports_dmabuf() {
            match gpu.export_dmabuf(region.addr(), region.len()) {
                Ok(buf) => {
                    use std::os::fd::AsFd;
                    let registered = BufMrs::register(windows, |access| {
                        pd.reg_dmabuf_mr(
                            buf.fd.as_fd(),
                            buf.offset,
                            region.len(),
                            region.addr() as u64,
                            access,
                        )
                    });
                    // The MRs keep their own reference to the dma-buf; its fd
                    // closes when `buf` goes out of scope.
                    match registered {
                        Ok(mrs) => {
                            return self.insert(BufEntry::direct(
                                region.addr(),
                                region.len(),
                                BufKind::Device { dmabuf: true },
                                mrs,
                            ));
                        }
                        Err(e) if self.options.rdma_debug => {
                            eprintln!("hipObject: dma-buf registration failed: {e}");
                        }
                        Err(_) => {}
                    }
                }
                Err(e) if self.options.rdma_debug => eprintln!("hipObject: dma-buf export failed: {e}"),
                Err(_) => {}
            }
        }
        if let Ok(mrs) = BufMrs::register(windows, |access| pd.reg_mr(region, access)) {
            return self.insert(BufEntry::direct(
                region.addr(),
                region.len(),
                BufKind::Device { dmabuf: false },
                mrs,
            ));
        }
        if self.options.require_gpu_direct {
            return Err(Error::new(
                ErrorKind::DmabufNotSupported,
                format!(
                    "the NIC cannot reach GPU memory at {:#x} directly, and HIPOBJ_REQUIRE_GPU_DIRECT forbids staging",
                    region.addr()
                ),
            ));
        }
        let staging = gpu
            .alloc_pinned(region.len())
            .map_err(|e| Error::gpu(ErrorKind::RdmaError, "allocating a pinned staging buffer", &e))?;
        // The entry owns the staging buffer and drops it after the MRs over it.
        let mrs = BufMrs::register(windows, |access| pd.reg_mr(staging.region(), access))
            .map_err(|e| Error::rdma("registering a staging buffer", &e))?;
        eprintln!(
            "hipObject: warning: the NIC cannot reach GPU memory at {:#x} directly; it is staged through host memory and no longer GPU-direct",
            region.addr()
        );
        self.insert(BufEntry::staged(region.addr(), region.len(), mrs, staging))
    }

    /// Deregisters a buffer, unless something still uses it.
    pub fn deregister(&self, addr: usize) -> Result<()> {
        if addr == 0 {
            return Err(Error::invalid("the buffer pointer is NULL"));
        }
        self.abandoned.prune_all();
        self.revoke_token_grant(|_, g| g.entry.addr() == addr);
        let entry = self.buffers.remove(addr)?;
        // The MR and staging buffer are released here, after the map's lock.
        drop(entry);
        Ok(())
    }

    pub(crate) fn find_usable(&self, addr: usize) -> Result<Arc<BufEntry>> {
        if addr == 0 {
            return Err(Error::invalid("the buffer pointer is NULL"));
        }
        let entry = self.buffers.find(addr)?;
        if entry.kind() == BufKind::Staged && self.abandoned.busy(addr) {
            return Err(Error::busy(format!(
                "a staging copy of the buffer at {addr:#x} timed out and is still running"
            )));
        }
        Ok(entry)
    }

    /// Copies part of a staged buffer between device and staging memory,
    /// with the staging deadline. A copy that misses it is handed to the
    /// abandoned list and the call fails with `InternalError`.
    pub(crate) fn stage(
        &self,
        entry: &Arc<BufEntry>,
        offset: usize,
        size: usize,
        dir: SyncDirection,
    ) -> Result<()> {
        let Some(staging) = entry.staging_addr() else {
            return Ok(());
        };
        let (dst, src) = match dir {
            SyncDirection::ToHost => (staging + offset, entry.addr() + offset),
            SyncDirection::ToDevice => (entry.addr() + offset, staging + offset),
        };
        let slot = self.abandoned.reserve();
        let event = self
            .platform
            .gpu
            .copy_async(dst, src, size)
            .map_err(|e| Error::gpu(ErrorKind::InternalError, "starting a staging copy", &e))?;
        match hipobj_platform::gpu::wait_for_copy(event.as_ref(), self.options.stage_timeout) {
            Ok(true) => Ok(()),
            Ok(false) => {
                self.abandoned.add(slot, entry.clone(), event);
                Err(Error::new(
                    ErrorKind::InternalError,
                    format!(
                        "a staging copy did not finish within {} ms; the buffer stays busy until it does",
                        self.options.stage_timeout.as_millis()
                    ),
                ))
            }
            Err(e) => {
                self.abandoned.add(slot, entry.clone(), event);
                Err(Error::gpu(
                    ErrorKind::InternalError,
                    "waiting for a staging copy",
                    &e,
                ))
            }
        }
    }

    /// `hipObjBufSync`: copies a staged buffer's range between device and
    /// host; does nothing for a buffer the NIC reaches directly.
    pub fn sync(&self, addr: usize, size: usize, offset: usize, dir: SyncDirection) -> Result<()> {
        let entry = self.find_usable(addr)?;
        entry.check_range(offset, size)?;
        self.stage(&entry, offset, size, dir)
    }

    /// Waits for the GPU work queued so far on `stream`, a stream handle of
    /// the platform's GPU runtime (0 is the default stream). Bindings call
    /// it before a transfer's token exists, so the server's RDMA READ of a
    /// PUT sees what the stream's kernels wrote, and the RDMA WRITE of a GET
    /// (or, for a staged buffer, the copy to the GPU that ends it) does not
    /// race the stream's own use of the buffer. A failure is
    /// `InvalidValue` carrying the runtime's error number: a handle the
    /// runtime does not know, or no GPU runtime at all.
    pub fn synchronize_stream(&self, stream: usize) -> Result<()> {
        self.platform.gpu.stream_synchronize(stream).map_err(|e| {
            Error::gpu(
                ErrorKind::InvalidValue,
                &format!("synchronizing stream {stream:#x}"),
                &e,
            )
        })
    }

    fn mint(&self, qpn: u32, entry: &BufEntry, offset: usize, size: usize, rkey: u32) -> Token {
        Token {
            transport: Transport::Rc,
            qpn,
            gid: self.device.gid().0,
            rkey,
            addr: entry.token_addr().wrapping_add(offset as u64),
            len: size as u64,
            port: self.device.port(),
            lid: 0,
        }
    }

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
        if size == 0 {
            return Err(Error::invalid("the token size is 0"));
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
            && let Err(e) = conn.ready_for_get(size as u64)
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
        let Ok(t) = Token::decode(token.as_bytes()) else {
            return;
        };
        self.revoke_token_grant(|qpn, g| g.rkey == t.rkey && t.qpn == qpn);
    }

    /// Ends the application-driven grant if `which` (given the token
    /// connection's QP number) selects it; a connection that cannot end it
    /// is replaced.
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
        let reply = hipobj_proto::parse_reply(reply).map_err(|e| {
            Error::invalid(format!(
                "the x-amz-rdma-reply value {:?} is malformed: {e}",
                String::from_utf8_lossy(reply)
            ))
        })?;
        let endpoint = self.server_addrs();
        let servers = self.servers(endpoint.as_deref());
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

    /// Leases a connection whose CQ is empty. A completion before anything
    /// was sent means the QP failed, or a peer wrote with an immediate
    /// outside any transfer (which must not count as a later GET's proof):
    /// such a connection is destroyed and another leased.
    pub(crate) fn acquire_idle(&self) -> Result<Lease> {
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
        if size == 0 {
            return Err(Error::invalid("the transfer size is 0"));
        }
        if size as u64 > MAX_BUFFER_SIZE {
            return Err(Error::new(
                ErrorKind::SizeTooLarge,
                format!("{size} bytes is over the 4 GiB limit of one transfer"),
            ));
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
struct TokenConn {
    /// `None` only after a replacement failed.
    conn: Option<Connection>,
    /// What the latest token grants, until `hipObjPutRdmaToken`, a failed
    /// reply, the buffer's deregistration or the next token.
    grant: Option<TokenGrant>,
    /// Whether the next 409 may bind: set by a new token or a completed
    /// transfer, cleared by any reply.
    may_bind: bool,
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

/// What a transfer of `size` bytes at `offset` in direction `dir` grants:
/// exactly that range, with only the right the server's RDMA needs.
fn grant_of(entry: &BufEntry, dir: Direction, offset: usize, size: usize, rkey: u32) -> Grant<'_> {
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

/// The server end a server token names, after checking that it can be one:
/// an RC QP number in 2..2^24 (0 and 1 are special QPs), a unicast GID that
/// is not `::` (nor an IPv4-mapped unspecified, multicast or broadcast
/// address), and a port of at least 1, on a server `servers` accepts
/// (crate::peer). Anything else fails the call before any QP is touched.
fn peer_of(token: &Token, servers: Servers<'_>) -> Result<Peer> {
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
fn proven_reply(conn: &Connection, reply: &Reply, servers: Servers<'_>) -> Result<(Peer, u64)> {
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
fn check_count(bytes: u64, asked: u64) -> Result<()> {
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
            Direction::Get => conn.ready_for_get(self.size as u64),
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
    };
    let (bound, bytes) = proven_reply(conn, &reply, servers)?;
    check_count(bytes, token.len)?;
    match ask.dir {
        Direction::Get => conn.take_landed(token.rkey, token.len)?,
        Direction::Put => conn.check()?,
    }
    Ok(bound)
}
