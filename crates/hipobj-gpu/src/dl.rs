//! Opening a shared library by one of several names, and looking up typed
//! symbols in it. The only place that calls `libloading`.
#![allow(unsafe_code)]

use libloading::Library;

/// Opens the first of `names` that loads; the error lists why each failed.
///
/// A library that opened is never closed again: GPU runtimes start threads
/// and register exit handlers when first called, and unloading one under
/// those (for example a HIP that loaded but saw no GPU, on a host where
/// CUDA is then chosen) can crash the process later. One leaked handle per
/// load is the price; the library is loaded once per process.
pub(crate) fn open_first(names: &[&str]) -> Result<(&'static Library, String), String> {
    let mut why = Vec::with_capacity(names.len());
    for name in names {
        // SAFETY: opening a library runs its initializers. The names are the
        // GPU vendors' runtime libraries (or, in tests, names that do not
        // exist), whose initializers are written to run in any process that
        // links or dlopens them; nothing in this process depends on their
        // absence.
        match unsafe { Library::new(*name) } {
            Ok(lib) => return Ok((Box::leak(Box::new(lib)), (*name).to_owned())),
            Err(e) => why.push(format!("{name}: {}", chain(&e))),
        }
    }
    Err(why.join("; "))
}

/// Looks up `name` in `lib` as a value of type `T` (a function pointer).
///
/// # Safety
///
/// `T` must be a function pointer type whose signature and ABI match the
/// C declaration of `name` exactly. (The library is never unloaded; see
/// [`open_first`].)
pub(crate) unsafe fn sym<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
    // SAFETY: the caller guarantees that `T` is the symbol's real type.
    unsafe { lib.get::<T>(name) }
        .map(|s| *s)
        .map_err(|e| format!("{name}: {}", chain(&e)))
}

/// An error with its sources: libloading keeps dlerror's text in the source.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        out.push_str(": ");
        out.push_str(&s.to_string());
        next = s.source();
    }
    out
}

/// The host's page size, which dma-buf exports are aligned to.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf only reads a configuration value.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n)
        .ok()
        .filter(|&n| n.is_power_of_two())
        .unwrap_or(4096)
}
