//! The server's configuration: a TOML file, with command-line flags on top
//! (see `main.rs` and docs/server.md for every key).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use hipobj_store::remote::RemoteConfig;

/// Everything the server needs to start.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where the HTTP listener binds. Port 0 picks a free port.
    pub address: SocketAddr,
    /// Access keys that may sign requests (SigV4).
    pub credentials: Vec<AccessKey>,
    /// How owners are named, by access key.
    pub accounts: Vec<Account>,
    /// Serve unsigned requests too (off unless configured).
    pub anonymous: bool,
    /// Serve the unsigned requests that buckets' and objects' canned ACLs
    /// allow (`public-read`, `public-read-write`; fs store), and no others
    /// (off unless configured). Never RDMA.
    pub public_access: bool,
    /// Who may use which bucket.
    pub access: AccessConfig,
    /// Where objects live.
    pub storage: StorageConfig,
    /// Size limits of the S3 side.
    pub limits: Limits,
    /// Connection limits and timeouts of the HTTP side.
    pub http: HttpConfig,
    /// The RDMA side (docs/protocol.md §4).
    pub rdma: RdmaConfig,
    /// TLS on the listener (off unless a certificate and key are set).
    pub tls: TlsConfig,
    /// Encryption at rest (fs store: SSE-S3 and SSE-C).
    pub encryption: EncryptionConfig,
    /// How long shutdown waits for requests in flight, in seconds.
    pub shutdown_grace_secs: u64,
    /// On SIGTERM or SIGINT, how long the listener keeps accepting while
    /// `/.hipobj/ready` answers 503, in seconds, before it closes.
    pub drain_delay_secs: u64,
    /// A file of `[[credentials]]` tables, read at start, on SIGHUP and
    /// when it changes (`crate::keys`); its keys sign with those above.
    pub credentials_file: Option<PathBuf>,
    /// Look at the credentials file this often, in seconds (0: SIGHUP
    /// only).
    pub credentials_check_secs: u64,
    /// Log the transfer counters this often, in seconds (0: never).
    pub metrics_log_secs: u64,
    /// Serve `GET /.hipobj/metrics` (Prometheus text). The health paths
    /// (`crate::health`) are served either way.
    pub metrics_endpoint: bool,
    /// The region the filesystem store's buckets are in: what
    /// GetBucketLocation answers and the one LocationConstraint that
    /// CreateBucket accepts.
    pub region: String,
    /// Log lines as `text` or `json` (flag `--log-format`).
    pub log_format: crate::logging::LogFormat,
    /// Write the access log (a line per request) to this file, appended,
    /// instead of the server's log; reopened on SIGHUP.
    pub access_log: Option<PathBuf>,
    /// Serve the metrics on this address of their own (`GET /metrics`);
    /// the S3 port's `/.hipobj/metrics` is then off.
    pub metrics_listen: Option<SocketAddr>,
    /// Only requests with `Authorization: Bearer <token>` may read the
    /// metrics (wherever they are served).
    pub metrics_token: Option<crate::config_text::Secret>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            address: SocketAddr::from(([127, 0, 0, 1], 9000)),
            credentials: Vec::new(),
            accounts: Vec::new(),
            anonymous: false,
            public_access: false,
            access: AccessConfig::default(),
            storage: StorageConfig::default(),
            limits: Limits::default(),
            http: HttpConfig::default(),
            rdma: RdmaConfig::default(),
            tls: TlsConfig::default(),
            encryption: EncryptionConfig::default(),
            shutdown_grace_secs: 30,
            drain_delay_secs: 0,
            credentials_file: None,
            credentials_check_secs: 1,
            metrics_log_secs: 60,
            metrics_endpoint: true,
            region: default_region(),
            log_format: crate::logging::LogFormat::default(),
            access_log: None,
            metrics_listen: None,
            metrics_token: None,
        }
    }
}

/// One access key and its secret.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessKey {
    /// The access key id.
    pub access_key: String,
    /// The secret key.
    pub secret_key: String,
}

