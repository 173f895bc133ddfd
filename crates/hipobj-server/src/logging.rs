//! The server's log subscriber. Whatever `HIPOBJ_LOG` asks for, secrets
//! never reach the log: s3s (third-party) logs whole requests and responses
//! at DEBUG (`Authorization`, `x-amz-rdma-token`) and every error response
//! with its headers at ERROR (a `409`'s server token), so its targets are
//! always off; other third-party crates are capped at WARN. The server's
//! own events (`hipobj_*` targets) never carry a token, a signature or a
//! secret key, and log each request's method, path and status at DEBUG.

use tracing::Subscriber;
use tracing::metadata::LevelFilter;
use tracing_subscriber::filter::{EnvFilter, FilterExt, filter_fn};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{Layer, Registry};

/// The filter when `HIPOBJ_LOG` is unset or unparsable.
pub const DEFAULT_FILTER: &str = "info";

/// Whether an event or span from `target` at `level` may be logged at all.
fn allowed(target: &str, level: &tracing::Level) -> bool {
    if target.starts_with("hipobj") {
        true
    } else if target == "s3s" || target.starts_with("s3s::") || target.starts_with("s3s_") {
        false
    } else {
        LevelFilter::WARN >= *level
    }
}

/// A subscriber that writes to `writer`, filtered by `spec` (an
/// `EnvFilter` directive string such as `info` or `hipobj_server=debug`)
/// within the caps above.
pub fn subscriber<W>(spec: Option<&str>, writer: W) -> impl Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let env = spec
        .and_then(|s| EnvFilter::try_new(s).ok())
        .unwrap_or_else(|| EnvFilter::new(DEFAULT_FILTER));
    let caps = filter_fn(|m| allowed(m.target(), m.level()));
    Registry::default().with(
        tracing_subscriber::fmt::layer()
            .with_writer(writer)
            .with_filter(env.and(caps)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    #[test]
    fn s3s_is_off_and_other_crates_are_capped() {
        assert!(!allowed("s3s::service", &Level::ERROR));
        assert!(!allowed("s3s", &Level::TRACE));
        assert!(allowed("hipobj_server::rdma", &Level::TRACE));
        assert!(allowed("hyper::proto", &Level::WARN));
        assert!(!allowed("aws_smithy_runtime::client", &Level::DEBUG));
    }
}
