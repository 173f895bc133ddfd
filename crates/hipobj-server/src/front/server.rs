//! Starting and stopping the server in-process: [`Server::start`] binds,
//! serves on the current tokio runtime, and returns a [`Handle`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

use crate::Error;
use crate::config::{Config, HttpConfig};
use crate::front::conn::{ConnHandle, ConnState, Guarded, tune};
use crate::front::proxy_protocol::{Proxied, Trusted, read_header};
use crate::front::service::{Front, s3_service};
use crate::front::shares::Shares;
use crate::metrics::Metrics;
use crate::rdma::{Rdma, RdmaLayer, VerbsProvider};

/// The server, as a library.
#[derive(Debug)]
pub struct Server;

/// A running server.
#[derive(Debug)]
pub struct Handle {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    metrics: Arc<Metrics>,
    rdma: Option<Arc<Rdma>>,
    v2: Option<Arc<hipobj_target::rc_v2::V2Sessions>>,
    tls: Option<Arc<crate::front::tls::Certs>>,
    metrics_addr: Option<SocketAddr>,
    keys: Arc<crate::keys::Keys>,
    health: Arc<crate::health::Health>,
    drain_delay: Duration,
}

impl Server {
    /// Starts a server as `config` says; RDMA, when enabled, opens the
    /// device with the configured verbs backend.
    pub async fn start(config: Config) -> Result<Handle, Error> {
        let provider = if config.rdma.enabled {
            Some(match config.rdma.backend {
                crate::config::VerbsBackend::Ibverbs => VerbsProvider::ibverbs()?,
                crate::config::VerbsBackend::Softroce => VerbsProvider::softroce()?,
            })
        } else {
            None
        };
        Self::start_with(config, provider).await
    }

