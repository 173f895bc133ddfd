//! Checksums of an object's bytes: what is stored ([`Sums`]) and what a
//! request says its body must hash to ([`Expected`]: Content-MD5, the
//! `x-amz-checksum-*` headers or trailers, the announced algorithm).

use crc_fast::CrcAlgorithm;
use s3s::checksum::ChecksumHasher;
use s3s::dto;
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};
use serde::{Deserialize, Serialize};

/// Checksums (base64, as S3 sends them) of an object's bytes.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(super) struct Sums {
    pub(super) crc32: Option<String>,
    pub(super) crc32c: Option<String>,
    pub(super) sha1: Option<String>,
    pub(super) sha256: Option<String>,
    pub(super) crc64nvme: Option<String>,
    /// The values are COMPOSITE checksums of a multipart object's parts
    /// (`upload_sums`), not of the object's bytes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) composite: bool,
}

impl Sums {
    pub(super) fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    pub(super) fn from_dto(c: dto::Checksum) -> Self {
        Self {
            crc32: c.checksum_crc32,
            crc32c: c.checksum_crc32c,
            sha1: c.checksum_sha1,
            sha256: c.checksum_sha256,
            crc64nvme: c.checksum_crc64nvme,
            composite: false,
        }
    }

    /// The checksums as GetObjectAttributes gives them.
    pub(super) fn to_dto(&self) -> dto::Checksum {
        dto::Checksum {
            checksum_crc32: self.crc32.clone(),
            checksum_crc32c: self.crc32c.clone(),
            checksum_sha1: self.sha1.clone(),
            checksum_sha256: self.sha256.clone(),
            checksum_crc64nvme: self.crc64nvme.clone(),
            checksum_type: checksum_type(self),
        }
    }
}

/// A checksum algorithm of S3's five.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum Algorithm {
    Crc32,
    Crc32c,
    Crc64nvme,
    Sha1,
    Sha256,
}

/// How the object's checksum is made of its parts'.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(super) enum Kind {
    Composite,
    FullObject,
}

impl Kind {
    pub(super) fn to_dto(self) -> dto::ChecksumType {
        dto::ChecksumType::from_static(match self {
            Kind::Composite => dto::ChecksumType::COMPOSITE,
            Kind::FullObject => dto::ChecksumType::FULL_OBJECT,
        })
    }
}

impl Algorithm {
    pub(super) fn of(a: &dto::ChecksumAlgorithm) -> S3Result<Self> {
        Ok(match a.as_str().to_ascii_uppercase().as_str() {
            dto::ChecksumAlgorithm::CRC32 => Self::Crc32,
            dto::ChecksumAlgorithm::CRC32C => Self::Crc32c,
            dto::ChecksumAlgorithm::CRC64NVME => Self::Crc64nvme,
            dto::ChecksumAlgorithm::SHA1 => Self::Sha1,
            dto::ChecksumAlgorithm::SHA256 => Self::Sha256,
            other => {
                return Err(S3Error::with_message(
                    S3ErrorCode::InvalidArgument,
                    format!("unknown checksum algorithm {other:?}"),
                ));
            }
        })
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Crc32 => "crc32",
            Self::Crc32c => "crc32c",
            Self::Crc64nvme => "crc64nvme",
            Self::Sha1 => "sha1",
            Self::Sha256 => "sha256",
        }
    }

    pub(super) fn to_dto(self) -> dto::ChecksumAlgorithm {
        dto::ChecksumAlgorithm::from_static(match self {
            Self::Crc32 => dto::ChecksumAlgorithm::CRC32,
            Self::Crc32c => dto::ChecksumAlgorithm::CRC32C,
            Self::Crc64nvme => dto::ChecksumAlgorithm::CRC64NVME,
            Self::Sha1 => dto::ChecksumAlgorithm::SHA1,
            Self::Sha256 => dto::ChecksumAlgorithm::SHA256,
        })
    }

    /// This algorithm's value in `sums`.
    pub(super) fn value(self, sums: &Sums) -> Option<&String> {
        match self {
            Self::Crc32 => sums.crc32.as_ref(),
            Self::Crc32c => sums.crc32c.as_ref(),
            Self::Crc64nvme => sums.crc64nvme.as_ref(),
            Self::Sha1 => sums.sha1.as_ref(),
            Self::Sha256 => sums.sha256.as_ref(),
        }
    }

    /// `sums` with only this algorithm's `value`.
    pub(super) fn only(self, value: String) -> Sums {
        let mut s = Sums::default();
        *match self {
            Self::Crc32 => &mut s.crc32,
            Self::Crc32c => &mut s.crc32c,
            Self::Crc64nvme => &mut s.crc64nvme,
            Self::Sha1 => &mut s.sha1,
            Self::Sha256 => &mut s.sha256,
        } = Some(value);
        s
    }

    /// A hasher computing this algorithm.
    pub(super) fn hasher(self) -> ChecksumHasher {
        let mut h = ChecksumHasher::default();
        match self {
            Self::Crc32 => h.crc32 = Some(Default::default()),
            Self::Crc32c => h.crc32c = Some(Default::default()),
            Self::Crc64nvme => h.crc64nvme = Some(Default::default()),
            Self::Sha1 => h.sha1 = Some(Default::default()),
            Self::Sha256 => h.sha256 = Some(Default::default()),
        }
        h
    }

    pub(super) fn crc(self) -> Option<CrcAlgorithm> {
        match self {
            Self::Crc32 => Some(CrcAlgorithm::Crc32IsoHdlc),
            Self::Crc32c => Some(CrcAlgorithm::Crc32Iscsi),
            Self::Crc64nvme => Some(CrcAlgorithm::Crc64Nvme),
            Self::Sha1 | Self::Sha256 => None,
        }
    }
}

