//! The memory side of the NIC: registered regions, their keys, and every
//! read and write of registered memory.
//!
//! * [`table`] keeps the memory regions of a device: keys, protection
//!   domains, access rights. Every access is checked here first: key,
//!   protection domain, bounds, rights.
//! * [`access`] is the only code in the crate that touches raw memory: the
//!   copies into and out of checked regions, and [`HostBuffer`], host memory
//!   that is safe to register because it is never freed.
//! * [`sgl`] walks scatter/gather lists over the table.
//! * [`mapped`] refuses registrations of memory the process cannot read and
//!   write (GPU memory, unmapped pages), as a real NIC's driver does.

pub mod access;
pub mod mapped;
pub mod sgl;
pub mod table;

pub use access::HostBuffer;
pub use table::{AccessError, Mr, MrTable};