    /// Starts a server whose RDMA device (if `config.rdma.enabled`) comes
    /// from `provider`: a soft NIC, a fake, or libibverbs.
    pub async fn start_with(config: Config, provider: Option<VerbsProvider>) -> Result<Handle, Error> {
        config.validate()?;
        let metrics = Arc::new(Metrics::default());
        let rdma = open_rdma(&config, provider)?;
        let store = crate::store::open(&config)?;
        let keys = crate::keys::Keys::new(&config).map_err(|e| Error::Config(e.to_string()))?;
        if let Some(f) = keys.file() {
            crate::keys::warn_if_readable_by_others(f);
        }
        if keys.current().is_empty() && !config.anonymous {
            return Err(Error::Config(
                "no credentials are configured and anonymous access is off: no request could succeed".into(),
            ));
        }
        let health =
            crate::health::Health::new(crate::health::Probe::of(&config.storage, &store), rdma.clone());
        let owners = crate::s3::owners::Owners::new(&config)?;
        let sessions = v2_sessions(rdma.as_ref(), &config, &keys);
        let v2 = crate::rdma::rc_v2::V2 {
            sessions: sessions.clone(),
            store: store.clone(),
            owners: owners.clone(),
            keys: keys.clone(),
            metrics: metrics.clone(),
        };
        let layer = RdmaLayer::new(store, rdma.clone(), metrics.clone(), owners.clone());
        let scrape = crate::metrics_http::Source {
            metrics: metrics.clone(),
            rdma: rdma.clone(),
            sessions: sessions.clone(),
            data_dir: data_dir(&config),
        };
        let metrics_access =
            crate::metrics_http::Access::new(config.metrics_token.as_ref().map(|t| t.expose()));
        let front = Front {
            s3: s3_service(layer, &config, owners, keys.clone()),
            metrics: metrics.clone(),
            endpoints: config.metrics_endpoint,
            v2,
            bodies: crate::front::body::BodyLimits::new(&config.http, config.anonymous),
            unsized_bodies: crate::front::unsized_body::Budget::new(
                config.http.unsized_body_limit,
                config.http.unsized_body_budget,
            ),
            scrape: scrape.clone(),
            metrics_access: metrics_access.clone(),
            metrics_here: config.metrics_listen.is_none(),
            health: health.clone(),
        };
        let tls = crate::front::tls::Tls::from_config(&config.tls)?;
        let listener = TcpListener::bind(config.address)
            .await
            .map_err(|e| Error::Io(format!("binding {}", config.address), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::Io("reading the bound address".into(), e))?;
        let (stop, stopped) = watch::channel(false);
        let (metrics_listener, metrics_addr) = bind_metrics(config.metrics_listen).await?;
        tracing::info!(
            %addr,
            rdma = rdma.is_some(),
            tls = tls.is_some(),
            storage = %crate::config_text::storage(&config.storage),
            metrics = %metrics_place(addr, metrics_addr, config.metrics_endpoint),
            "hipobj-server listening"
        );
        if let Some(l) = metrics_listener {
            tokio::spawn(crate::metrics_http::serve(
                l,
                scrape,
                metrics_access,
                stopped.clone(),
            ));
        }
        let certs = tls.as_ref().map(|t| t.certs().clone());
        spawn_watchers(
            &config,
            certs.as_ref(),
            &metrics,
            sessions.as_ref(),
            &keys,
            &stopped,
        );
        let grace = Duration::from_secs(config.shutdown_grace_secs);
        let shares = Shares::new(
            config
                .http
                .max_connections_per_address
                .min(config.http.max_connections),
            metrics.clone(),
        );
        let task = tokio::spawn(serve(
            listener,
            front,
            Limits {
                stopped,
                grace,
                http: config.http.clone(),
                shares,
                tls,
                proxies: Trusted::parse(&config.http.proxy_protocol_from).map_err(Error::Config)?,
            },
        ));
        Ok(Handle {
            addr,
            stop,
            task: Some(task),
            metrics,
            rdma,
            v2: sessions,
            tls: certs,
            metrics_addr,
            keys,
            health,
            drain_delay: Duration::from_secs(config.drain_delay_secs),
        })
    }
}

impl Handle {
    /// Where the server listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`, or `https://<addr>` when the listener serves TLS.
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The served TLS certificates, when the listener serves TLS.
    pub fn tls(&self) -> Option<&Arc<crate::front::tls::Certs>> {
        self.tls.as_ref()
    }

    /// Reads the TLS certificate and key files again (what SIGHUP does to
    /// the `hipobj-server` command) and serves the new pair to the
    /// connections that open from now on. On an error the pair in service
    /// stays; without TLS this does nothing.
    pub fn reload_tls(&self) -> Result<(), Error> {
        match &self.tls {
            Some(c) => Ok(c.reload()?),
            None => Ok(()),
        }
    }

    /// Where the metrics listener (`metrics_listen`) listens, when set.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The counters.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The RDMA engine, when enabled.
    pub fn rdma(&self) -> Option<&Arc<Rdma>> {
        self.rdma.as_ref()
    }

    /// The hipobj-rc-v2 sessions, when RDMA is enabled.
    pub fn v2_sessions(&self) -> Option<&Arc<hipobj_target::rc_v2::V2Sessions>> {
        self.v2.as_ref()
    }

    /// The access keys in service (`crate::keys`).
    pub fn keys(&self) -> &Arc<crate::keys::Keys> {
        &self.keys
    }

    /// Readiness and the drain flag (`crate::health`).
    pub fn health(&self) -> &Arc<crate::health::Health> {
        &self.health
    }

    /// How long [`crate::drain::drain`] keeps the listener open.
    pub fn drain_delay(&self) -> Duration {
        self.drain_delay
    }

    /// Stops accepting connections, lets requests in flight (RDMA transfers
    /// included) finish within the grace period, and returns when done.
    /// Readiness is false from the start.
    pub async fn shutdown(mut self) {
        self.health.start_draining();
        let _ = self.stop.send(true);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }

