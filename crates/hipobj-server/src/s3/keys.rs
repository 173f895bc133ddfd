//! The configured access keys, as s3s asks for them: the secret of a known
//! key, and for an unknown one `403 InvalidAccessKeyId`, S3's answer (s3s's
//! own `SimpleAuth` answers `NotSignedUp`, which S3 uses for an account
//! without the service, and which clients do not read as a bad key).

use s3s::auth::{S3Auth, SecretKey, SimpleAuth};
use s3s::{S3Error, S3ErrorCode, S3Result};

use crate::config::AccessKey;

/// Access key id to secret key.
#[derive(Debug, Default)]
pub struct Keys(SimpleAuth);

impl Keys {
    /// The keys of `credentials`.
    pub fn new(credentials: &[AccessKey]) -> Self {
        let mut auth = SimpleAuth::new();
        for c in credentials {
            auth.register(c.access_key.clone(), c.secret_key.clone().into());
        }
        Self(auth)
    }
}

/// What an unknown access key id is told.
pub const UNKNOWN_KEY: &str = "The access key id you signed with is not known to this server.";

#[async_trait::async_trait]
impl S3Auth for Keys {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        self.0
            .lookup(access_key)
            .cloned()
            .ok_or_else(|| S3Error::with_message(S3ErrorCode::InvalidAccessKeyId, UNKNOWN_KEY))
    }
}
