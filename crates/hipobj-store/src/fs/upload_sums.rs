//! A multipart upload's checksum: the algorithm and type chosen at
//! CreateMultipartUpload, the value every part must then carry, and how
//! CompleteMultipartUpload makes the object's checksum of the parts'.
//!
//! As S3 has it since 2025:
//!
//! * COMPOSITE (SHA-1, SHA-256, CRC32, CRC32C): the algorithm over the
//!   concatenated binary checksums of the parts, then `-` and the number
//!   of parts, as the ETag of a multipart object is made of MD5s;
//! * FULL_OBJECT (CRC32, CRC32C, CRC64NVME): the CRC of the whole object's
//!   bytes, combined from the parts' CRCs and sizes without reading them.
//!
//! An algorithm without a type is COMPOSITE, except CRC64NVME, which is
//! only FULL_OBJECT.

use crc_fast::checksum_combine;
use s3s::dto;
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};
use serde::{Deserialize, Serialize};

use super::checksums::{Algorithm, Expected, Kind, Sums, algorithms_in};

/// What CreateMultipartUpload chose.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(super) struct UploadChecksum {
    pub(super) algorithm: Algorithm,
    pub(super) kind: Kind,
}

impl UploadChecksum {
    /// CreateMultipartUpload's `x-amz-checksum-algorithm` and
    /// `x-amz-checksum-type`: `None` if neither is given.
    pub(super) fn of(
        algorithm: Option<&dto::ChecksumAlgorithm>,
        kind: Option<&dto::ChecksumType>,
    ) -> S3Result<Option<Self>> {
        let kind = match kind.map(|k| k.as_str().to_ascii_uppercase()) {
            None => None,
            Some(k) if k == dto::ChecksumType::COMPOSITE => Some(Kind::Composite),
            Some(k) if k == dto::ChecksumType::FULL_OBJECT => Some(Kind::FullObject),
            Some(k) => {
                return Err(S3Error::with_message(
                    S3ErrorCode::InvalidRequest,
                    format!("unknown checksum type {k:?}"),
                ));
            }
        };
        let Some(algorithm) = algorithm else {
            return match kind {
                None => Ok(None),
                Some(_) => Err(s3_error!(
                    InvalidRequest,
                    "x-amz-checksum-type needs x-amz-checksum-algorithm"
                )),
            };
        };
        let algorithm = Algorithm::of(algorithm)?;
        let kind = kind.unwrap_or(match algorithm {
            Algorithm::Crc64nvme => Kind::FullObject,
            _ => Kind::Composite,
        });
        let allowed = match algorithm {
            Algorithm::Sha1 | Algorithm::Sha256 => kind == Kind::Composite,
            Algorithm::Crc64nvme => kind == Kind::FullObject,
            Algorithm::Crc32 | Algorithm::Crc32c => true,
        };
        if !allowed {
            return Err(S3Error::with_message(
                S3ErrorCode::InvalidRequest,
                format!(
                    "the {} checksum type cannot be used with the {} algorithm",
                    kind.to_dto().as_str(),
                    algorithm.name()
                ),
            ));
        }
        Ok(Some(Self { algorithm, kind }))
    }

    /// Makes an UploadPart compute this upload's algorithm, and refuses a
    /// part that names another one (S3's `InvalidRequest`).
    pub(super) fn require(self, expected: &mut Expected) -> S3Result<()> {
        let named = expected
            .algorithm
            .as_ref()
            .map(Algorithm::of)
            .transpose()?
            .into_iter()
            .chain(algorithms_in(&expected.sums));
        for a in named {
            if a != self.algorithm {
                return Err(S3Error::with_message(
                    S3ErrorCode::InvalidRequest,
                    format!(
                        "the upload's checksum algorithm is {}; this part sends {}",
                        self.algorithm.name(),
                        a.name()
                    ),
                ));
            }
        }
        expected.algorithm = Some(self.algorithm.to_dto());
        Ok(())
    }

