//! Project chores that cargo alone does not do.
//!
//! `cargo xtask install --prefix DIR [--destdir DIR] [--debug]` builds the C
//! library and installs it the way a distribution package would:
//!
//! ```text
//! PREFIX/lib/libhipobj.so.0.1.0, libhipobj.so.0 -> it, libhipobj.so -> libhipobj.so.0
//! PREFIX/lib/libhipobj.a
//! PREFIX/lib/pkgconfig/hipobj.pc
//! PREFIX/lib/cmake/hipobj/hipobj-config.cmake, hipobj-config-version.cmake
//! PREFIX/include/hipobj.h
//! PREFIX/bin/hipobj, PREFIX/bin/hipobj-server
//! ```
//!
//! It does what `cargo cinstall` would, without needing cargo-c (a seven
//! minute build on these machines) in CI.
//!
//! The release install builds the three crates alone. `--debug` is for the
//! test suite: it builds the workspace the way `cargo test --workspace
//! --all-targets` does, so that it reuses that build instead of compiling
//! the dependencies again with the features of these three crates alone.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const USAGE: &str = "usage: cargo xtask install --prefix DIR [--destdir DIR] [--libdir DIR] [--debug]";

struct Install {
    prefix: PathBuf,
    destdir: Option<PathBuf>,
    libdir: Option<PathBuf>,
    debug: bool,
}

fn parse(args: &[String]) -> Result<Install, String> {
    let mut it = args.iter();
    let mut out = Install {
        prefix: PathBuf::new(),
        destdir: None,
        libdir: None,
        debug: false,
    };
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--prefix" => out.prefix = PathBuf::from(value("--prefix")?),
            "--destdir" => out.destdir = Some(PathBuf::from(value("--destdir")?)),
            "--libdir" => out.libdir = Some(PathBuf::from(value("--libdir")?)),
            "--debug" => out.debug = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if out.prefix.as_os_str().is_empty() || !out.prefix.is_absolute() {
        return Err("--prefix must be an absolute path".into());
    }
    Ok(out)
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed: {status}"))
    }
}

fn version() -> (String, String) {
    let full = env!("CARGO_PKG_VERSION").to_owned();
    let major = env!("CARGO_PKG_VERSION_MAJOR").to_owned();
    (full, major)
}

/// Writes the CMake package (`find_package(hipobj CONFIG)`, target
/// `hipobj::hipobj`) from the templates in packaging/cmake into `dir`.
fn write_cmake_package(root: &Path, dir: &Path, libdir: &Path, includedir: &Path) -> Result<(), String> {
    let (full, major) = version();
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for name in ["hipobj-config.cmake", "hipobj-config-version.cmake"] {
        let template = root.join("packaging/cmake").join(format!("{name}.in"));
        let text = std::fs::read_to_string(&template)
            .map_err(|e| format!("cannot read {}: {e}", template.display()))?
            .replace("@VERSION@", &full)
            .replace("@MAJOR@", &major)
            .replace("@MINOR@", env!("CARGO_PKG_VERSION_MINOR"))
            .replace("@REAL@", &format!("libhipobj.so.{full}"))
            .replace("@SONAME@", &format!("libhipobj.so.{major}"))
            .replace("@LIBDIR@", &libdir.display().to_string())
            .replace("@INCLUDEDIR@", &includedir.display().to_string());
        std::fs::write(dir.join(name), text).map_err(|e| format!("cannot write {name}: {e}"))?;
    }
    Ok(())
}

fn under(destdir: Option<&Path>, path: &Path) -> PathBuf {
    match destdir {
        Some(d) => d.join(path.strip_prefix("/").unwrap_or(path)),
        None => path.to_path_buf(),
    }
}

fn install(opts: &Install) -> Result<(), String> {
    let root = workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(&cargo);
    build.current_dir(&root).arg("build");
    if opts.debug {
        build.args(["--workspace", "--all-targets"]);
    } else {
        build.args([
            "--release",
            "-p",
            "hipobj-capi",
            "-p",
            "hipobj-cli",
            "-p",
            "hipobj-server",
        ]);
    }
    run(&mut build)?;
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let built = target.join(if opts.debug { "debug" } else { "release" });

    let (full, major) = version();
    let libdir_path = opts.libdir.clone().unwrap_or_else(|| opts.prefix.join("lib"));
    let includedir_path = opts.prefix.join("include");
    let libdir = under(opts.destdir.as_deref(), &libdir_path);
    let includedir = under(opts.destdir.as_deref(), &includedir_path);
    let pcdir = libdir.join("pkgconfig");
    let bindir = under(opts.destdir.as_deref(), &opts.prefix.join("bin"));
    for d in [&libdir, &includedir, &pcdir, &bindir] {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    let copy = |from: PathBuf, to: PathBuf| {
        std::fs::copy(&from, &to)
            .map(|_| ())
            .map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))
    };
    let real = format!("libhipobj.so.{full}");
    let soname = format!("libhipobj.so.{major}");
    copy(built.join("libhipobj_capi.so"), libdir.join(&real))?;
    copy(built.join("libhipobj_capi.a"), libdir.join("libhipobj.a"))?;
    for (link, to) in [
        (soname.as_str(), real.as_str()),
        ("libhipobj.so", soname.as_str()),
    ] {
        let path = libdir.join(link);
        let _ = std::fs::remove_file(&path);
        std::os::unix::fs::symlink(to, &path).map_err(|e| format!("cannot link {}: {e}", path.display()))?;
    }
    copy(root.join("include/hipobj.h"), includedir.join("hipobj.h"))?;
    for bin in ["hipobj", "hipobj-server"] {
        copy(built.join(bin), bindir.join(bin))?;
    }
    let pc = format!(
        "prefix={prefix}\n\
         libdir={libdir}\n\
         includedir={includedir}\n\
         \n\
         Name: hipobj\n\
         Description: GPU-direct S3 over RDMA (hipObject)\n\
         Version: {full}\n\
         Libs: -L${{libdir}} -lhipobj\n\
         Libs.private: -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc\n\
         Cflags: -I${{includedir}}\n",
        prefix = opts.prefix.display(),
        libdir = libdir_path.display(),
        includedir = includedir_path.display(),
    );
    std::fs::write(pcdir.join("hipobj.pc"), pc).map_err(|e| format!("cannot write hipobj.pc: {e}"))?;
    write_cmake_package(
        &root,
        &libdir.join("cmake/hipobj"),
        &libdir_path,
        &includedir_path,
    )?;
    println!(
        "installed hipobj {full} under {}",
        under(opts.destdir.as_deref(), &opts.prefix).display()
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.split_first() {
        Some((cmd, rest)) if cmd == "install" => parse(rest).and_then(|o| install(&o)),
        _ => Err(USAGE.into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}
