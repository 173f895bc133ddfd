//! The server's log subscriber. Whatever `HIPOBJ_LOG` asks for, secrets
//! never reach the log: s3s (third-party) logs whole requests and responses
//! at DEBUG (`Authorization`, `x-amz-rdma-token`) and every error response
//! with its headers at ERROR (a `409`'s server token), so its targets are
//! always off; other third-party crates are capped at WARN. The server's
//! own events (`hipobj_*` targets) never carry a token, a signature or a
//! secret key, and log each request's method, path and status at DEBUG.
//!
//! Lines are text (colour only when the output is a terminal) or JSON
//! (`log_format`). The access log (`crate::access_log`, target
//! [`crate::access_log::TARGET`]) goes to the same output at INFO, or,
//! with `access_log` set, to that file alone ([`AccessFile`]).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};
use tracing::Subscriber;
use tracing::metadata::LevelFilter;
use tracing_subscriber::filter::{EnvFilter, FilterExt, filter_fn};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{Layer, Registry};

/// The filter when `HIPOBJ_LOG` is unset or unparsable.
pub const DEFAULT_FILTER: &str = "info";

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One line of text per event.
    #[default]
    Text,
    /// One JSON object per line (tracing-subscriber's JSON format).
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            _ => Err(format!("log format {s:?}: text or json")),
        }
    }
}

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

/// A subscriber that writes text without colour to `writer`, filtered by
/// `spec` (an `EnvFilter` directive string such as `info` or
/// `hipobj_server=debug`) within the caps above.
pub fn subscriber<W>(spec: Option<&str>, writer: W) -> impl Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    build(
        &Options {
            spec,
            format: LogFormat::Text,
            ansi: false,
            access: None,
        },
        writer,
    )
}

/// How the log is written.
#[derive(Debug)]
pub struct Options<'a> {
    /// `HIPOBJ_LOG`.
    pub spec: Option<&'a str>,
    /// Text or JSON.
    pub format: LogFormat,
    /// Colour (text only; for a terminal).
    pub ansi: bool,
    /// The access log's own file.
    pub access: Option<Arc<AccessFile>>,
}

/// A fmt layer of `format` over `writer`.
fn fmt_layer<W>(format: LogFormat, ansi: bool, writer: W) -> Box<dyn Layer<Registry> + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .with_writer(writer)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_ansi(false)
            .with_writer(writer)
            .boxed(),
    }
}

/// The subscriber `opts` describe, writing to `writer` (and the access
/// file, when set).
pub fn build<W>(opts: &Options<'_>, writer: W) -> impl Subscriber + Send + Sync + use<W>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let env = opts
        .spec
        .and_then(|s| EnvFilter::try_new(s).ok())
        .unwrap_or_else(|| EnvFilter::new(DEFAULT_FILTER));
    let caps = filter_fn(|m| allowed(m.target(), m.level()));
    let separate = opts.access.is_some();
    let not_access = filter_fn(move |m| !(separate && m.target() == crate::access_log::TARGET));
    let mut layers = vec![
        fmt_layer(opts.format, opts.ansi, writer)
            .with_filter(env.and(caps).and(not_access))
            .boxed(),
    ];
    if let Some(file) = &opts.access {
        let only_access =
            filter_fn(|m| m.target() == crate::access_log::TARGET && LevelFilter::INFO >= *m.level());
        layers.push(
            fmt_layer(opts.format, false, AccessWriter(file.clone()))
                .with_filter(only_access)
                .boxed(),
        );
    }
    Registry::default().with(layers)
}

/// The access log's file, appended to, reopened on demand (after a log
/// rotation moved it).
#[derive(Debug)]
pub struct AccessFile {
    path: PathBuf,
    file: Mutex<File>,
}

fn open_append(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new().create(true).append(true).open(path)
}

impl AccessFile {
    /// Opens (creates) `path` for appending.
    pub fn open(path: &Path) -> Result<Arc<Self>, crate::Error> {
        let file =
            open_append(path).map_err(|e| crate::Error::Io(format!("access_log {}", path.display()), e))?;
        Ok(Arc::new(Self {
            path: path.to_owned(),
            file: Mutex::new(file),
        }))
    }

    /// Opens the path again: lines from now on go to the file now there.
    pub fn reopen(&self) -> std::io::Result<()> {
        let f = open_append(&self.path)?;
        *self.lock() = f;
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, File> {
        self.file.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Writes access lines to an [`AccessFile`], one event under one lock.
#[derive(Debug, Clone)]
struct AccessWriter(Arc<AccessFile>);

/// One event's write.
#[derive(Debug)]
pub struct AccessLine<'a>(MutexGuard<'a, File>);

impl Write for AccessLine<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl<'a> MakeWriter<'a> for AccessWriter {
    type Writer = AccessLine<'a>;
    fn make_writer(&'a self) -> AccessLine<'a> {
        AccessLine(self.0.lock())
    }
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