/// How ACLs and listings name the account of an access key (without an
/// entry: the access key is both its id and its display name).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Account {
    /// The access key.
    pub access_key: String,
    /// The account's canonical user id.
    pub user_id: String,
    /// The account's display name (default: its user id).
    #[serde(default)]
    pub display_name: Option<String>,
}

impl std::fmt::Debug for AccessKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessKey")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .finish()
    }
}

/// Who may use which bucket (docs/server.md, "Access").
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccessConfig {
    /// Buckets belong to the key that created them; other keys are refused
    /// unless `share` lists them (fs store).
    pub bucket_owners: bool,
    /// Buckets shared with keys other than their owner.
    pub share: Vec<Share>,
}

impl Default for AccessConfig {
    fn default() -> Self {
        Self {
            bucket_owners: true,
            share: Vec::new(),
        }
    }
}

/// One bucket and the other keys that may use it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Share {
    /// The bucket.
    pub bucket: String,
    /// Access keys that may use it besides its owner.
    pub keys: Vec<String>,
}

/// The storage back end.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum StorageConfig {
    /// The embedded filesystem store.
    Fs {
        /// The data directory (created if missing).
        data_dir: PathBuf,
    },
    /// Another S3 service.
    S3(RemoteConfig),
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self::Fs {
            data_dir: PathBuf::from("hipobj-data"),
        }
    }
}

fn default_region() -> String {
    "us-east-1".into()
}

/// Encryption at rest (docs/server.md, "Encryption at rest").
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EncryptionConfig {
    /// The SSE-S3 master key (32 bytes, or 64 hex digits), created if
    /// missing; by default `.keys/sse-s3.key` in the data directory.
    pub sse_s3_key_file: Option<PathBuf>,
    /// Accept SSE-C keys on plain-HTTP connections (as AWS, they are
    /// refused unless the connection is TLS: anyone on the path would read
    /// the key). For test rigs that have no TLS.
    pub sse_c_over_http: bool,
}

/// Size limits of the S3 side.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest PutObject or UploadPart, in bytes (HTTP or RDMA).
    pub max_object_size: u64,
    /// Smallest part but the last in a multipart upload.
    pub min_part_size: u64,
    /// fsync each object before it becomes visible.
    pub fsync: bool,
    /// Multipart uploads (fs store) initiated longer ago than this, in
    /// seconds, are removed with their parts.
    pub multipart_expiry_secs: u64,
    /// DeleteBucket refuses (409 BucketNotEmpty) while uploads are in
    /// progress, instead of aborting them as AWS does.
    pub refuse_delete_with_uploads: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_object_size: 5 << 30,
            min_part_size: 5 << 20,
            fsync: true,
            multipart_expiry_secs: 7 * 24 * 3600,
            refuse_delete_with_uploads: false,
        }
    }
}

/// Connection limits and timeouts of the HTTP side (docs/server.md,
/// "Connections").
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Most connections open at once; more wait in the listen backlog
    /// until one closes (or an idle one is closed to make room).
    pub max_connections: usize,
    /// Most connections open at once from one client address (the
    /// address's share of `max_connections`). A connection beyond it
    /// closes that address's longest-idle connection, or is refused. The
    /// default serves a client with 256 workers (s5cmd's default) and room
    /// to spare.
    pub max_connections_per_address: usize,
    /// A request head (request line and headers) must arrive within this
    /// many seconds of its first byte.
    pub header_read_timeout_secs: u64,
    /// A connection with no request in flight and no bytes moving for
    /// this many seconds is closed (also a response the client stopped
    /// reading).
    pub idle_timeout_secs: u64,
    /// TCP keep-alive probes start after this many idle seconds (0: off).
    pub tcp_keepalive_secs: u64,
    /// A request body must arrive at this many bytes per second at least,
    /// measured over `body_rate_window_secs` of waiting for it; slower, the
    /// connection is cut and the partial object discarded (0: off).
    pub body_min_rate: u64,
    /// The window of `body_min_rate`, in seconds.
    pub body_rate_window_secs: u64,
    /// Most body bytes read of a request that carries no signature (no
    /// `Authorization`, no presigned query, and for a POST form none of
    /// the form's signature fields in these first bytes) while anonymous
    /// access is off.
    pub unauthenticated_body_limit: u64,
    /// Most bytes of one request body sent chunked without a length
    /// (`crate::front::unsized_body`), which the server holds in memory; a longer
    /// one is `411 MissingContentLength`.
    pub unsized_body_limit: u64,
    /// Most bytes of such bodies held at once, all requests together; past
    /// it a request is `503 SlowDown`.
    pub unsized_body_budget: u64,
    /// Load balancers whose connections begin with a PROXY protocol header
    /// (v2 or v1) naming the client: addresses or CIDR prefixes. Their
    /// connections count, log and bind RDMA as the client they name; every
    /// other address is never read for one. Empty: off.
    pub proxy_protocol_from: Vec<String>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            max_connections: 4096,
            max_connections_per_address: 512,
            header_read_timeout_secs: 30,
            idle_timeout_secs: 120,
            tcp_keepalive_secs: 60,
            body_min_rate: 1024,
            body_rate_window_secs: 20,
            unauthenticated_body_limit: 64 << 10,
            unsized_body_limit: 64 << 20,
            unsized_body_budget: 512 << 20,
            proxy_protocol_from: Vec::new(),
        }
    }
}