    /// The object's checksum of its `parts` (each part's size and stored
    /// checksums, in order), checking the checksums CompleteMultipartUpload
    /// `listed` for them (`InvalidPart` for one that is not the part's) and
    /// the whole object's checksum it `claimed` (`BadDigest`). Returns the
    /// object's checksums and each part's value.
    pub(super) fn complete(
        self,
        parts: &[(i32, u64, &Sums)],
        listed: &[dto::CompletedPart],
        claimed: &Sums,
    ) -> S3Result<(Sums, Vec<String>)> {
        let mut values = Vec::with_capacity(parts.len());
        for ((n, _, sums), listed) in parts.iter().zip(listed) {
            let stored = self.algorithm.value(sums).ok_or_else(|| {
                S3Error::with_message(
                    S3ErrorCode::InvalidPart,
                    format!("part {n} has no {} checksum", self.algorithm.name()),
                )
            })?;
            let listed = Sums::from_dto(dto::Checksum {
                checksum_crc32: listed.checksum_crc32.clone(),
                checksum_crc32c: listed.checksum_crc32c.clone(),
                checksum_crc64nvme: listed.checksum_crc64nvme.clone(),
                checksum_sha1: listed.checksum_sha1.clone(),
                checksum_sha256: listed.checksum_sha256.clone(),
                ..Default::default()
            });
            for a in algorithms_in(&listed) {
                if a != self.algorithm || a.value(&listed) != Some(stored) {
                    return Err(S3Error::with_message(
                        S3ErrorCode::InvalidPart,
                        format!("part {n}: the listed {} checksum is not the part's", a.name()),
                    ));
                }
            }
            values.push(stored.clone());
        }
        let whole = self.combine(parts, &values)?;
        for a in algorithms_in(claimed) {
            if a != self.algorithm || a.value(claimed) != Some(&whole) {
                return Err(S3Error::with_message(
                    S3ErrorCode::BadDigest,
                    format!("x-amz-checksum-{} does not match the parts' ({whole})", a.name()),
                ));
            }
        }
        let mut sums = self.algorithm.only(whole);
        sums.composite = self.kind == Kind::Composite;
        Ok((sums, values))
    }

    fn combine(self, parts: &[(i32, u64, &Sums)], values: &[String]) -> S3Result<String> {
        let bad = |n: i32| {
            S3Error::with_message(
                S3ErrorCode::InternalError,
                format!("part {n}'s stored checksum is not base64"),
            )
        };
        match (self.kind, self.algorithm.crc()) {
            (Kind::FullObject, Some(crc)) => {
                let mut acc: Option<u64> = None;
                for ((n, size, _), v) in parts.iter().zip(values) {
                    let raw = base64_simd::STANDARD
                        .decode_to_vec(v.as_bytes())
                        .map_err(|_| bad(*n))?;
                    if raw.len() > 8 {
                        return Err(bad(*n));
                    }
                    let part = raw.iter().fold(0u64, |a, b| (a << 8) | u64::from(*b));
                    acc = Some(match acc {
                        None => part,
                        Some(a) => checksum_combine(crc, a, part, *size),
                    });
                }
                let acc = acc.unwrap_or(0);
                let bytes = acc.to_be_bytes();
                let width = if self.algorithm == Algorithm::Crc64nvme {
                    8
                } else {
                    4
                };
                Ok(base64_simd::STANDARD.encode_to_string(&bytes[8 - width..]))
            }
            (Kind::FullObject, None) => Err(s3_error!(
                InternalError,
                "a FULL_OBJECT checksum needs a CRC algorithm"
            )),
            (Kind::Composite, _) => {
                let mut h = self.algorithm.hasher();
                for ((n, _, _), v) in parts.iter().zip(values) {
                    let raw = base64_simd::STANDARD
                        .decode_to_vec(v.as_bytes())
                        .map_err(|_| bad(*n))?;
                    h.update(&raw);
                }
                let sums = Sums::from_dto(h.finalize());
                let v = self
                    .algorithm
                    .value(&sums)
                    .ok_or_else(|| s3_error!(InternalError, "the hasher gave no value"))?;
                Ok(format!("{v}-{}", parts.len()))
            }
        }
    }
}

