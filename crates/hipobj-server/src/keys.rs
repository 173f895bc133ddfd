//! The access keys in service, and the credentials file they are reloaded
//! from without a restart (docs/server.md, "Credentials file").
//!
//! [`Keys`] is the one set every signature check reads: s3s's auth
//! ([`LiveAuth`]), the hipobj-rc-v2 control path and the check made before
//! a body without a length is held. It is the keys of the configuration
//! (`[[credentials]]`, `--access-key`) and those of the credentials file,
//! swapped whole when the file is read again: on SIGHUP
//! ([`crate::Handle::reload`]) and when its content changes ([`watch`]).
//! A request checks its signature once, when it starts, against the set in
//! service then: a key revoked while its request runs does not cut that
//! request, and the next request signed with it is refused.
//!
//! A file that cannot be used (unreadable, not TOML, an empty field, one
//! key twice, a key the configuration gives another secret) is refused as
//! a whole: the set in service stays and the reason is logged, without any
//! secret.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::watch;

use crate::config::{AccessKey, Config};

/// Why a credentials file was not taken.
#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    /// The file could not be read.
    #[error("reading {0}: {1}")]
    Read(PathBuf, #[source] std::io::Error),
    /// The file is not a credentials file (the TOML parser's message and
    /// line; never the line's text, which may hold a secret).
    #[error("{0}: line {1}: {2}")]
    Parse(PathBuf, usize, String),
    /// An access key or secret key is empty.
    #[error("{0}: an access key or secret key is empty")]
    Empty(PathBuf),
    /// The file names an access key twice.
    #[error("{0}: access key {1} is listed twice")]
    Twice(PathBuf, String),
    /// The file gives a key of the configuration another secret.
    #[error("{0}: access key {1} is also in the configuration, with another secret")]
    Conflict(PathBuf, String),
}

/// The credentials file: the configuration's `[[credentials]]` tables and
/// nothing else.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    credentials: Vec<AccessKey>,
}

/// What a reload changed: the access keys added and removed (a key whose
/// secret changed is in neither).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Change {
    /// Keys that sign from now on.
    pub added: Vec<String>,
    /// Keys refused from now on.
    pub removed: Vec<String>,
    /// Keys whose secret changed.
    pub changed: Vec<String>,
}

impl Change {
    /// Whether the set in service is the one it was.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

type Revoked = Box<dyn Fn(&str) + Send + Sync>;

/// The access keys in service (access key to secret key).
pub struct Keys {
    /// The configuration's keys, which no reload changes.
    fixed: HashMap<String, String>,
    /// The credentials file, when one is configured.
    file: Option<PathBuf>,
    live: RwLock<Arc<HashMap<String, String>>>,
    /// The file's bytes at the last look, taken or refused: the watcher
    /// reads the file again only when they change.
    seen: Mutex<Option<Vec<u8>>>,
    /// Called with each key a reload removes (hipobj-rc-v2 drops its
    /// prepared sessions).
    on_revoke: Mutex<Vec<Revoked>>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("file", &self.file)
            .field("keys", &self.current().len())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Keys {
    /// The configuration's keys and, when `credentials_file` is set, the
    /// file's (which must then read and parse).
    pub fn new(config: &Config) -> Result<Arc<Self>, KeysError> {
        Self::with(&config.credentials, config.credentials_file.clone())
    }

    /// `fixed` keys, and those of `file`.
    pub fn with(fixed: &[AccessKey], file: Option<PathBuf>) -> Result<Arc<Self>, KeysError> {
        let fixed: HashMap<String, String> = fixed
            .iter()
            .map(|c| (c.access_key.clone(), c.secret_key.clone()))
            .collect();
        let keys = Self {
            live: RwLock::new(Arc::new(fixed.clone())),
            fixed,
            file,
            seen: Mutex::new(None),
            on_revoke: Mutex::new(Vec::new()),
        };
        if keys.file.is_some() {
            keys.reload()?;
        }
        Ok(Arc::new(keys))
    }

    /// The set in service now.
    pub fn current(&self) -> Arc<HashMap<String, String>> {
        self.live
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The secret of `access_key`, if it is in service.
    pub fn secret(&self, access_key: &str) -> Option<String> {
        self.current().get(access_key).cloned()
    }

    /// The credentials file, if one is configured.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// Calls `f` with every access key a reload removes, from now on.
    pub fn on_revoke(&self, f: impl Fn(&str) + Send + Sync + 'static) {
        lock(&self.on_revoke).push(Box::new(f));
    }

    /// Reads the credentials file and puts its keys (with the
    /// configuration's) in service. Without a file, nothing changes. On an
    /// error the set in service stays.
    pub fn reload(&self) -> Result<Change, KeysError> {
        let Some(path) = &self.file else {
            return Ok(Change::default());
        };
        let bytes = std::fs::read(path).map_err(|e| KeysError::Read(path.clone(), e))?;
        *lock(&self.seen) = Some(bytes.clone());
        let next = self.parse(path, &bytes)?;
        Ok(self.install(next))
    }

    /// Reloads only when the file's bytes differ from the last look's;
    /// `None` when they do not.
    pub fn reload_if_changed(&self) -> Option<Result<Change, KeysError>> {
        let path = self.file.as_ref()?;
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                // Reported once per disappearance, not every second.
                let mut seen = lock(&self.seen);
                if seen.is_none() {
                    return None;
                }
                *seen = None;
                return Some(Err(KeysError::Read(path.clone(), e)));
            }
        };
        {
            let mut seen = lock(&self.seen);
            if seen.as_deref() == Some(bytes.as_slice()) {
                return None;
            }
            *seen = Some(bytes.clone());
        }
        Some(self.parse(path, &bytes).map(|next| self.install(next)))
    }

