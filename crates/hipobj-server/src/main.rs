//! The `hipobj-server` command: flags over a TOML file (docs/server.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use hipobj_server::config::{AccessKey, StorageConfig};
use hipobj_server::{Config, Server};

mod fsck;
mod notify;

/// An S3 server that also serves hipObject's RDMA transfers.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// TOML configuration file; flags override it.
    #[arg(short, long, env = "HIPOBJ_SERVER_CONFIG")]
    config: Option<PathBuf>,
    /// Address to listen on (e.g. 127.0.0.1:9000).
    #[arg(short, long)]
    address: Option<SocketAddr>,
    /// Data directory of the filesystem store.
    #[arg(short, long)]
    data_dir: Option<PathBuf>,
    /// Access key that may sign requests (with --secret-key).
    #[arg(long, env = "HIPOBJ_ACCESS_KEY", requires = "secret_key")]
    access_key: Option<String>,
    /// Its secret key.
    #[arg(long, env = "HIPOBJ_SECRET_KEY", hide_env_values = true)]
    secret_key: Option<String>,
    /// Serve unsigned requests.
    #[arg(long)]
    anonymous: bool,
    /// Serve RDMA on this NIC (e.g. mlx5_0, rxe0, or softroce0 for the soft
    /// RoCE NIC, which also selects the soft backend).
    #[arg(long)]
    rdma_device: Option<String>,
    /// How the RDMA device is opened: ibverbs (real NICs, rxe) or softroce.
    #[arg(long, value_parser = ["ibverbs", "softroce"])]
    rdma_backend: Option<String>,
    /// Serve RDMA on the NIC that selection picks.
    #[arg(long)]
    rdma: bool,
    /// Largest RDMA transfer, in bytes.
    #[arg(long)]
    max_transfer: Option<u64>,
    /// Largest object or part, in bytes.
    #[arg(long)]
    max_object_size: Option<u64>,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// A file of [[credentials]] tables, reloaded on SIGHUP and when it
    /// changes (docs/server.md, "Credentials file").
    #[arg(long)]
    credentials_file: Option<PathBuf>,
    /// On SIGTERM/SIGINT, keep accepting this many seconds while
    /// /.hipobj/ready answers 503, then close the listener.
    #[arg(long)]
    drain_delay_secs: Option<u64>,
    /// Print the effective configuration as TOML (secrets redacted) and exit.
    #[arg(long)]
    print_config: bool,
    /// Log lines as text or JSON (config `log_format`).
    #[arg(long)]
    log_format: Option<hipobj_server::logging::LogFormat>,
    /// An offline command instead of serving.
    #[command(subcommand)]
    command: Option<Offline>,
}

/// Commands over a data directory, run with the server stopped.
#[derive(clap::Subcommand, Debug)]
enum Offline {
    /// Report what the server would refuse or skip (owner records, bucket
    /// settings, object files that do not read back) and repair what is
    /// named; exit 1 when a problem remains.
    Fsck {
        #[command(flatten)]
        args: fsck::FsckArgs,
        /// Also check every stored byte against its block checksum.
        #[arg(long)]
        scrub: bool,
    },
    /// Check every stored byte of every object and part against its block
    /// checksums, and name each one that disagrees; exit 1 if any does.
    Scrub {
        /// Data directory (else the configuration's).
        #[arg(short, long)]
        data_dir: Option<PathBuf>,
    },
}

impl std::fmt::Debug for Args {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Args")
            .field("config", &self.config)
            .field("address", &self.address)
            .field("data_dir", &self.data_dir)
            .field("access_key", &self.access_key)
            .field("secret_key", &self.secret_key.as_ref().map(|_| "<redacted>"))
            .field("anonymous", &self.anonymous)
            .field("rdma_device", &self.rdma_device)
            .field("rdma_backend", &self.rdma_backend)
            .field("rdma", &self.rdma)
            .field("max_transfer", &self.max_transfer)
            .field("max_object_size", &self.max_object_size)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .field("credentials_file", &self.credentials_file)
            .field("drain_delay_secs", &self.drain_delay_secs)
            .field("print_config", &self.print_config)
            .field("log_format", &self.log_format)
            .field("command", &self.command)
            .finish()
    }
}

fn config(args: &Args) -> Result<Config, hipobj_server::Error> {
    let c = unchecked_config(args)?;
    c.validate()?;
    Ok(c)
}

