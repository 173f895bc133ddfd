//! Where a client's AWS credentials and region come from, the same for the
//! CLI and the Python package: keys the program gives, or the AWS SDK's
//! own default chain.
//!
//! The chain is aws-config's [`DefaultCredentialsChain`]: the environment
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), the
//! shared config and credentials files (`AWS_PROFILE`, with
//! `credential_process`, SSO and assumed roles), web identity
//! (`AWS_WEB_IDENTITY_TOKEN_FILE`, as IRSA sets it), the container endpoint
//! (`AWS_CONTAINER_CREDENTIALS_FULL_URI` / `_RELATIVE_URI`) and the
//! instance metadata service (unless `AWS_EC2_METADATA_DISABLED=true`).
//! A profile the program names (`--profile`, `profile=`) is used alone,
//! as boto3 and the AWS CLI do: keys in the environment do not win over it.
//! It is handed to aws-sdk-s3 as a provider, not as resolved keys: the
//! SDK's identity cache asks it again before temporary credentials expire,
//! so a long transfer signs every request with current ones.
//!
//! ```no_run
//! # async fn demo() {
//! use hipobj_s3::credentials::{self, Source};
//! let region = credentials::region(None, Some("dev")).await;
//! let creds = credentials::provider(&Source::chain(Some("dev")), region.clone(), None).await;
//! let conf = aws_sdk_s3::Config::builder()
//!     .region(region)
//!     .credentials_provider(creds);
//! # }
//! ```

use aws_config::default_provider::credentials::DefaultCredentialsChain;
use aws_config::meta::region::RegionProviderChain;
use aws_config::provider_config::ProviderConfig;
use aws_sdk_s3::config::{Credentials, Region, SharedCredentialsProvider};
use aws_smithy_runtime_api::client::http::SharedHttpClient;

/// The region when neither the caller, the environment nor the profile
/// names one.
pub const DEFAULT_REGION: &str = "us-east-1";

/// Where the credentials come from.
#[derive(Clone, Debug)]
pub enum Source {
    /// With `profile: None`, the SDK's default chain (its profile step
    /// reads `AWS_PROFILE`, else `default`); with a profile, that profile
    /// of the shared files alone, whatever the environment holds.
    Chain {
        /// The profile of the shared config and credentials files.
        profile: Option<String>,
    },
    /// Keys the program gives (a session token with temporary ones). They
    /// are used as they are: nothing refreshes them.
    Keys(Credentials),
}

impl Source {
    /// The default chain with `profile`.
    pub fn chain(profile: Option<&str>) -> Self {
        Self::Chain {
            profile: profile.map(str::to_owned),
        }
    }

    /// An access key, its secret and, for temporary keys, the session token.
    pub fn keys(access_key: &str, secret_key: &str, session_token: Option<&str>) -> Self {
        Self::Keys(Credentials::new(
            access_key,
            secret_key,
            session_token.map(str::to_owned),
            None,
            "hipobj-explicit",
        ))
    }
}

/// The region: `explicit`, else `AWS_REGION` / `AWS_DEFAULT_REGION`, else
/// the profile's `region` (`profile`, else `AWS_PROFILE`'s), else
/// [`DEFAULT_REGION`]. The instance metadata service is not asked: an S3
/// gateway's region is a name the server checks, not where the machine is.
pub async fn region(explicit: Option<&str>, profile: Option<&str>) -> Region {
    if let Some(r) = explicit.filter(|r| !r.is_empty()) {
        return Region::new(r.to_owned());
    }
    let mut from_profile = aws_config::profile::ProfileFileRegionProvider::builder();
    if let Some(p) = profile {
        from_profile = from_profile.profile_name(p);
    }
    RegionProviderChain::first_try(aws_config::environment::EnvironmentVariableRegionProvider::new())
        .or_else(from_profile.build())
        .region()
        .await
        .unwrap_or_else(|| Region::new(DEFAULT_REGION))
}