/// Which verbs implementation opens the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerbsBackend {
    /// libibverbs, loaded at run time: real NICs and the kernel's rxe.
    #[default]
    Ibverbs,
    /// The project's soft RoCE NIC over loopback UDP (device `softroce0`).
    Softroce,
}

/// The RDMA side.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RdmaConfig {
    /// Serve `x-amz-rdma-token` requests; when off they get `501`.
    pub enabled: bool,
    /// The NIC to use (e.g. `mlx5_0`, `rxe0`); none: selection picks one.
    pub device: Option<String>,
    /// How the device is opened.
    pub backend: VerbsBackend,
    /// Largest transfer one token may ask for, in bytes.
    pub max_transfer: u64,
    /// Largest GET one token may ask for, in bytes (within `max_transfer`):
    /// a GET's bytes are read whole into a staging buffer and go to the
    /// client as one RDMA WRITE (docs/protocol.md §2).
    pub max_get: u64,
    /// GET staging buffers at once: a GET larger than `chunk_size` waits
    /// for one. GET memory is at most `get_staging_buffers × max_get`.
    pub get_staging_buffers: usize,
    /// The rules token requests are held to: `hipobj` (this server's), or
    /// `ceph-rgw`, a test mode that reproduces the Ceph RGW fork's (`413`
    /// over `max_transfer`, every `x-amz-rdma-*` header signed or `403`).
    pub rules: crate::rdma::RdmaRules,
    /// Most client QPs bound at once.
    pub max_bindings: usize,
    /// Transfers running at once; more wait their turn.
    pub max_concurrent: usize,
    /// A binding unused this long is dropped, in seconds.
    pub idle_timeout_secs: u64,
    /// How long one RDMA work request may take, in seconds.
    pub completion_timeout_secs: u64,
    /// Bytes per RDMA work request (the bounce buffer size).
    pub chunk_size: usize,
    /// Bounce buffers per transfer, so RDMA work requests in flight at
    /// once (1 to 32): the store reads or takes one chunk while the others
    /// are on the wire. Bounce memory is at most `max_concurrent ×
    /// pipeline_depth × chunk_size` whatever the objects' sizes.
    pub pipeline_depth: usize,
    /// Refuse a token whose IPv4-mapped GID is not the address the request
    /// came from (or, from loopback, not an address of this host). Turn it
    /// off only when clients reach the server through NAT.
    pub check_peer_address: bool,
    /// hipobj-rc-v2: sessions open at once, all keys together (503
    /// beyond).
    pub v2_max_sessions: usize,
    /// hipobj-rc-v2: sessions one access key may hold open (503 beyond).
    pub v2_max_sessions_per_key: usize,
    /// hipobj-rc-v2: staging bytes all sessions may hold at once (503
    /// beyond).
    pub v2_memory_budget: usize,
    /// hipobj-rc-v2: staging bytes one access key's sessions may hold
    /// (503 beyond).
    pub v2_memory_per_key: usize,
    /// hipobj-rc-v2: the largest staging buffer, in bytes: the largest PUT
    /// (413 above) and a GET's chunk.
    pub v2_staging_max: usize,
    /// hipobj-rc-v2: how long a prepared session waits for READY, in ms.
    pub v2_prepare_timeout_ms: u64,
    /// hipobj-rc-v2: how long READY waits for the transfer, in ms (408).
    pub v2_transfer_timeout_ms: u64,
}

