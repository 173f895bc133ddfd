//! The systemd notify protocol (`sd_notify(3)`), for a `Type=notify`
//! service (packaging/systemd/hipobj-server.service): `READY=1` once the
//! listener is bound and the store is open, `STOPPING=1` when a stop
//! begins. Without `NOTIFY_SOCKET` (not started by systemd) nothing is
//! sent. A message that cannot be sent is logged and the server goes on:
//! systemd then reports the start as timed out, which names the problem.

use sd_notify::NotifyState;

/// Tells the service manager the server is serving: the listener is bound
/// (connections queue from now on) and the store is open.
pub(crate) fn ready() {
    send(&[NotifyState::Ready, NotifyState::Status("serving")], "READY=1");
}

/// Tells the service manager the server has begun to stop.
pub(crate) fn stopping() {
    send(
        &[
            NotifyState::Stopping,
            NotifyState::Status("stopping: finishing the requests in flight"),
        ],
        "STOPPING=1",
    );
}

fn send(states: &[NotifyState<'_>], what: &str) {
    // The variable stays set: STOPPING=1 goes to the same socket later.
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!("cannot tell the service manager {what}: {e}");
    }
}