/// The provider to give aws-sdk-s3 (`credentials_provider`). `http`, when
/// given, is the client the chain's own requests use (SSO, STS, the
/// container and instance endpoints), so that a CA bundle applies there
/// too. Resolves nothing yet: the first request does.
pub async fn provider(
    source: &Source,
    region: Region,
    http: Option<SharedHttpClient>,
) -> SharedCredentialsProvider {
    match source {
        Source::Keys(c) => SharedCredentialsProvider::new(c.clone()),
        Source::Chain { profile } => {
            let mut conf = ProviderConfig::without_region();
            if let Some(h) = http {
                conf = conf.with_http_client(h);
            }
            match profile {
                // A profile named by the program is the source, as boto3's
                // Session(profile_name=) and the AWS CLI's --profile: keys
                // in the environment do not override it. (The profile may
                // itself say where its credentials come from:
                // credential_process, sso_*, role_arn, web_identity_token_file,
                // credential_source.)
                Some(p) => SharedCredentialsProvider::new(
                    aws_config::profile::ProfileFileCredentialsProvider::builder()
                        .configure(&conf.with_region(Some(region)))
                        .profile_name(p)
                        .build(),
                ),
                None => SharedCredentialsProvider::new(
                    DefaultCredentialsChain::builder()
                        .configure(conf)
                        .region(region)
                        .build()
                        .await,
                ),
            }
        }
    }
}

/// Why a request was never sent when the cause is the credentials: no
/// source in the chain had any, or the one that had them failed (an SSO
/// session that expired, a `credential_process` that exited non-zero, an
/// unreachable container endpoint). `None` when the credentials are not
/// the cause.
pub(crate) fn not_loaded(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    use aws_credential_types::provider::error::CredentialsError;
    let mut at = Some(e);
    while let Some(err) = at {
        if let Some(c) = err.downcast_ref::<CredentialsError>() {
            // One line: the chain lists what it tried a line each.
            let why = crate::error::causes(c)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            return Some(match c {
                CredentialsError::CredentialsNotLoaded(_) => format!(
                    "no AWS credentials ({why}): give an access key and secret or a profile, set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or name a profile with AWS_PROFILE"
                ),
                _ => format!("the AWS credentials could not be loaded: {why}"),
            });
        }
        at = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use aws_credential_types::provider::error::CredentialsError;
    use aws_credential_types::provider::{self, ProvideCredentials, future};

    /// A source that has nothing, or fails.
    #[derive(Debug)]
    struct Fails(bool);

    impl ProvideCredentials for Fails {
        fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            let r: provider::Result = Err(if self.0 {
                CredentialsError::not_loaded("no source had any.\n  Environment: not set\n  Profile: none")
            } else {
                CredentialsError::provider_error("the SSO session has expired")
            });
            future::ProvideCredentials::ready(r)
        }
    }

    async fn head_with(p: Fails) -> crate::Error {
        let conf = aws_sdk_s3::Config::builder()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .endpoint_url("http://127.0.0.1:9")
            .region(Region::new(DEFAULT_REGION))
            .credentials_provider(SharedCredentialsProvider::new(p))
            .build();
        let e = aws_sdk_s3::Client::from_conf(conf)
            .head_object()
            .bucket("b")
            .key("k")
            .send()
            .await
            .unwrap_err();
        crate::Error::from_sdk("HeadObject", &e)
    }

    #[tokio::test]
    async fn a_credentials_failure_says_so_and_not_that_the_server_is_unreachable() {
        let e = head_with(Fails(true)).await;
        assert!(e.to_string().starts_with("HeadObject: no AWS credentials"), "{e}");
        assert!(e.to_string().contains("AWS_PROFILE"), "{e}");
        assert!(!e.is_unreachable(), "{e}");
        assert!(!e.to_string().contains('\n'), "{e}");
        let e = head_with(Fails(false)).await;
        assert!(
            e.to_string().contains("the AWS credentials could not be loaded")
                && e.to_string().contains("SSO session has expired"),
            "{e}"
        );
    }
}
