//! Choosing the GPU runtime when the library starts.

use std::sync::Arc;

use hipobj_platform::{GpuRuntime, NoGpu};

use crate::cuda::{CUDA_LIBRARY_NAMES, CudaRuntime};
use crate::hip::{HIP_LIBRARY_NAMES, HSA_LIBRARY_NAMES, HipRuntime};

/// The environment variable that overrides the choice: `hip`, `cuda`,
/// `none`, or `auto` (the default when unset or empty).
pub const ENV_VAR: &str = "HIPOBJ_GPU_RUNTIME";

/// Which runtime to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeChoice {
    /// HIP if it loads and sees a GPU, else CUDA if it does, else none.
    Auto,
    /// HIP if it loads (even with no GPU), else none.
    Hip,
    /// CUDA if it loads (even with no GPU), else none.
    Cuda,
    /// No GPU runtime: host memory only.
    None,
}

impl RuntimeChoice {
    /// Parses the value of [`ENV_VAR`] (case-insensitive; unset or blank is
    /// `Auto`). `Err` carries the rejected value.
    pub fn parse(value: Option<&str>) -> Result<Self, String> {
        match value.map(str::trim).map(str::to_ascii_lowercase).as_deref() {
            None | Some("" | "auto") => Ok(Self::Auto),
            Some("hip") => Ok(Self::Hip),
            Some("cuda") => Ok(Self::Cuda),
            Some("none") => Ok(Self::None),
            Some(_) => Err(value.unwrap_or_default().to_owned()),
        }
    }
}

/// The names each runtime is loaded from (tests substitute bogus ones).
#[derive(Clone, Copy, Debug)]
pub struct LibraryNames<'a> {
    /// Tried for HIP.
    pub hip: &'a [&'a str],
    /// Tried for HSA (dma-buf export under HIP).
    pub hsa: &'a [&'a str],
    /// Tried for CUDA.
    pub cuda: &'a [&'a str],
}

impl Default for LibraryNames<'static> {
    fn default() -> Self {
        Self {
            hip: HIP_LIBRARY_NAMES,
            hsa: HSA_LIBRARY_NAMES,
            cuda: CUDA_LIBRARY_NAMES,
        }
    }
}

/// The runtime of this process, chosen by [`ENV_VAR`] (see [`select`]).
/// Call it once and keep the result: each call loads the libraries anew.
pub fn system_gpu() -> Arc<dyn GpuRuntime> {
    let value = std::env::var(ENV_VAR).ok();
    select(value.as_deref())
}

/// Chooses a runtime for the value `choice` of [`ENV_VAR`], loading from
/// the usual library names.
pub fn select(choice: Option<&str>) -> Arc<dyn GpuRuntime> {
    select_from(choice, LibraryNames::default())
}

/// Chooses a runtime, loading from `names`. Never fails: when nothing
/// usable loads, the result is [`NoGpu`] whose reason names each runtime
/// tried and why it was not used.
pub fn select_from(choice: Option<&str>, names: LibraryNames<'_>) -> Arc<dyn GpuRuntime> {
    let choice = match RuntimeChoice::parse(choice) {
        Ok(c) => c,
        Err(bad) => {
            return Arc::new(NoGpu::new(format!(
                "{ENV_VAR}={bad:?} is not one of hip, cuda, none, auto"
            )));
        }
    };
    let hip = || HipRuntime::load_from(names.hip, names.hsa);
    let cuda = || CudaRuntime::load_from(names.cuda);
    match choice {
        RuntimeChoice::None => Arc::new(NoGpu::new(format!("{ENV_VAR}=none"))),
        RuntimeChoice::Hip => match hip() {
            Ok(rt) => Arc::new(rt),
            Err(e) => Arc::new(NoGpu::new(format!(
                "{ENV_VAR}=hip, but HIP did not load: {}",
                e.detail
            ))),
        },
        RuntimeChoice::Cuda => match cuda() {
            Ok(rt) => Arc::new(rt),
            Err(e) => Arc::new(NoGpu::new(format!(
                "{ENV_VAR}=cuda, but CUDA did not load: {}",
                e.detail
            ))),
        },
        RuntimeChoice::Auto => {
            let mut tried = Vec::new();
            match usable(hip()) {
                Ok(rt) => return Arc::new(rt),
                Err(why) => tried.push(format!("HIP: {why}")),
            }
            match usable(cuda()) {
                Ok(rt) => return Arc::new(rt),
                Err(why) => tried.push(format!("CUDA: {why}")),
            }
            Arc::new(NoGpu::new(format!(
                "no usable GPU runtime ({})",
                tried.join("; ")
            )))
        }
    }
}

/// `rt` if it loaded and sees at least one GPU, else why not.
fn usable<R: GpuRuntime>(rt: Result<R, hipobj_platform::GpuError>) -> Result<R, String> {
    let rt = rt.map_err(|e| format!("did not load: {}", e.detail))?;
    match rt.device_count() {
        Ok(n) if n > 0 => Ok(rt),
        Ok(_) => Err("loaded, but sees no GPU".to_owned()),
        Err(e) => Err(format!("loaded, but counting GPUs failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::RuntimeChoice;

    #[test]
    fn parses_the_override() {
        assert_eq!(RuntimeChoice::parse(None), Ok(RuntimeChoice::Auto));
        assert_eq!(RuntimeChoice::parse(Some(" ")), Ok(RuntimeChoice::Auto));
        assert_eq!(RuntimeChoice::parse(Some("HIP")), Ok(RuntimeChoice::Hip));
        assert_eq!(RuntimeChoice::parse(Some("cuda")), Ok(RuntimeChoice::Cuda));
        assert_eq!(RuntimeChoice::parse(Some("none")), Ok(RuntimeChoice::None));
        assert_eq!(RuntimeChoice::parse(Some("rocm")), Err("rocm".to_owned()));
    }
}
