//! hipObject core.
