//! How packets travel between devices.
//!
//! * [`udp`]: UDP sockets with `recvmmsg`/`sendmmsg` batches, an eventfd
//!   waker and `ppoll`; the syscalls themselves are in `sys`, a safe API
//!   over libc (the link's only unsafe code).
//! * [`mem`]: an in-memory link with virtual time, for tests of the engine.
//! * [`faults`]: a seeded fault injector (loss, duplication, reordering),
//!   used by both links.
//! * [`pcap`]: a tap that writes what a device sends and receives to a pcap
//!   file tshark can read.

pub mod faults;
pub mod mem;
pub mod pcap;
mod sys;
pub mod udp;
