//! `hipobj bench`.

use crate::error::{CliError, CliResult};

/// Arguments of `hipobj bench`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the benchmark.
pub fn run(_args: &Args) -> CliResult {
    Err(CliError::plain("bench is not built yet"))
}