/// The configuration the file and flags give, not yet checked for serving
/// (the offline commands need only its data directory).
fn unchecked_config(args: &Args) -> Result<Config, hipobj_server::Error> {
    let mut c = match &args.config {
        Some(p) => Config::from_file(p)?,
        None => Config::default(),
    };
    if let Some(a) = args.address {
        c.address = a;
    }
    if let Some(d) = &args.data_dir {
        c.storage = StorageConfig::Fs { data_dir: d.clone() };
    }
    if let (Some(a), Some(s)) = (&args.access_key, &args.secret_key) {
        c.credentials.push(AccessKey {
            access_key: a.clone(),
            secret_key: s.clone(),
        });
    }
    if args.anonymous {
        c.anonymous = true;
    }
    if let Some(f) = &args.credentials_file {
        c.credentials_file = Some(f.clone());
    }
    if let Some(n) = args.drain_delay_secs {
        c.drain_delay_secs = n;
    }
    if args.rdma || args.rdma_device.is_some() {
        c.rdma.enabled = true;
    }
    if let Some(d) = &args.rdma_device {
        c.rdma.device = Some(d.clone());
        let soft_name = std::env::var("HIPOBJ_SOFTROCE_NAME")
            .unwrap_or_else(|_| hipobj_system::SOFTROCE_DEFAULT_NAME.into());
        if *d == soft_name {
            c.rdma.backend = hipobj_server::config::VerbsBackend::Softroce;
        }
    }
    match args.rdma_backend.as_deref() {
        Some("softroce") => c.rdma.backend = hipobj_server::config::VerbsBackend::Softroce,
        Some("ibverbs") => c.rdma.backend = hipobj_server::config::VerbsBackend::Ibverbs,
        _ => {}
    }
    if let Some(n) = args.max_transfer {
        c.rdma.max_transfer = n;
    }
    if let Some(n) = args.max_object_size {
        c.limits.max_object_size = n;
    }
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        c.tls.cert = Some(cert.clone());
        c.tls.key = Some(key.clone());
    }
    if let Some(f) = args.log_format {
        c.log_format = f;
    }
    Ok(c)
}

/// Sends log lines to stderr (colour only on a terminal) in `format`, and
/// the access log to `access` when set.
fn init_logging(
    format: hipobj_server::logging::LogFormat,
    access: Option<std::sync::Arc<hipobj_server::logging::AccessFile>>,
) {
    use std::io::IsTerminal;
    let spec = std::env::var("HIPOBJ_LOG").ok();
    let opts = hipobj_server::logging::Options {
        spec: spec.as_deref(),
        format,
        ansi: std::io::stderr().is_terminal(),
        access,
    };
    let subscriber = hipobj_server::logging::build(&opts, std::io::stderr);
    if let Err(e) = tracing::subscriber::set_global_default(subscriber) {
        eprintln!("hipobj-server: no log output: {e}");
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.command.is_some() {
        init_logging(args.log_format.unwrap_or_default(), None);
        return match unchecked_config(&args) {
            Ok(c) => args.command.map_or(ExitCode::SUCCESS, |cmd| offline(&c, cmd)),
            Err(e) => {
                eprintln!("hipobj-server: {e}");
                ExitCode::from(2)
            }
        };
    }
    let config = match config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("hipobj-server: {e}");
            return ExitCode::from(2);
        }
    };
    if args.print_config {
        return match hipobj_server::config_text::to_toml(&config) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("hipobj-server: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let access = match config
        .access_log
        .as_deref()
        .map(hipobj_server::logging::AccessFile::open)
    {
        Some(Ok(f)) => Some(f),
        Some(Err(e)) => {
            eprintln!("hipobj-server: {e}");
            return ExitCode::from(2);
        }
        None => None,
    };
    init_logging(config.log_format, access.clone());

    let mut builder = tokio::runtime::Builder::new_multi_thread();
    let rt = match hipobj_server::cpu::name_threads(&mut builder)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hipobj-server: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async {
        let handle = match Server::start(config).await {
            Ok(h) => h,
            Err(e) => {
                eprintln!("hipobj-server: {e}");
                return ExitCode::FAILURE;
            }
        };
        // SIGHUP reloads (and reopens the access log), SIGTERM and SIGINT
        // drain (hipobj_server::drain); installed before the line below, so
        // no signal finds them missing.
        let signals = match hipobj_server::drain::Signals::install(access) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("hipobj-server: cannot watch signals: {e}");
                return ExitCode::FAILURE;
            }
        };
        // Scripts read the address from this line.
        println!("listening on {}", handle.addr());
        notify::ready();
        signals.serve(handle, notify::stopping).await;
        ExitCode::SUCCESS
    })
}

/// Runs an offline command on the configuration's data directory (or the
/// one the command names).
fn offline(config: &Config, cmd: Offline) -> ExitCode {
    let configured = match &config.storage {
        StorageConfig::Fs { data_dir } => Some(data_dir.clone()),
        StorageConfig::S3(_) => None,
    };
    let (args, scrub) = match cmd {
        Offline::Fsck { args, scrub } => (args, scrub),
        Offline::Scrub { data_dir } => (
            fsck::FsckArgs {
                data_dir,
                assign_owner: Vec::new(),
                set: Vec::new(),
            },
            true,
        ),
    };
    let Some(dir) = args.data_dir.clone().or(configured) else {
        eprintln!(
            "hipobj-server: the store is an S3 back end: fsck and scrub check a data directory (--data-dir)"
        );
        return ExitCode::from(2);
    };
    fsck::run(dir, config.access.bucket_owners, args, scrub)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The command line's Debug output (what a `{args:?}` in a log or a
    /// panic message would print) never holds the secret key.
    #[test]
    fn the_secret_key_is_redacted_from_debug_output() {
        let args = Args::try_parse_from([
            "hipobj-server",
            "--access-key",
            "AKID",
            "--secret-key",
            "very-secret-value",
        ])
        .expect("the arguments parse");
        let text = format!("{args:?}");
        assert!(text.contains("AKID"), "{text}");
        assert!(!text.contains("very-secret-value"), "{text}");
        let config = config(&args).expect("a configuration");
        assert!(!format!("{config:?}").contains("very-secret-value"));
    }
}
