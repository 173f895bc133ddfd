//! `hipobj`: RDMA devices, objects through registered memory, benchmarks,
//! and the protocol's header values, at a terminal. See docs/cli.md.

mod bench;
mod cpu;
mod demo;
mod devices;
mod error;
mod progress;
mod s3;
mod token;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use error::{CliError, CliResult};

/// hipObject at the command line: GPU-direct S3 over RDMA.
#[derive(Debug, Parser)]
#[command(name = "hipobj", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List every RDMA device the library sees, and which one init would choose.
    Devices {
        /// The GPU to choose the closest NIC for (-1: the current GPU, or none).
        #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
        gpu: i32,
        /// Devices that may be chosen, comma-separated (nicHint; or HIPOBJ_NIC).
        #[arg(long, env = "HIPOBJ_NIC")]
        nic_hint: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Download an object into FILE (or - for stdout) through a registered buffer.
    Get {
        /// s3://bucket/key
        url: String,
        /// The file to write, or - for stdout. Written whole or not at all.
        file: String,
        /// Only these bytes: A-B, A- or -N (as in HTTP Range).
        #[arg(long)]
        range: Option<String>,
        /// Bytes per ranged GET (a server's smaller limit wins).
        #[arg(long, default_value = "16MiB", value_parser = s3::parse_size)]
        part_size: u64,
        /// Ranged GETs in flight at once, each on its own connection; the
        /// registered buffer holds this many parts.
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
        parallel: u16,
        #[command(flatten)]
        conn: s3::Conn,
    },
    /// Upload FILE (or - for stdin) to an object; multipart when larger than --part-size.
    Put {
        /// The file to read, or - for stdin.
        file: String,
        /// s3://bucket/key
        url: String,
        /// Bytes per part, 5 MiB to 4 GiB (a server's smaller transfer
        /// limit wins).
        #[arg(long, default_value = "16MiB", value_parser = s3::parse_size)]
        part_size: u64,
        /// Parts in flight at once, each on its own connection; the
        /// registered buffer holds this many parts.
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
        parallel: u16,
        #[command(flatten)]
        conn: s3::Conn,
    },
    /// Measure GET and PUT throughput, latency and client CPU, RDMA beside plain HTTP.
    Bench(bench::Args),
    /// Start a server on the soft RoCE NIC, PUT and GET an object through
    /// hipObject, and check every byte: the whole system, no set-up.
    Demo(demo::Args),
    /// Work with x-amz-rdma-token values.
    Token {
        #[command(subcommand)]
        what: TokenCmd,
    },
    /// Work with x-amz-rdma-reply values.
    Reply {
        #[command(subcommand)]
        what: ReplyCmd,
    },
}

#[derive(Debug, Subcommand)]
enum TokenCmd {
    /// Print a token's fields: transport, QPN, GID (and its IPv4), rkey, addr, len, port, LID.
    Decode {
        /// 88 hex digits.
        token: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
enum ReplyCmd {
    /// Say what an x-amz-rdma-reply value means.
    Parse {
        /// The header's value, e.g. 200, 501 or 409:<token>:<psn>.
        value: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn run(cli: Cli) -> CliResult {
    match cli.command {
        Command::Devices { gpu, nic_hint, json } => {
            let p = hipobj_system::platform();
            print!("{}", devices::run(&p, gpu, nic_hint.as_deref(), json)?);
        }
        Command::Token {
            what: TokenCmd::Decode { token, json },
        } => print!("{}", token::decode(&token, json)?),
        Command::Reply {
            what: ReplyCmd::Parse { value, json },
        } => print!("{}", token::parse_reply(&value, json)?),
        Command::Get {
            url,
            file,
            range,
            part_size,
            parallel,
            conn,
        } => {
            let url = s3::S3Url::parse(&url, true)?;
            if part_size == 0 || part_size > s3::MAX_PART {
                return Err(CliError::coded(
                    hipobj::ErrorKind::SizeTooLarge,
                    format!(
                        "--part-size must be 1 byte to 4 GiB, not {}",
                        s3::human(part_size)
                    ),
                ));
            }
            let session = s3::Session::open(&conn)?;
            s3::get(
                &session,
                &url,
                &file,
                range.as_deref(),
                part_size,
                parallel.into(),
            )?;
        }
        Command::Put {
            file,
            url,
            part_size,
            parallel,
            conn,
        } => {
            let url = s3::S3Url::parse(&url, true)?;
            s3::check_part_size(part_size, 0)?;
            let session = s3::Session::open(&conn)?;
            s3::put(&session, &file, &url, part_size, parallel.into())?;
        }
        Command::Bench(args) => bench::run(&args)?,
        Command::Demo(args) => demo::run(&args)?,
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hipobj: error: {e}");
            ExitCode::FAILURE
        }
    }
}
