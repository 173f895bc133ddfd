//! hipObject's libibverbs backend and sysfs NIC topology.
//!
//! * [`SysfsTopology`] implements [`hipobj_platform::NicTopology`] from
//!   `/sys/class/infiniband` (or a fake tree in tests).
//!
//! Nothing here links to libibverbs at build time.

pub mod sysfs;

pub use sysfs::SysfsTopology;