/// The algorithms whose values `sums` holds, in S3's order.
pub(super) fn algorithms_in(sums: &Sums) -> impl Iterator<Item = Algorithm> + '_ {
    [
        Algorithm::Crc32,
        Algorithm::Crc32c,
        Algorithm::Crc64nvme,
        Algorithm::Sha1,
        Algorithm::Sha256,
    ]
    .into_iter()
    .filter(|a| a.value(sums).is_some())
}

/// The object's ChecksumType, for an object with checksums.
pub(super) fn checksum_type(sums: &Sums) -> Option<dto::ChecksumType> {
    (!sums.is_empty()).then(|| {
        if sums.composite {
            Kind::Composite
        } else {
            Kind::FullObject
        }
        .to_dto()
    })
}

/// The checksums of a multipart object's part whose stored `value` is of
/// the algorithm of the object's `sums`, reported with the object's type.
pub(super) fn of_part(object: &Sums, value: &str) -> Sums {
    let Some(a) = algorithms_in(object).next() else {
        return Sums::default();
    };
    let mut s = a.only(value.to_owned());
    s.composite = object.composite;
    s
}

/// The `x-amz-checksum-*` values of a PutObject, UploadPart or
/// CompleteMultipartUpload input (types with the same fields).
macro_rules! sums_of {
    ($input:ident) => {
        $crate::fs::checksums::Sums {
            crc32: $input.checksum_crc32,
            crc32c: $input.checksum_crc32c,
            sha1: $input.checksum_sha1,
            sha256: $input.checksum_sha256,
            crc64nvme: $input.checksum_crc64nvme,
            composite: false,
        }
    };
}

pub(super) use sums_of;

/// What a PutObject or UploadPart request says its body must be: its
/// Content-MD5, its `x-amz-checksum-*` values, and the checksum algorithm
/// (the two inputs are different types with the same fields).
macro_rules! expected_of {
    ($input:ident, $req:ident) => {
        $crate::fs::checksums::Expected {
            content_md5: $input.content_md5.clone(),
            sums: $crate::fs::checksums::sums_of!($input),
            algorithm: $input
                .checksum_algorithm
                .or_else(|| $crate::fs::checksums::sdk_algorithm(&$req.headers)),
        }
    };
}

pub(super) use expected_of;

/// What a request says the bytes must hash to.
#[derive(Debug, Default)]
pub(super) struct Expected {
    pub(super) content_md5: Option<String>,
    pub(super) sums: Sums,
    pub(super) algorithm: Option<dto::ChecksumAlgorithm>,
}

