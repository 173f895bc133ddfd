//! The S3 back end: every request is forwarded to another S3 service with
//! aws-sdk-s3, through s3s-aws's proxy. The server then adds RDMA and its
//! own credentials in front of MinIO, Ceph RGW, AWS or moto.

use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};

use crate::config::RemoteConfig;

/// A proxy to the service `config` names.
pub fn open(config: &RemoteConfig) -> s3s_aws::Proxy {
    let creds = Credentials::new(
        config.access_key.clone(),
        config.secret_key.clone(),
        None,
        None,
        "hipobj-server configuration",
    );
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(config.endpoint.clone())
        .region(Region::new(config.region.clone()))
        .credentials_provider(creds)
        .force_path_style(config.path_style)
        // Checksums travel as the client sent them; the proxy adds none.
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
        .build();
    s3s_aws::Proxy::from(aws_sdk_s3::Client::from_conf(conf))
}