    /// The set the file's `bytes` make with the configuration's keys.
    fn parse(&self, path: &Path, bytes: &[u8]) -> Result<HashMap<String, String>, KeysError> {
        let text = std::str::from_utf8(bytes)
            .map_err(|_| KeysError::Parse(path.to_owned(), 0, "the file is not UTF-8".into()))?;
        let file: File = toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(0, |s| {
                let before = bytes.get(..s.start).unwrap_or(bytes);
                before.iter().filter(|b| **b == b'\n').count() + 1
            });
            KeysError::Parse(path.to_owned(), line, e.message().to_owned())
        })?;
        let mut next = self.fixed.clone();
        let mut listed = BTreeSet::new();
        for c in file.credentials {
            if c.access_key.is_empty() || c.secret_key.is_empty() {
                return Err(KeysError::Empty(path.to_owned()));
            }
            if !listed.insert(c.access_key.clone()) {
                return Err(KeysError::Twice(path.to_owned(), c.access_key));
            }
            if self.fixed.get(&c.access_key).is_some_and(|s| *s != c.secret_key) {
                return Err(KeysError::Conflict(path.to_owned(), c.access_key));
            }
            next.insert(c.access_key, c.secret_key);
        }
        Ok(next)
    }

    /// Puts `next` in service; says what changed and tells the revocation
    /// hooks.
    fn install(&self, next: HashMap<String, String>) -> Change {
        let next = Arc::new(next);
        let old = {
            let mut live = self
                .live
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            std::mem::replace(&mut *live, next.clone())
        };
        let mut change = Change::default();
        for (k, s) in next.iter() {
            match old.get(k) {
                None => change.added.push(k.clone()),
                Some(o) if o != s => change.changed.push(k.clone()),
                Some(_) => {}
            }
        }
        change.removed = old.keys().filter(|k| !next.contains_key(*k)).cloned().collect();
        change.added.sort();
        change.removed.sort();
        change.changed.sort();
        let hooks = lock(&self.on_revoke);
        for k in change.removed.iter().chain(&change.changed) {
            for f in hooks.iter() {
                f(k);
            }
        }
        change
    }
}

/// Logs a reload's outcome: the keys added, removed and changed (access
/// key ids only), or why the file was refused.
pub(crate) fn log_reload(why: &str, done: &Result<Change, KeysError>) {
    match done {
        Ok(c) if c.is_empty() => tracing::info!("{why}: credentials file read again; no key changed"),
        Ok(c) => tracing::info!(
            added = ?c.added,
            removed = ?c.removed,
            changed = ?c.changed,
            "{why}: credentials reloaded"
        ),
        Err(e) => tracing::warn!("{why}: credentials file refused, the keys in service stay: {e}"),
    }
}

/// Warns when the credentials file may be read by users other than its
/// owner and group.
pub(crate) fn warn_if_readable_by_others(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        if let Ok(m) = std::fs::metadata(path)
            && m.permissions().mode() & 0o004 != 0
        {
            tracing::warn!(
                file = %path.display(),
                "the credentials file is readable by every user of this host (chmod o-r)"
            );
        }
    }
}