impl Default for RdmaConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            device: None,
            backend: VerbsBackend::Ibverbs,
            max_transfer: 1 << 30,
            max_get: 64 << 20,
            get_staging_buffers: 8,
            rules: crate::rdma::RdmaRules::Hipobj,
            max_bindings: 1024,
            max_concurrent: 64,
            idle_timeout_secs: 120,
            completion_timeout_secs: 10,
            chunk_size: 1 << 20,
            pipeline_depth: 4,
            check_peer_address: true,
            v2_max_sessions: 64,
            v2_max_sessions_per_key: 16,
            v2_memory_budget: 1 << 30,
            v2_memory_per_key: 256 << 20,
            v2_staging_max: 64 << 20,
            v2_prepare_timeout_ms: 10_000,
            v2_transfer_timeout_ms: 30_000,
        }
    }
}

impl RdmaConfig {
    /// The hipobj-rc-v2 sessions' settings.
    pub fn v2_config(&self) -> hipobj_target::rc_v2::V2Config {
        hipobj_target::rc_v2::V2Config {
            max_sessions: self.v2_max_sessions.max(1),
            max_sessions_per_key: self.v2_max_sessions_per_key.max(1),
            memory_budget: self.v2_memory_budget,
            memory_per_key: self.v2_memory_per_key,
            staging_max: self.v2_staging_max.max(4096),
            prepare_timeout: Duration::from_millis(self.v2_prepare_timeout_ms.max(1)),
            transfer_timeout: Duration::from_millis(self.v2_transfer_timeout_ms.max(1)),
        }
    }

    /// The limits of the binding protocol's target.
    pub fn target_config(&self) -> hipobj_target::TargetConfig {
        hipobj_target::TargetConfig {
            idle_timeout: Duration::from_secs(self.idle_timeout_secs),
            max_bindings: self.max_bindings.max(1),
            max_transfer: self.max_transfer,
            max_get: self.max_get,
            staging_buffers: self.get_staging_buffers.max(1),
            chunk: self.chunk_size.max(4096),
            pipeline_depth: self.pipeline_depth.clamp(1, hipobj_target::MAX_PIPELINE_DEPTH),
            pooled_buffers: self.max_concurrent.max(1)
                * self.pipeline_depth.clamp(1, hipobj_target::MAX_PIPELINE_DEPTH),
            completion_timeout: Duration::from_secs(self.completion_timeout_secs.max(1)),
            max_concurrent: self.max_concurrent.max(1),
            check_peer_address: self.check_peer_address,
        }
    }
}

/// TLS on the listener (docs/server.md, "TLS").
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain, the server's certificate first (flag
    /// `--tls-cert`). With `key`, the listener serves HTTPS only.
    pub cert: Option<PathBuf>,
    /// PEM private key of that certificate (flag `--tls-key`).
    pub key: Option<PathBuf>,
    /// Look at both files this often, in seconds, and serve the new pair to
    /// new connections once they changed (0: only on SIGHUP).
    pub reload_check_secs: u64,
}

impl Default for TlsConfig {
    fn default() -> Self {
        Self {
            cert: None,
            key: None,
            reload_check_secs: 60,
        }
    }
}

