//! The Instance: everything one `init` builds, and the operations on it.
//!
//! Everything but the buffer map, the pool and the abandoned copies is fixed
//! once the instance is built; those three have locks of their own, so the
//! instance needs none. Calls hold an `Arc<Instance>` for their whole run, so
//! an instance outlives a shutdown until the last call using it returns.
//!
//! Its operations live beside it, one concern to a file: registration and
//! staging (`register`), the application-driven tokens (`tokens`), the
//! transfer sequence (`transfer`), and the checks of what a server's reply
//! claims, which the last two share (`proof`).

mod proof;
mod register;
mod tokens;
mod transfer;

use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use hipobj_platform::Platform;
use hipobj_proto::{Token, Transport};

use crate::abandoned::AbandonedCopies;
use crate::buffers::{BufEntry, BufKind, BufferMap};
use crate::config::Config;
use crate::connection::Connection;
use crate::device::RdmaDevice;
use crate::error::{Error, ErrorKind, Result};
use crate::nic::{self, Chosen};
use crate::options::Options;
use crate::peer::{ControlChannel, Servers};
use crate::pool::ConnectionPool;

use tokens::TokenConn;

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
    /// The process that built it. A child that `fork()` made after that
    /// holds a copy whose keys, QPs and registrations are the parent's (the
    /// kernel objects behind them are shared through the inherited device
    /// file): it may use none of them, and must not release them either.
    owner: u32,
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
            token_conn: Mutex::new(TokenConn::new(token_conn)),
            device,
            chosen,
            options,
            platform,
            server_addrs: Mutex::new(None),
            owner: std::process::id(),
        })
    }

    /// Whether this process is not the one that built the instance: a child
    /// that `fork()` made after init.
    pub fn forked(&self) -> bool {
        std::process::id() != self.owner
    }

    /// `NotInitialized` in a forked child (see [`Instance::forked`]), before
    /// anything (a lock, a key, a QP, a registration) is touched.
    pub fn check_process(&self) -> Result<()> {
        if self.forked() {
            return Err(Error::new(
                ErrorKind::NotInitialized,
                format!(
                    "hipObject was initialized in process {}, and this is a child it forked (process {}): the child may not use the parent's keys, connections or registrations; initialize hipObject again in the child (hipObjInit, or a new client)",
                    self.owner,
                    std::process::id()
                ),
            ));
        }
        Ok(())
    }

    /// In a forked child, keeps this instance alive for good (one reference
    /// leaked), so that its drop never releases the parent's RDMA objects
    /// through the inherited device file. Called by every holder that lets
    /// go of an instance.
    pub fn leak_if_forked(self: &Arc<Self>) {
        if self.forked() {
            std::mem::forget(Arc::clone(self));
        }
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

    /// The check of a server token that came back over `channel` against
    /// `endpoint` and the switch.
    pub(crate) fn servers<'a>(
        &'a self,
        endpoint: Option<&'a [IpAddr]>,
        channel: ControlChannel,
    ) -> Servers<'a> {
        Servers {
            endpoint,
            allow: &self.options.allow_peer,
            channel,
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

    pub(crate) fn find_usable(&self, addr: usize) -> Result<Arc<BufEntry>> {
        self.check_process()?;
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
}
