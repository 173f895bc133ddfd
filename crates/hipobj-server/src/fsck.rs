//! `hipobj-server fsck` and `hipobj-server scrub` (the binary's offline
//! commands over a data directory; `hipobj_store::fs::fsck` does the work).

use std::path::PathBuf;
use std::process::ExitCode;

use hipobj_store::fs::format::Marker;
use hipobj_store::fs::{FsckOptions, FsckReport, fsck};

/// What `fsck` and `scrub` take.
#[derive(clap::Args, Debug)]
pub(crate) struct FsckArgs {
    /// Data directory (else the configuration's).
    #[arg(short, long)]
    pub data_dir: Option<PathBuf>,
    /// Write BUCKET's owner record naming access key KEY (BUCKET=KEY):
    /// for a bucket whose record is missing or damaged. Repeatable.
    #[arg(long, value_name = "BUCKET=KEY", value_parser = pair('='))]
    pub assign_owner: Vec<(String, String)>,
    /// Write a bucket setting (BUCKET:SETTING=VALUE; SETTING is versioning,
    /// encryption, acl or public-access; VALUE `none` removes it).
    /// Repeatable.
    #[arg(long = "set", value_name = "BUCKET:SETTING=VALUE", value_parser = setting)]
    pub set: Vec<(String, String, String)>,
}

fn pair(sep: char) -> impl Fn(&str) -> Result<(String, String), String> + Clone {
    move |s: &str| {
        s.split_once(sep)
            .filter(|(a, b)| !a.is_empty() && !b.is_empty())
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .ok_or_else(|| format!("expected A{sep}B, got {s:?}"))
    }
}

fn setting(s: &str) -> Result<(String, String, String), String> {
    let (bucket, rest) = pair(':')(s)?;
    let (name, value) = pair('=')(&rest)?;
    Ok((bucket, name, value))
}

/// Runs the walk; exit 0 when nothing is wrong, 1 when something is, 2
/// when the walk itself failed.
pub(crate) fn run(data_dir: PathBuf, owner_records: bool, args: FsckArgs, scrub: bool) -> ExitCode {
    let opts = FsckOptions {
        owner_records,
        scrub,
        assign_owner: args.assign_owner,
        set: args.set,
        durability: None,
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hipobj-server: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(fsck(&data_dir, &opts)) {
        Ok(r) => report(&r, scrub),
        Err(e) => {
            eprintln!("hipobj-server: {}: {e}", data_dir.display());
            ExitCode::from(2)
        }
    }
}

fn report(r: &FsckReport, scrub: bool) -> ExitCode {
    match r.format {
        Marker::Format(n) => println!("data directory format {n}"),
        Marker::Missing => println!(
            "data directory format: no marker (a directory of a release before markers, read as format 1; the server marks it when it next starts)"
        ),
    }
    for line in &r.repaired {
        println!("repaired: {line}");
    }
    for f in &r.findings {
        match &f.item {
            Some(item) => println!("{}: {item:?}: {}", f.bucket, f.problem),
            None => println!("{}: {}", f.bucket, f.problem),
        }
    }
    let checked = if scrub {
        format!(", {} bytes checked", r.bytes_checked)
    } else {
        String::new()
    };
    println!(
        "{} buckets, {} files ({} without block checksums){checked}: {} problems",
        r.buckets,
        r.files,
        r.unchecked_files,
        r.findings.len()
    );
    if r.findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