impl Config {
    /// Reads a TOML file.
    pub fn from_file(path: &Path) -> Result<Self, crate::Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| crate::Error::Config(format!("{}: {e}", path.display())))?;
        Self::from_toml(&text).map_err(|e| crate::Error::Config(format!("{}: {e}", path.display())))
    }

    /// Parses TOML text.
    pub fn from_toml(text: &str) -> Result<Self, crate::Error> {
        toml::from_str(text).map_err(|e| crate::Error::Config(e.to_string()))
    }

    /// Checks what serde cannot.
    pub fn validate(&self) -> Result<(), crate::Error> {
        let bad = |m: &str| Err(crate::Error::Config(m.to_owned()));
        if self.credentials.is_empty() && self.credentials_file.is_none() && !self.anonymous {
            return bad(
                "no credentials are configured and anonymous access is off: no request could succeed",
            );
        }
        for c in &self.credentials {
            if c.access_key.is_empty() || c.secret_key.is_empty() {
                return bad("an access key or secret key is empty");
            }
        }
        if self.limits.max_object_size == 0 {
            return bad("limits.max_object_size must be above 0");
        }
        // An empty token would be read as no token: the metrics open to all.
        if self
            .metrics_token
            .as_ref()
            .is_some_and(|t| t.expose().trim().is_empty())
        {
            return bad("metrics_token is empty: set a token, or leave the key out for metrics open to all");
        }
        if self.http.max_connections == 0 || self.http.max_connections_per_address == 0 {
            return bad("http.max_connections and http.max_connections_per_address must be above 0");
        }
        if let Err(why) = crate::front::proxy_protocol::Trusted::parse(&self.http.proxy_protocol_from) {
            return bad(&why);
        }
        if self.http.body_min_rate > 0 && self.http.body_rate_window_secs == 0 {
            return bad("http.body_rate_window_secs must be above 0 when http.body_min_rate is");
        }
        if self.http.header_read_timeout_secs == 0 || self.http.idle_timeout_secs == 0 {
            return bad("http.header_read_timeout_secs and http.idle_timeout_secs must be above 0");
        }
        if self.tls.cert.is_some() != self.tls.key.is_some() {
            return bad("tls.cert and tls.key go together: set both or neither");
        }
        if self.rdma.enabled && self.rdma.max_transfer == 0 {
            return bad("rdma.max_transfer must be above 0");
        }
        if !(1..=hipobj_target::MAX_PIPELINE_DEPTH).contains(&self.rdma.pipeline_depth) {
            return Err(crate::Error::Config(format!(
                "rdma.pipeline_depth must be 1 to {}",
                hipobj_target::MAX_PIPELINE_DEPTH
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_file() {
        let c = Config::from_toml(
            r#"
            address = "127.0.0.1:0"
            anonymous = false
            [[credentials]]
            access_key = "ak"
            secret_key = "sk"
            [storage]
            kind = "s3"
            endpoint = "http://127.0.0.1:5000"
            access_key = "a"
            secret_key = "b"
            [limits]
            max_object_size = 1024
            [rdma]
            enabled = true
            device = "rxe0"
            max_transfer = 4096
            "#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.address.port(), 0);
        assert!(matches!(c.storage, StorageConfig::S3(ref r) if r.region == "us-east-1" && r.path_style));
        assert_eq!(c.limits.max_object_size, 1024);
        assert_eq!(c.limits.min_part_size, 5 << 20);
        assert!(c.rdma.enabled);
        assert_eq!(c.rdma.target_config().max_transfer, 4096);
        assert!(c.validate().is_ok());
        assert!(!format!("{:?}", c.credentials).contains("sk\""));
        assert_eq!(c.rdma.target_config().pipeline_depth, 4);
        for (depth, ok) in [(0, false), (1, true), (32, true), (33, false)] {
            let mut d = c.clone();
            d.rdma.pipeline_depth = depth;
            assert_eq!(d.validate().is_ok(), ok, "pipeline_depth {depth}");
        }
    }

    #[test]
    fn rejects_unknown_keys_and_useless_configs() {
        assert!(Config::from_toml("adress = \"127.0.0.1:1\"").is_err());
        assert!(Config::default().validate().is_err());
    }

    /// An empty metrics token would open the metrics to all while the
    /// operator meant to close them.
    #[test]
    fn an_empty_metrics_token_is_refused() {
        let with = |token: &str| {
            Config::from_toml(&format!(
                "metrics_token = {token:?}\n[[credentials]]\naccess_key = \"ak\"\nsecret_key = \"sk\"\n"
            ))
            .unwrap_or_else(|e| panic!("{e}"))
        };
        assert!(with("t0ken").validate().is_ok());
        assert!(with("").validate().is_err());
        assert!(with("  ").validate().is_err());
    }
}