/// CompleteMultipartUpload's `x-amz-checksum-type`, if given, must be the
/// one the upload was created with.
pub(super) fn check_type(chosen: Option<UploadChecksum>, given: Option<&dto::ChecksumType>) -> S3Result<()> {
    let Some(given) = given else { return Ok(()) };
    let upload = chosen.map(|c| c.kind.to_dto());
    match &upload {
        Some(k) if k.as_str().eq_ignore_ascii_case(given.as_str()) => Ok(()),
        _ => Err(S3Error::with_message(
            S3ErrorCode::InvalidRequest,
            format!(
                "x-amz-checksum-type {} is not the upload's ({})",
                given.as_str(),
                upload.as_ref().map_or("none", |k| k.as_str())
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code<T>(r: S3Result<T>) -> Option<S3ErrorCode> {
        r.err().map(|e| e.code().clone())
    }

    fn sums_of(alg: Algorithm, data: &[u8]) -> Sums {
        let mut h = alg.hasher();
        h.update(data);
        Sums::from_dto(h.finalize())
    }

    fn three_parts(alg: Algorithm, kind: Kind) -> String {
        let a = vec![b'A'; 5 << 20];
        let b = vec![b'B'; 5 << 20];
        let c = vec![b'C'; 5 << 20];
        let sums = [sums_of(alg, &a), sums_of(alg, &b), sums_of(alg, &c)];
        let parts: Vec<(i32, u64, &Sums)> = sums
            .iter()
            .enumerate()
            .map(|(i, s)| (i32::try_from(i + 1).unwrap_or(0), 5 << 20, s))
            .collect();
        let listed = vec![dto::CompletedPart::default(); 3];
        let up = UploadChecksum { algorithm: alg, kind };
        let (whole, _) = up.complete(&parts, &listed, &Sums::default()).expect("complete");
        alg.value(&whole).cloned().expect("a value")
    }

    // The values ceph/s3-tests gives for three 5 MiB parts of 'A', 'B'
    // and 'C' (computed by RGW, `unittest_rgw_cksum`).
    #[test]
    fn combined_checksums_match_another_implementation() {
        assert_eq!(three_parts(Algorithm::Crc32, Kind::FullObject), "WgDhBQ==");
        assert_eq!(three_parts(Algorithm::Crc32c, Kind::FullObject), "xU+Krw==");
        assert_eq!(
            three_parts(Algorithm::Crc64nvme, Kind::FullObject),
            "i+6LR0y3eFo="
        );
        assert_eq!(
            three_parts(Algorithm::Sha256, Kind::Composite),
            "uWBwpe1dxI4Vw8Gf0X9ynOdw/SS6VBzfWm9giiv1sf4=-3"
        );
        assert_eq!(
            three_parts(Algorithm::Sha1, Kind::Composite),
            "sizjvY4eud3MrcHdZM3cQ/ol39o=-3"
        );
    }

    #[test]
    fn full_object_crc_equals_the_crc_of_the_concatenation() {
        let whole: Vec<u8> = (0..(3u32 << 20) + 17).map(|i| (i * 31 % 251) as u8).collect();
        let cut = [0usize, 1 << 20, (2 << 20) + 5, whole.len()];
        for alg in [Algorithm::Crc32, Algorithm::Crc32c, Algorithm::Crc64nvme] {
            let sums: Vec<Sums> = cut.windows(2).map(|w| sums_of(alg, &whole[w[0]..w[1]])).collect();
            let parts: Vec<(i32, u64, &Sums)> = cut
                .windows(2)
                .zip(&sums)
                .enumerate()
                .map(|(i, (w, s))| (i32::try_from(i + 1).unwrap_or(0), (w[1] - w[0]) as u64, s))
                .collect();
            let up = UploadChecksum {
                algorithm: alg,
                kind: Kind::FullObject,
            };
            let listed = vec![dto::CompletedPart::default(); parts.len()];
            let (got, values) = up.complete(&parts, &listed, &Sums::default()).expect("complete");
            assert_eq!(alg.value(&got), alg.value(&sums_of(alg, &whole)), "{alg:?}");
            assert_eq!(values.len(), 3);
        }
    }

    #[test]
    fn a_wrong_listed_part_or_claimed_whole_is_refused() {
        let s = sums_of(Algorithm::Sha256, b"part");
        let parts = [(1, 4, &s)];
        let up = UploadChecksum {
            algorithm: Algorithm::Sha256,
            kind: Kind::Composite,
        };
        let wrong_part = [dto::CompletedPart {
            checksum_sha256: Some(sums_of(Algorithm::Sha256, b"other").sha256.unwrap_or_default()),
            ..Default::default()
        }];
        assert_eq!(
            code(up.complete(&parts, &wrong_part, &Sums::default())),
            Some(S3ErrorCode::InvalidPart)
        );
        let other_alg = [dto::CompletedPart {
            checksum_crc32: Some("AAAAAA==".into()),
            ..Default::default()
        }];
        assert_eq!(
            code(up.complete(&parts, &other_alg, &Sums::default())),
            Some(S3ErrorCode::InvalidPart)
        );
        let listed = [dto::CompletedPart::default()];
        let claimed = Algorithm::Sha256.only("bad".into());
        assert_eq!(
            code(up.complete(&parts, &listed, &claimed)),
            Some(S3ErrorCode::BadDigest)
        );
        let (ok, _) = up.complete(&parts, &listed, &Sums::default()).expect("complete");
        assert!(ok.composite);
        let (again, _) = up.complete(&parts, &listed, &ok).expect("claimed = computed");
        assert_eq!(again, ok);
    }

    #[test]
    fn types_and_algorithms_pair_as_s3_allows() {
        let alg = |s: &'static str| dto::ChecksumAlgorithm::from_static(s);
        let ty = |s: &'static str| dto::ChecksumType::from_static(s);
        let of = |a: Option<&dto::ChecksumAlgorithm>, t: Option<&dto::ChecksumType>| UploadChecksum::of(a, t);
        assert_eq!(of(None, None).expect("none"), None);
        assert!(of(None, Some(&ty("COMPOSITE"))).is_err());
        let sha = alg("SHA256");
        assert_eq!(
            of(Some(&sha), None).expect("sha").map(|u| u.kind),
            Some(Kind::Composite)
        );
        assert!(of(Some(&sha), Some(&ty("FULL_OBJECT"))).is_err());
        let nvme = alg("CRC64NVME");
        assert_eq!(
            of(Some(&nvme), None).expect("nvme").map(|u| u.kind),
            Some(Kind::FullObject)
        );
        assert!(of(Some(&nvme), Some(&ty("COMPOSITE"))).is_err());
        let crc = alg("CRC32");
        assert_eq!(
            of(Some(&crc), Some(&ty("FULL_OBJECT")))
                .expect("crc")
                .map(|u| u.kind),
            Some(Kind::FullObject)
        );
        assert!(of(Some(&alg("MD5")), None).is_err());
        let up = UploadChecksum {
            algorithm: Algorithm::Sha256,
            kind: Kind::Composite,
        };
        let mut e = Expected {
            sums: Algorithm::Crc32.only("AAAAAA==".into()),
            ..Default::default()
        };
        assert_eq!(code(up.require(&mut e)), Some(S3ErrorCode::InvalidRequest));
        let mut e = Expected::default();
        up.require(&mut e).expect("no checksum sent");
        assert_eq!(e.algorithm.map(|a| a.as_str().to_owned()), Some("SHA256".into()));
    }
}