    /// Waits until the server stops (after [`Handle::shutdown`] from
    /// elsewhere, or a signal that the caller turns into one).
    pub fn stopper(&self) -> watch::Sender<bool> {
        self.stop.clone()
    }

    /// Waits for the serving task to end.
    pub async fn wait(mut self) {
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // A dropped handle stops its server.
        let _ = self.stop.send(true);
    }
}

async fn stop_requested(rx: &mut watch::Receiver<bool>) {
    // A closed channel (every sender gone) also means stop.
    let _ = rx.wait_for(|s| *s).await;
}

/// What the accept loop holds its connections to.
struct Limits {
    stopped: watch::Receiver<bool>,
    grace: Duration,
    http: HttpConfig,
    shares: Arc<Shares>,
    tls: Option<crate::front::tls::Tls>,
    /// Load balancers whose connections carry a PROXY header.
    proxies: Trusted,
}

/// Counts a connection in the `hipobj_http_connections` gauge while alive.
struct Open(Arc<Metrics>);

impl Open {
    fn new(m: &Arc<Metrics>) -> Self {
        m.http_connections
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self(m.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0
            .http_connections
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

async fn serve(listener: TcpListener, front: Front, limits: Limits) {
    let Limits {
        mut stopped,
        grace,
        http,
        shares,
        tls,
        proxies,
    } = limits;
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(http.max_connections));
    let mut at_cap = false;
    let header_read = Duration::from_secs(http.header_read_timeout_secs.max(1));
    loop {
        let (stream, peer) = tokio::select! {
            () = stop_requested(&mut stopped) => break,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: back off.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let conn = Connection {
            front: front.clone(),
            http: http.clone(),
            tls: tls.clone(),
            graceful: graceful.watcher(),
        };
        if proxies.contains(peer.ip()) {
            // A load balancer's connection (`crate::front::proxy_protocol`): a slot
            // now, and its client's share once the header has named it.
            let Some(slot) = take_slot(&slots, &shares, None, &mut at_cap, &http, &mut stopped).await else {
                break;
            };
            let shares = shares.clone();
            tokio::spawn(async move {
                let mut stream = stream;
                let client = match tokio::time::timeout(header_read, read_header(&mut stream)).await {
                    Ok(Ok(Proxied::Client(client))) => client,
                    Ok(Ok(Proxied::Local)) => peer,
                    Ok(Err(e)) => {
                        tracing::info!(%peer, "connection from a trusted load balancer dropped: {e}");
                        return;
                    }
                    Err(_) => {
                        tracing::info!(%peer, "connection from a trusted load balancer dropped: no PROXY header in time");
                        return;
                    }
                };
                let state = ConnState::new();
                let Some(ticket) = shares.admit(client.ip(), state.clone()) else {
                    tracing::debug!(%client, "connection refused: its address holds its share");
                    return;
                };
                conn.run(stream, client, state).await;
                drop((slot, ticket));
            });
            continue;
        }
        // The address's share first: past it, the address's own idle
        // connection makes room, or this one is refused.
        let state = ConnState::new();
        let Some(ticket) = shares.admit(peer.ip(), state.clone()) else {
            tracing::debug!(%peer, "connection refused: its address holds its share");
            drop(stream);
            continue;
        };
        let Some(slot) = take_slot(&slots, &shares, Some(&ticket), &mut at_cap, &http, &mut stopped).await
        else {
            break;
        };
        tokio::spawn(async move {
            conn.run(stream, peer, state).await;
            drop((slot, ticket));
        });
    }
    drop(listener);
    tracing::info!("shutting down: waiting for requests in flight");
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections closed"),
        () = tokio::time::sleep(grace) => tracing::warn!("grace period over; dropping the connections left"),
    }
}

/// A connection slot. At the cap, the address holding the most
/// connections gives up an idle one (never `admitted`, the connection the
/// slot is for); with none idle anywhere this waits (and later
/// connections in the listen backlog) until one closes. `None` once the
/// server stops.
async fn take_slot(
    slots: &Arc<Semaphore>,
    shares: &Shares,
    admitted: Option<&crate::front::shares::Ticket>,
    at_cap: &mut bool,
    http: &HttpConfig,
    stopped: &mut watch::Receiver<bool>,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    let slot = match slots.clone().try_acquire_owned() {
        Ok(s) => s,
        Err(_) => {
            // (The connection admitting this one closed, if any, is about
            // to free its slot; this one itself never goes.)
            let made_room = admitted.is_some_and(|t| t.made_room);
            if !made_room && !shares.close_one_for_room(admitted) && !*at_cap {
                *at_cap = true;
                tracing::warn!(
                    max_connections = http.max_connections,
                    "connection limit reached and no connection is idle: new connections wait until one closes"
                );
            }
            tokio::select! {
                () = stop_requested(stopped) => return None,
                s = slots.clone().acquire_owned() => s.ok()?,
            }
        }
    };
    if *at_cap && slots.available_permits() > 0 {
        *at_cap = false;
        tracing::info!("below the connection limit again");
    }
    Some(slot)
}

/// What serving one accepted connection needs.
struct Connection {
    front: Front,
    http: HttpConfig,
    tls: Option<crate::front::tls::Tls>,
    graceful: hyper_util::server::graceful::Watcher,
}

impl Connection {
    /// Serves HTTP/1.1 (over TLS when configured) on `stream` for the
    /// client at `peer` until the connection ends.
    async fn run(self, stream: TcpStream, peer: SocketAddr, state: Arc<ConnState>) {
        let Self {
            front,
            http,
            tls,
            graceful,
        } = self;
        if let Err(e) = tune(&stream, &http) {
            tracing::debug!(%peer, "setting socket options: {e}");
        }
        let marks = state.clone();
        let transport = crate::front::conn::Transport { tls: tls.is_some() };
        let open = Open::new(&front.metrics);
        let service = hyper::service::service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(crate::rdma::ClientAddr(peer));
            req.extensions_mut().insert(transport);
            req.extensions_mut().insert(ConnHandle(marks.clone()));
            let f = front.clone();
            let serving = marks.serving();
            async move {
                let _serving = serving;
                let mut resp = f.call(req).await;
                if let Ok(r) = &mut resp {
                    f.health.mark(r);
                }
                resp
            }
        });
        let io = TokioIo::new(crate::front::tls::stream(
            Guarded::new(stream, state, &http),
            tls.as_ref(),
        ));
        let conn = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
        if let Err(e) = graceful.watch(conn).await {
            tracing::debug!(%peer, "connection ended: {e}");
        }
        drop(open);
    }
}

/// Drops v2 sessions whose READY did not come in time, once a second, so
/// that a client that died after PREPARE holds nothing for long.
/// The rc-v2 sessions of a server with RDMA; a revoked key's prepared
/// sessions go with it (READY is signed and would be refused anyway; this
/// frees their staging now).
fn v2_sessions(
    rdma: Option<&Arc<Rdma>>,
    config: &Config,
    keys: &crate::keys::Keys,
) -> Option<Arc<hipobj_target::rc_v2::V2Sessions>> {
    let sessions = rdma.map(|r| {
        Arc::new(hipobj_target::rc_v2::V2Sessions::new(
            r.target().clone(),
            config.rdma.v2_config(),
        ))
    });
    if let Some(s) = sessions.clone() {
        keys.on_revoke(move |k| {
            let n = s.drop_owner(k);
            if n > 0 {
                tracing::info!("dropped {n} hipobj-rc-v2 session(s) of a revoked key");
            }
        });
    }
    sessions
}

/// The RDMA device, when `config.rdma.enabled`, from `provider`.
fn open_rdma(config: &Config, provider: Option<VerbsProvider>) -> Result<Option<Arc<Rdma>>, Error> {
    match (config.rdma.enabled, provider) {
        (true, Some(p)) => Ok(Some(Arc::new(Rdma::open(&p, &config.rdma)?))),
        (true, None) => Err(Error::Rdma(
            "RDMA is enabled but no verbs backend was given".into(),
        )),
        (false, _) => Ok(None),
    }
}

/// The data directory whose disk the metrics report, for a file store.
fn data_dir(config: &Config) -> Option<std::path::PathBuf> {
    match &config.storage {
        crate::config::StorageConfig::Fs { data_dir } => Some(data_dir.clone()),
        crate::config::StorageConfig::S3(_) => None,
    }
}

/// The metrics' own listener, when `metrics_listen` names one, and its
/// address.
async fn bind_metrics(at: Option<SocketAddr>) -> Result<(Option<TcpListener>, Option<SocketAddr>), Error> {
    let Some(a) = at else {
        return Ok((None, None));
    };
    let l = crate::metrics_http::bind(a).await?;
    let addr = l
        .local_addr()
        .map_err(|e| Error::Io("reading the metrics address".into(), e))?;
    Ok((Some(l), Some(addr)))
}

/// Where the metrics are served, for the start line.
fn metrics_place(addr: SocketAddr, own: Option<SocketAddr>, on_main: bool) -> String {
    match (own, on_main) {
        (Some(a), _) => format!("{a}/metrics"),
        (None, true) => format!("{addr}/.hipobj/metrics"),
        (None, false) => "off".to_owned(),
    }
}

/// The server's periodic tasks, each ending when `stopped` turns true: the
/// certificate and credentials file watchers, the metrics log line, and the
/// reaper of expired rc-v2 sessions, each where configured.
fn spawn_watchers(
    config: &Config,
    certs: Option<&Arc<crate::front::tls::Certs>>,
    metrics: &Arc<Metrics>,
    sessions: Option<&Arc<hipobj_target::rc_v2::V2Sessions>>,
    keys: &Arc<crate::keys::Keys>,
    stopped: &watch::Receiver<bool>,
) {
    if let Some(c) = certs
        && config.tls.reload_check_secs > 0
    {
        tokio::spawn(crate::front::tls::watch(
            c.clone(),
            Duration::from_secs(config.tls.reload_check_secs),
            stopped.clone(),
        ));
    }
    if config.metrics_log_secs > 0 {
        tokio::spawn(log_metrics(
            metrics.clone(),
            Duration::from_secs(config.metrics_log_secs),
            stopped.clone(),
        ));
    }
    if let Some(s) = sessions {
        tokio::spawn(reap_v2(s.clone(), stopped.clone()));
    }
    if keys.file().is_some() && config.credentials_check_secs > 0 {
        tokio::spawn(crate::keys::watch(
            keys.clone(),
            Duration::from_secs(config.credentials_check_secs),
            stopped.clone(),
        ));
    }
}

async fn reap_v2(sessions: Arc<hipobj_target::rc_v2::V2Sessions>, mut stopped: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            () = stop_requested(&mut stopped) => break,
            _ = tick.tick() => {
                let s = sessions.clone();
                let n = tokio::task::spawn_blocking(move || s.reap(std::time::Instant::now())).await.unwrap_or(0);
                if n > 0 {
                    tracing::info!("dropped {n} hipobj-rc-v2 session(s) whose READY did not come in time");
                }
            }
        }
    }
}

async fn log_metrics(metrics: Arc<Metrics>, every: Duration, mut stopped: watch::Receiver<bool>) {
    let mut last = String::new();
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tokio::select! {
            () = stop_requested(&mut stopped) => break,
            _ = tick.tick() => {
                let now = metrics.summary();
                if now != last {
                    tracing::info!("metrics: {now}");
                    last = now;
                }
            }
        }
    }
    tracing::info!("metrics at exit: {}", metrics.summary());
}