/// Reads the credentials file every `every` and reloads it when its
/// content changed, until `stopped`.
pub(crate) async fn watch(keys: Arc<Keys>, every: Duration, mut stopped: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = async { let _ = stopped.wait_for(|s| *s).await; } => break,
            _ = tick.tick() => {
                let k = keys.clone();
                if let Ok(Some(done)) = tokio::task::spawn_blocking(move || k.reload_if_changed()).await {
                    log_reload("credentials file changed", &done);
                }
            }
        }
    }
}

/// What an unknown (or revoked) access key id is told.
pub(crate) const UNKNOWN_KEY: &str = "The access key id you signed with is not known to this server.";

/// s3s's auth over [`Keys`]: each request's key is looked up in the set
/// in service when the request starts. An unknown key is
/// `403 InvalidAccessKeyId`, as S3 answers it.
#[derive(Clone, Debug)]
pub(crate) struct LiveAuth(pub Arc<Keys>);

#[async_trait::async_trait]
impl s3s::auth::S3Auth for LiveAuth {
    async fn get_secret_key(&self, access_key: &str) -> s3s::S3Result<s3s::auth::SecretKey> {
        match self.0.secret(access_key) {
            Some(s) => Ok(s.into()),
            None => Err(s3s::S3Error::with_message(
                s3s::S3ErrorCode::InvalidAccessKeyId,
                UNKNOWN_KEY,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(a: &str, s: &str) -> AccessKey {
        AccessKey {
            access_key: a.into(),
            secret_key: s.into(),
        }
    }

    fn write(path: &Path, keys: &[(&str, &str)]) {
        let text: String = keys
            .iter()
            .map(|(a, s)| format!("[[credentials]]\naccess_key = \"{a}\"\nsecret_key = \"{s}\"\n"))
            .collect();
        std::fs::write(path, text).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn a_reload_adds_and_removes_keys_and_a_bad_file_changes_nothing() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let f = dir.path().join("credentials.toml");
        write(&f, &[("a", "sa")]);
        let keys = Keys::with(&[key("fixed", "sf")], Some(f.clone())).unwrap_or_else(|e| panic!("{e}"));
        let revoked = Arc::new(Mutex::new(Vec::new()));
        let r = revoked.clone();
        keys.on_revoke(move |k| lock(&r).push(k.to_owned()));
        assert_eq!(keys.secret("a").as_deref(), Some("sa"));
        assert_eq!(keys.secret("fixed").as_deref(), Some("sf"));
        assert!(keys.reload_if_changed().is_none(), "nothing changed");

        write(&f, &[("b", "sb")]);
        let c = keys.reload_if_changed().and_then(Result::ok).unwrap_or_default();
        assert_eq!(c.added, ["b"]);
        assert_eq!(c.removed, ["a"]);
        assert_eq!(*lock(&revoked), ["a"]);
        assert!(keys.secret("a").is_none());

        for bad in [
            "[[credentials]]\naccess_key = \"c\"\n",
            "[[credentials]]\naccess_key = \"c\"\nsecret_key = \"\"\n",
            "[[credentials]]\naccess_key = \"c\"\nsecret_key = \"x\"\n[[credentials]]\naccess_key = \"c\"\nsecret_key = \"y\"\n",
            "[[credentials]]\naccess_key = \"fixed\"\nsecret_key = \"other\"\n",
            "[[credentials]\naccess_key = \"c\"\nsecret_key = \"very-secret\"\n",
            "secret_key = \"very-secret\"\n",
            "[[credentials]]\naccess_key = \"é\"\nsecret_key = \"very-secret\"\nx = \"é\"\n",
        ] {
            std::fs::write(&f, bad).unwrap_or_else(|e| panic!("{e}"));
            let e = match keys.reload() {
                Err(e) => e.to_string(),
                Ok(c) => panic!("{bad:?} taken: {c:?}"),
            };
            assert!(!e.contains("very-secret"), "{e}");
            assert_eq!(keys.secret("b").as_deref(), Some("sb"), "{bad:?}");
            assert!(keys.secret("c").is_none());
        }
        std::fs::write(&f, "[[credentials]]\naccess_key = \"c\"\n\nsecret_key = 5\n")
            .unwrap_or_else(|e| panic!("{e}"));
        match keys.reload() {
            Err(KeysError::Parse(_, line, _)) => assert_eq!(line, 4),
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(&f).unwrap_or_else(|e| panic!("{e}"));
        assert!(keys.reload().is_err());
        assert_eq!(keys.secret("b").as_deref(), Some("sb"));
    }
}
