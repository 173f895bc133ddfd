//! hipObject's libibverbs backend and sysfs NIC topology.
//!
//! * [`IbVerbs`] implements [`hipobj_platform::Verbs`] over `libibverbs.so.1`,
//!   which it opens with `dlopen` when constructed ([`IbVerbs::load`], or
//!   [`IbVerbs::load_from`] with another library name). The ABI structures are
//!   declared in Rust (`ffi`), checked against the real `<infiniband/verbs.h>`
//!   by a test, and the inline verbs of that header (`ibv_post_send`,
//!   `ibv_post_recv`, `ibv_poll_cq`, `ibv_req_notify_cq`) are called through
//!   the provider's ops table, as the header does.
//! * [`SysfsTopology`] implements [`hipobj_platform::NicTopology`] from
//!   `/sys/class/infiniband` (or a fake tree in tests).
//!
//! Nothing here links to libibverbs at build time: a program that never
//! constructs an [`IbVerbs`] never loads it.

mod backend;
mod error;
mod ffi;
pub mod sysfs;

pub use backend::{DEFAULT_LIBRARY, IbCq, IbDevice, IbMr, IbPd, IbQp, IbVerbs};
pub use sysfs::SysfsTopology;
