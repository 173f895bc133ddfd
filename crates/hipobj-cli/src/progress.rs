//! Progress of `get` and `put` on a terminal: bytes, rate and ETA on
//! stderr for a transfer of at least [`THRESHOLD`] bytes, redrawn in place
//! and left as a last line with the totals. Nothing when stderr is not a
//! terminal (piped, redirected, a test), and nothing for small transfers.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Transfers smaller than this finish too soon for a bar to help.
pub(crate) const THRESHOLD: u64 = 16 << 20;

/// A transfer's progress bar, or nothing.
#[derive(Debug)]
pub(crate) struct Progress(Option<ProgressBar>);

impl Progress {
    /// A bar for `total` bytes, `what` naming the transfer (`put
    /// s3://b/k`), when stderr is a terminal and `total` is at least
    /// [`THRESHOLD`].
    pub(crate) fn new(what: &str, total: u64) -> Self {
        if total < THRESHOLD || !std::io::stderr().is_terminal() {
            return Self(None);
        }
        let style = ProgressStyle::with_template(
            "hipobj: {msg} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} [{elapsed}]",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
            .with_style(style)
            .with_message(what.to_owned());
        // Redrawn while the first part is in flight too, so the line moves
        // from the start.
        bar.enable_steady_tick(Duration::from_millis(200));
        bar.tick();
        Self(Some(bar))
    }

    /// `n` more bytes moved.
    pub(crate) fn add(&self, n: u64) {
        if let Some(b) = &self.0 {
            b.inc(n);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            // The last line stays: the totals and the rate (on failure too,
            // above the error line, showing how far it got).
            b.abandon();
        }
    }
}
