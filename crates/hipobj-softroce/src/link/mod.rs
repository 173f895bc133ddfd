//! How packets travel between devices.
//!
//! * [`faults`]: a seeded fault injector (loss, duplication, reordering).
//! * [`mem`]: an in-memory link with virtual time, for tests of the engine.
pub mod faults;
pub mod mem;