impl Expected {
    pub(super) fn hasher(&self) -> S3Result<s3s::checksum::ChecksumHasher> {
        let mut h = s3s::checksum::ChecksumHasher::default();
        let s = &self.sums;
        if s.crc32.is_some() {
            h.crc32 = Some(Default::default());
        }
        if s.crc32c.is_some() {
            h.crc32c = Some(Default::default());
        }
        if s.sha1.is_some() {
            h.sha1 = Some(Default::default());
        }
        if s.sha256.is_some() {
            h.sha256 = Some(Default::default());
        }
        if s.crc64nvme.is_some() {
            h.crc64nvme = Some(Default::default());
        }
        if let Some(alg) = &self.algorithm {
            match alg.as_str() {
                dto::ChecksumAlgorithm::CRC32 => h.crc32 = Some(Default::default()),
                dto::ChecksumAlgorithm::CRC32C => h.crc32c = Some(Default::default()),
                dto::ChecksumAlgorithm::SHA1 => h.sha1 = Some(Default::default()),
                dto::ChecksumAlgorithm::SHA256 => h.sha256 = Some(Default::default()),
                dto::ChecksumAlgorithm::CRC64NVME => h.crc64nvme = Some(Default::default()),
                other => {
                    return Err(S3Error::with_message(
                        S3ErrorCode::InvalidArgument,
                        format!("unknown checksum algorithm {other:?}"),
                    ));
                }
            }
        }
        Ok(h)
    }

    /// Adds checksums that arrived as trailers of an aws-chunked body.
    pub(super) fn add_trailers(&mut self, trailers: Option<s3s::TrailingHeaders>) -> S3Result<()> {
        let Some(map) = trailers.and_then(|t| t.take()) else {
            return Ok(());
        };
        let get = |name: &str| -> S3Result<Option<String>> {
            map.get(name)
                .map(|v| {
                    v.to_str()
                        .map(str::to_owned)
                        .map_err(|_| s3_error!(InvalidArgument, "trailer {name} is not text"))
                })
                .transpose()
        };
        let s = &mut self.sums;
        s.crc32 = get("x-amz-checksum-crc32")?.or(s.crc32.take());
        s.crc32c = get("x-amz-checksum-crc32c")?.or(s.crc32c.take());
        s.sha1 = get("x-amz-checksum-sha1")?.or(s.sha1.take());
        s.sha256 = get("x-amz-checksum-sha256")?.or(s.sha256.take());
        s.crc64nvme = get("x-amz-checksum-crc64nvme")?.or(s.crc64nvme.take());
        Ok(())
    }

    /// Compares what was computed with what the request said.
    pub(super) fn verify(&self, md5: &[u8; 16], computed: &Sums) -> S3Result<()> {
        if let Some(b64) = &self.content_md5 {
            let want = base64_simd::STANDARD
                .decode_to_vec(b64.as_bytes())
                .map_err(|_| s3_error!(InvalidDigest, "Content-MD5 is not base64"))?;
            if want.len() != 16 {
                return Err(s3_error!(InvalidDigest, "Content-MD5 is not 16 bytes of base64"));
            }
            if want.as_slice() != md5.as_slice() {
                return Err(s3_error!(
                    BadDigest,
                    "the Content-MD5 does not match the bytes received"
                ));
            }
        }
        let pairs = [
            ("crc32", &self.sums.crc32, &computed.crc32),
            ("crc32c", &self.sums.crc32c, &computed.crc32c),
            ("sha1", &self.sums.sha1, &computed.sha1),
            ("sha256", &self.sums.sha256, &computed.sha256),
            ("crc64nvme", &self.sums.crc64nvme, &computed.crc64nvme),
        ];
        for (name, want, got) in pairs {
            if let Some(want) = want
                && Some(want) != got.as_ref()
            {
                return Err(S3Error::with_message(
                    S3ErrorCode::BadDigest,
                    format!(
                        "x-amz-checksum-{name} {want} does not match the bytes received ({})",
                        got.as_deref().unwrap_or("none")
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The checksum algorithm an SDK names in `x-amz-sdk-checksum-algorithm`
/// (s3s does not map that header to the input).
pub(super) fn sdk_algorithm(headers: &http::HeaderMap) -> Option<dto::ChecksumAlgorithm> {
    headers
        .get("x-amz-sdk-checksum-algorithm")
        .and_then(|v| v.to_str().ok())
        .map(|v| dto::ChecksumAlgorithm::from(v.to_ascii_uppercase()))
}

/// Whether a read asked for the stored checksums
/// (`x-amz-checksum-mode: ENABLED`).
pub(super) fn checksum_enabled(m: Option<&dto::ChecksumMode>) -> bool {
    m.is_some_and(|m| m.as_str().eq_ignore_ascii_case(dto::ChecksumMode::ENABLED))
}
