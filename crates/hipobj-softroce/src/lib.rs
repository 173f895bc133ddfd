//! A userspace RoCEv2 NIC over UDP: the soft RDMA device that every test,
//! demo and benchmark of hipObject runs on where no RDMA hardware exists.
//!
//! The layers, bottom up:
//!
//! * [`wire`]: RoCEv2 packets as typed, length-checked views (BTH, RETH,
//!   AETH, ImmDt) and the ICRC.
//! * [`mem`]: the memory side: the MR table with its keys, bounds and access
//!   checks, and the only code that reads or writes registered memory.
//! * [`engine`]: the reliable-connected transport as a state machine with no
//!   I/O and no clock: packets and time go in, packets and completions come
//!   out. Every RC rule lives here and is tested in memory with virtual time.
//! * [`link`]: how packets travel: UDP sockets with batched syscalls, an
//!   in-memory link for tests, a fault injector and a pcap tap.
//! * `worker` (private): the thread per device that plays the NIC's DMA
//!   engine, pumping the engine between the link and the clock.
//! * [`verbs`]: [`SoftVerbs`], the implementation of the
//!   [`hipobj_platform::Verbs`] seam.
//!
//! See `docs/soft-roce.md` for the RC rules and the tests that enforce them.

pub mod engine;
pub mod link;
pub mod mem;
pub mod verbs;
pub mod wire;
mod worker;

pub use engine::Counters;
pub use link::faults::FaultConfig;
pub use mem::HostBuffer;
pub use verbs::{
    AddrChoice, DEFAULT_NAME, LinkKind, SoftConfig, SoftDevice, SoftVerbs, WORKER_THREAD_PREFIX,
};
