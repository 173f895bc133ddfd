//! The configuration as an operator reads it: `--print-config`'s TOML
//! (which the server reads back, secrets replaced by [`REDACTED`]), the
//! start line's summary of the store, and [`Secret`], a string that no
//! `Debug` output shows.

use serde::{Deserialize, Serialize};

use crate::config::{Config, StorageConfig};

/// What stands for a secret in printed configuration.
pub const REDACTED: &str = "<redacted>";

/// A secret string: configured and compared, never shown by `Debug`.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(REDACTED)
    }
}

impl Secret {
    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// `config` with every secret replaced by [`REDACTED`]: the secret keys of
/// the credentials and of an S3 back end, and `metrics_token`.
pub fn redacted(config: &Config) -> Config {
    let mut c = config.clone();
    for k in &mut c.credentials {
        k.secret_key = REDACTED.into();
    }
    if let StorageConfig::S3(r) = &mut c.storage {
        r.secret_key = REDACTED.into();
    }
    if let Some(t) = &mut c.metrics_token {
        t.0 = REDACTED.into();
    }
    c
}

/// The configuration as TOML that [`Config::from_toml`] reads back, secrets
/// redacted.
pub fn to_toml(config: &Config) -> Result<String, crate::Error> {
    toml::to_string(&redacted(config))
        .map_err(|e| crate::Error::Config(format!("printing the configuration: {e}")))
}

/// The store in a few words: `fs:<data dir>` or `s3:<endpoint>`.
pub fn storage(s: &StorageConfig) -> String {
    match s {
        StorageConfig::Fs { data_dir } => format!("fs:{}", data_dir.display()),
        StorageConfig::S3(r) => format!("s3:{}", r.endpoint),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_toml_reads_back_the_same_without_its_secrets() {
        let mut c = Config::from_toml(
            r#"
            address = "127.0.0.1:0"
            metrics_token = "tok-very-secret"
            access_log = "/var/log/hipobj/access.log"
            log_format = "json"
            [[credentials]]
            access_key = "ak"
            secret_key = "sk-very-secret"
            [storage]
            kind = "s3"
            endpoint = "http://127.0.0.1:5000"
            access_key = "a"
            secret_key = "remote-very-secret"
            [rdma]
            device = "rxe0"
            "#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        c.http.max_connections = 77;
        let text = to_toml(&c).unwrap_or_else(|e| panic!("{e}"));
        assert!(!text.contains("very-secret"), "{text}");
        let back = Config::from_toml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let v = |c: &Config| toml::Value::try_from(c).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v(&back), v(&redacted(&c)));
        assert_eq!(back.http.max_connections, 77);
        assert!(!format!("{c:?}").contains("very-secret"));
        assert_eq!(storage(&c.storage), "s3:http://127.0.0.1:5000");
    }
}
