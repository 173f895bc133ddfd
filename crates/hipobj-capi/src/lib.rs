//! The C ABI of hipobj.h: `libhipobj.so.0` and `libhipobj.a`.
//!
//! A thin skin over the `hipobj` core. It checks C arguments, converts
//! pointers into Rust values, maps errors to `hipObjError_t`, and catches
//! every panic before it can unwind into C. The only symbols it exports are
//! the `hipObj*` functions of include/hipobj.h. `hipObjInit` runs the core
//! on the production platform of `hipobj-system` (only this crate's tests,
//! with the `testing` feature, can give it another or inject panics). A test
//! (`header_check.rs`) compiles the header against this crate's layouts,
//! values and signatures.

mod api;
mod boundary;
#[cfg(test)]
mod header_check;
mod rc_v2;
mod strings;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing;
pub mod types;

pub use api::*;

/// The platform `hipObjInit` uses: the system's, or with the `testing`
/// feature the one a test set (`testing::set_platform`).
fn platform() -> hipobj_platform::Platform {
    #[cfg(feature = "testing")]
    {
        testing::platform()
    }
    #[cfg(not(feature = "testing"))]
    {
        hipobj_system::platform()
    }
}
