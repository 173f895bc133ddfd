//! The filesystem store as an S3 service: only `impl S3 for FsStore`,
//! each operation in the terms of the store's other files.

use s3s::checksum::ChecksumHasher;
use s3s::dto::{self, ETag, StreamingBlob};
use s3s::{S3, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

use super::canned::{Access, Canned, requester};
use super::checksums::{Sums, checksum_enabled, checksum_type, expected_of, sums_of};
use super::conditions::{ReadConditions, WriteCondition, read_conditions};
use super::errors::{internal, io_kind};
use super::layout::Stored;
use super::listing::{BucketPage, ListArgs, encode_key};
use super::object::{Meta, attrs_of, described};
use super::sse::{Described, Mode, Protection, customer_headers};
use super::store::{FsStore, US_EAST_1};
use super::text::{hex, i64_of, now_ms, timestamp, unhex};
use super::upload_sums::{UploadChecksum, check_type};
use super::uploads::{Upload, check_part_number, completed, copy_source_range, object_sums, upload_entry};
use super::write::bucket_key_source;
use crate::{Requester, disk::nonblocking as ndisk, names::check_key};

#[async_trait::async_trait]
impl S3 for FsStore {
    async fn create_bucket(
        &self,
        req: S3Request<dto::CreateBucketInput>,
    ) -> S3Result<S3Response<dto::CreateBucketOutput>> {
        let dir = self.disk.bucket_dir(&req.input.bucket)?;
        let asked = req
            .input
            .create_bucket_configuration
            .as_ref()
            .and_then(|c| c.location_constraint.as_ref())
            .map(|l| l.as_str())
            .filter(|l| !l.is_empty());
        if let Some(asked) = asked
            && asked != self.limits.region
        {
            // As AWS: a bucket is made in the endpoint's region, never
            // silently somewhere other than where the client asked.
            return Err(S3Error::with_message(
                S3ErrorCode::IllegalLocationConstraintException,
                format!(
                    "The {asked} location constraint is incompatible with the region of this server ({})",
                    self.limits.region
                ),
            ));
        }
        let acl = Canned::parse(req.input.acl.as_ref().map(|a| a.as_str()), false)?;
        match ndisk::create_dir(&dir, self.durability()).await {
            Ok(()) => {
                // Nothing of an earlier bucket of this name is listed.
                self.index.forget(&req.input.bucket);
                self.set_bucket_acl(&req.input.bucket, acl.unwrap_or_default())
                    .await?;
                Ok(S3Response::new(dto::CreateBucketOutput {
                    location: Some(format!("/{}", req.input.bucket)),
                }))
            }
            // The key that asks owns the bucket (s3::owners refused any
            // other): as AWS in us-east-1, creating it again succeeds and
            // changes nothing; in any other region it is
            // BucketAlreadyOwnedByYou.
            Err(e) if io_kind(&e) == std::io::ErrorKind::AlreadyExists && self.limits.region != US_EAST_1 => {
                Err(s3_error!(BucketAlreadyOwnedByYou))
            }
            Err(e) if io_kind(&e) == std::io::ErrorKind::AlreadyExists => {
                Ok(S3Response::new(dto::CreateBucketOutput {
                    location: Some(format!("/{}", req.input.bucket)),
                }))
            }
            Err(e) => Err(internal("creating a bucket", e)),
        }
    }

    async fn delete_bucket(
        &self,
        req: S3Request<dto::DeleteBucketInput>,
    ) -> S3Result<S3Response<dto::DeleteBucketOutput>> {
        let dir = self.disk.existing_bucket(&req.input.bucket).await?;
        self.sweep_stale_uploads().await;
        self.drop_empty_folders(&dir).await?;
        if self.has_objects(&dir).await? {
            return Err(s3_error!(BucketNotEmpty));
        }
        if self.limits.refuse_delete_with_uploads && self.has_uploads(&req.input.bucket).await? {
            return Err(s3_error!(
                BucketNotEmpty,
                "The bucket you tried to delete has multipart uploads in progress: complete or abort them first"
            ));
        }
        // As AWS: uploads in progress go with their bucket (and their parts
        // with them), never left behind unlistable.
        self.abort_uploads_of(&req.input.bucket).await?;
        let removed = ndisk::remove_dir(&dir, self.durability()).await;
        // Whatever came of it, the bucket's next listing reads its folder.
        self.index.forget(&req.input.bucket);
        match removed {
            Ok(()) => {
                self.settings.forget(&self.disk, &req.input.bucket).await;
                Ok(S3Response::new(dto::DeleteBucketOutput {}))
            }
            Err(e) if io_kind(&e) == std::io::ErrorKind::DirectoryNotEmpty => Err(s3_error!(BucketNotEmpty)),
            Err(e) if io_kind(&e) == std::io::ErrorKind::NotFound => Err(s3_error!(NoSuchBucket)),
            Err(e) => Err(internal("deleting a bucket", e)),
        }
    }

    async fn head_bucket(
        &self,
        req: S3Request<dto::HeadBucketInput>,
    ) -> S3Result<S3Response<dto::HeadBucketOutput>> {
        self.disk.existing_bucket(&req.input.bucket).await?;
        Ok(S3Response::new(dto::HeadBucketOutput::default()))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<dto::GetBucketLocationInput>,
    ) -> S3Result<S3Response<dto::GetBucketLocationOutput>> {
        self.disk.existing_bucket(&req.input.bucket).await?;
        // AWS answers an empty LocationConstraint for us-east-1.
        let region = &self.limits.region;
        Ok(S3Response::new(dto::GetBucketLocationOutput {
            location_constraint: (region != US_EAST_1).then(|| region.clone().into()),
        }))
    }

    async fn put_bucket_encryption(
        &self,
        req: S3Request<dto::PutBucketEncryptionInput>,
    ) -> S3Result<S3Response<dto::PutBucketEncryptionOutput>> {
        let input = req.input;
        self.set_bucket_encryption(&input.bucket, &input.server_side_encryption_configuration)
            .await?;
        Ok(S3Response::new(dto::PutBucketEncryptionOutput {}))
    }

    async fn get_bucket_encryption(
        &self,
        req: S3Request<dto::GetBucketEncryptionInput>,
    ) -> S3Result<S3Response<dto::GetBucketEncryptionOutput>> {
        self.disk.existing_bucket(&req.input.bucket).await?;
        let Some(algorithm) = self.bucket_encryption(&req.input.bucket).await? else {
            return Err(s3_error!(ServerSideEncryptionConfigurationNotFoundError));
        };
        Ok(S3Response::new(dto::GetBucketEncryptionOutput {
            server_side_encryption_configuration: Some(dto::ServerSideEncryptionConfiguration {
                rules: vec![dto::ServerSideEncryptionRule {
                    apply_server_side_encryption_by_default: Some(dto::ServerSideEncryptionByDefault {
                        sse_algorithm: dto::ServerSideEncryption::from(algorithm.to_owned()),
                        kms_master_key_id: None,
                    }),
                    bucket_key_enabled: None,
                }],
            }),
        }))
    }

    async fn delete_bucket_encryption(
        &self,
        req: S3Request<dto::DeleteBucketEncryptionInput>,
    ) -> S3Result<S3Response<dto::DeleteBucketEncryptionOutput>> {
        self.disk.existing_bucket(&req.input.bucket).await?;
        self.clear_bucket_encryption(&req.input.bucket).await?;
        Ok(S3Response::new(dto::DeleteBucketEncryptionOutput {}))
    }

    async fn get_bucket_acl(
        &self,
        req: S3Request<dto::GetBucketAclInput>,
    ) -> S3Result<S3Response<dto::GetBucketAclOutput>> {
        let bucket = &req.input.bucket;
        self.disk.existing_bucket(bucket).await?;
        let owner = self.bucket_owner(bucket, &req.credentials).await;
        let acl = self.bucket_acl(bucket).await?;
        Ok(S3Response::new(dto::GetBucketAclOutput {
            grants: Some(acl.grants(&owner)),
            owner: Some(owner),
        }))
    }

    async fn put_bucket_acl(
        &self,
        req: S3Request<dto::PutBucketAclInput>,
    ) -> S3Result<S3Response<dto::PutBucketAclOutput>> {
        let input = req.input;
        self.disk.existing_bucket(&input.bucket).await?;
        let owner = self.bucket_owner(&input.bucket, &req.credentials).await;
        let acl = Canned::of_request(
            input.acl.as_ref().map(|a| a.as_str()),
            input.access_control_policy.as_ref(),
            (&owner, &|id| self.is_account(id)),
            false,
        )?;
        self.check_acl_allowed(&input.bucket, Some(acl)).await?;
        self.set_bucket_acl(&input.bucket, acl).await?;
        Ok(S3Response::new(dto::PutBucketAclOutput {}))
    }

    async fn get_object_acl(
        &self,
        req: S3Request<dto::GetObjectAclInput>,
    ) -> S3Result<S3Response<dto::GetObjectAclOutput>> {
        let input = req.input;
        let (st, _) = self
            .read_version_if(
                &input.bucket,
                &input.key,
                input.version_id.as_deref(),
                (ReadConditions::default(), &Requester::Owner),
                false,
            )
            .await?;
        let owner = self.bucket_owner(&input.bucket, &req.credentials).await;
        Ok(S3Response::new(dto::GetObjectAclOutput {
            grants: Some(st.meta.acl.unwrap_or_default().grants(&owner)),
            owner: Some(owner),
            ..Default::default()
        }))
    }

    async fn put_object_acl(
        &self,
        req: S3Request<dto::PutObjectAclInput>,
    ) -> S3Result<S3Response<dto::PutObjectAclOutput>> {
        let input = req.input;
        self.disk.object_path(&input.bucket, &input.key).await?;
        let owner = self.bucket_owner(&input.bucket, &req.credentials).await;
        let acl = Canned::of_request(
            input.acl.as_ref().map(|a| a.as_str()),
            input.access_control_policy.as_ref(),
            (&owner, &|id| self.is_account(id)),
            true,
        )?;
        self.check_acl_allowed(&input.bucket, Some(acl)).await?;
        self.edit_version(&input.bucket, &input.key, input.version_id.as_deref(), |m| {
            m.acl = Some(acl);
        })
        .await?;
        Ok(S3Response::new(dto::PutObjectAclOutput::default()))
    }

    async fn list_buckets(
        &self,
        req: S3Request<dto::ListBucketsInput>,
    ) -> S3Result<S3Response<dto::ListBucketsOutput>> {
        let who = req.credentials.as_ref().map(|c| c.access_key.as_str());
        let input = req.input;
        let page = BucketPage::of(&input)?;
        let (buckets, continuation_token) = self.bucket_page(&page, who).await?;
        Ok(S3Response::new(dto::ListBucketsOutput {
            buckets: Some(buckets),
            continuation_token,
            prefix: input.prefix,
            owner: Some(dto::Owner {
                display_name: Some("hipobj".into()),
                id: Some("hipobj".into()),
            }),
        }))
    }

    async fn put_object(
        &self,
        req: S3Request<dto::PutObjectInput>,
    ) -> S3Result<S3Response<dto::PutObjectOutput>> {
        let input = req.input;
        self.disk.object_path(&input.bucket, &input.key).await?;
        self.check_bucket_access(&input.bucket, &requester(&req.extensions), Access::Write)
            .await?;
        let acl = Canned::parse(input.acl.as_ref().map(|a| a.as_str()), true)?;
        self.check_acl_allowed(&input.bucket, acl).await?;
        let cond = WriteCondition::of(input.if_match.clone(), input.if_none_match.clone())?;
        let protection =
            Protection::of_write(input.server_side_encryption.as_ref(), customer_headers!(input))?;
        let protection = self.with_default(&input.bucket, protection).await?;
        let mut expected = expected_of!(input, req);
        let got = self
            .receive(
                input.body,
                input.content_length,
                &mut expected,
                req.trailing_headers,
                &protection,
            )
            .await?;
        let mut meta = Meta {
            key: input.key.clone(),
            size: got.size,
            etag: protection.etag(&got.md5),
            modified_ms: now_ms(),
            attrs: attrs_of!(input),
            sums: got.sums,
            encryption: got.encryption,
            acl,
            ..Default::default()
        };
        let version_id = self
            .store_object(&input.bucket, &input.key, got.tmp, &mut meta, cond)
            .await?;
        tracing::debug!(bucket = %input.bucket, key = %meta.key, size = meta.size, etag = %meta.etag, "stored");
        let enc = Described::of(meta.encryption.as_ref());
        Ok(S3Response::new(dto::PutObjectOutput {
            e_tag: Some(ETag::Strong(meta.etag)),
            version_id,
            size: Some(i64_of(meta.size)),
            checksum_type: checksum_type(&meta.sums),
            checksum_crc32: meta.sums.crc32,
            checksum_crc32c: meta.sums.crc32c,
            checksum_sha1: meta.sums.sha1,
            checksum_sha256: meta.sums.sha256,
            checksum_crc64nvme: meta.sums.crc64nvme,
            server_side_encryption: enc.server_side_encryption,
            sse_customer_algorithm: enc.sse_customer_algorithm,
            sse_customer_key_md5: enc.sse_customer_key_md5,
            ..Default::default()
        }))
    }
    async fn get_object(
        &self,
        req: S3Request<dto::GetObjectInput>,
    ) -> S3Result<S3Response<dto::GetObjectOutput>> {
        let input = req.input;
        let asked = Protection::of_customer(customer_headers!(input))?;
        let who = requester(&req.extensions);
        let (st, version_id) = self
            .read_version_if(
                &input.bucket,
                &input.key,
                input.version_id.as_deref(),
                (read_conditions!(input), &who),
                false,
            )
            .await?;
        // As S3: a part that is not there, before a key that is missing.
        let (range, parts_count) = st.meta.selection(input.range.as_ref(), input.part_number)?;
        let unlocked = st.unlock(&asked, &self.master)?;
        let checker = Stored::checker(&st.meta)?;
        let Stored { meta, file } = st;
        let size = meta.size;
        let (start, len) = range.as_ref().map_or((0, size), |r| (r.start, r.end - r.start));
        let (body, in_file) =
            Stored::body_of(file, (unlocked, checker), (start, len), &req.extensions).await?;
        let whole = len == size;
        // A Range or a partNumber selects bytes: 206 with Content-Range.
        let content_range = range.map(|r| format!("bytes {}-{}/{size}", r.start, r.end.saturating_sub(1)));
        let sums = meta.read_sums(
            input.part_number,
            whole,
            checksum_enabled(input.checksum_mode.as_ref()),
        );
        let mut resp = S3Response::new(described!(dto::GetObjectOutput, meta, sums, {
            body: Some(StreamingBlob::wrap(body)),
            content_length: Some(i64_of(len)),
            content_range,
            parts_count,
            version_id,
        }));
        if let Some(r) = in_file {
            resp.extensions.insert(r);
        }
        Ok(resp)
    }
    async fn head_object(
        &self,
        req: S3Request<dto::HeadObjectInput>,
    ) -> S3Result<S3Response<dto::HeadObjectOutput>> {
        let input = req.input;
        let asked = Protection::of_customer(customer_headers!(input))?;
        let who = requester(&req.extensions);
        let (st, version_id) = self
            .read_version_if(
                &input.bucket,
                &input.key,
                input.version_id.as_deref(),
                (read_conditions!(input), &who),
                false,
            )
            .await?;
        st.unlock(&asked, &self.master)?;
        let meta = st.meta;
        let sums = meta.read_sums(
            input.part_number,
            input.part_number.is_none() || meta.parts.len() <= 1,
            checksum_enabled(input.checksum_mode.as_ref()),
        );
        let parts_count = input
            .part_number
            .map(|_| i32::try_from(meta.parts.len().max(1)).unwrap_or(i32::MAX));
        let size = meta.size;
        Ok(S3Response::new(described!(dto::HeadObjectOutput, meta, sums, {
            content_length: Some(i64_of(size)),
            parts_count,
            version_id,
        })))
    }
    async fn get_object_attributes(
        &self,
        req: S3Request<dto::GetObjectAttributesInput>,
    ) -> S3Result<S3Response<dto::GetObjectAttributesOutput>> {
        let input = req.input;
        let asked = Protection::of_customer(customer_headers!(input))?;
        let (st, version_id) = self
            .read_version_if(
                &input.bucket,
                &input.key,
                input.version_id.as_deref(),
                (ReadConditions::default(), &Requester::Owner),
                false,
            )
            .await?;
        st.unlock(&asked, &self.master)?;
        let meta = st.meta;
        // SDKs send the list as one header, "ETag, Checksum, ...".
        let wants = |a: &str| {
            input
                .object_attributes
                .iter()
                .flat_map(|x| x.as_str().split(','))
                .any(|x| x.trim() == a)
        };
        let object_parts = if wants(dto::ObjectAttributes::OBJECT_PARTS) {
            meta.parts_page(input.part_number_marker, input.max_parts)?
        } else {
            None
        };
        let checksum = (wants(dto::ObjectAttributes::CHECKSUM) && meta.sums != Sums::default())
            .then(|| meta.sums.to_dto());
        Ok(S3Response::new(dto::GetObjectAttributesOutput {
            e_tag: wants(dto::ObjectAttributes::ETAG).then(|| ETag::Strong(meta.etag.clone())),
            object_size: wants(dto::ObjectAttributes::OBJECT_SIZE).then(|| i64_of(meta.size)),
            storage_class: wants(dto::ObjectAttributes::STORAGE_CLASS)
                .then(|| dto::StorageClass::from_static(dto::StorageClass::STANDARD)),
            last_modified: Some(timestamp(meta.modified_ms)),
            object_parts,
            checksum,
            version_id,
            ..Default::default()
        }))
    }

    async fn delete_object(
        &self,
        req: S3Request<dto::DeleteObjectInput>,
    ) -> S3Result<S3Response<dto::DeleteObjectOutput>> {
        let input = req.input;
        self.disk.object_path(&input.bucket, &input.key).await?;
        self.check_bucket_access(&input.bucket, &requester(&req.extensions), Access::Write)
            .await?;
        let gone = match input.version_id.as_deref() {
            Some(id) => self.delete_version(&input.bucket, &input.key, id).await?,
            None => self.delete_newest(&input.bucket, &input.key).await?,
        };
        Ok(S3Response::new(dto::DeleteObjectOutput {
            delete_marker: gone.marker.then_some(true),
            version_id: gone.version_id,
            ..Default::default()
        }))
    }
    async fn delete_objects(
        &self,
        req: S3Request<dto::DeleteObjectsInput>,
    ) -> S3Result<S3Response<dto::DeleteObjectsOutput>> {
        let input = req.input;
        self.disk.existing_bucket(&input.bucket).await?;
        self.check_bucket_access(&input.bucket, &requester(&req.extensions), Access::Write)
            .await?;
        if input.delete.objects.len() > 1000 {
            return Err(s3_error!(
                MalformedXML,
                "DeleteObjects takes at most 1000 keys per request"
            ));
        }
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for obj in input.delete.objects {
            let r = match obj.version_id.as_deref() {
                Some(id) => self.delete_version(&input.bucket, &obj.key, id).await,
                None => self.delete_newest(&input.bucket, &obj.key).await,
            };
            match r {
                // A marker made answers with its id; a version removed with
                // its own id, and whether it was a marker.
                Ok(gone) => deleted.push(dto::DeletedObject {
                    key: Some(obj.key),
                    delete_marker: gone.marker.then_some(true),
                    delete_marker_version_id: gone.version_id.clone().filter(|_| gone.marker),
                    version_id: gone.version_id.filter(|_| obj.version_id.is_some()),
                }),
                Err(e) => errors.push(dto::Error {
                    key: Some(obj.key),
                    code: Some(e.code().as_str().to_owned()),
                    message: e.message().map(str::to_owned),
                    ..Default::default()
                }),
            }
        }
        Ok(S3Response::new(dto::DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: (!errors.is_empty()).then_some(errors),
            ..Default::default()
        }))
    }
    async fn list_objects_v2(
        &self,
        req: S3Request<dto::ListObjectsV2Input>,
    ) -> S3Result<S3Response<dto::ListObjectsV2Output>> {
        let input = req.input;
        self.check_bucket_access(&input.bucket, &requester(&req.extensions), Access::Read)
            .await?;
        let after_token = match &input.continuation_token {
            Some(t) => Some(
                unhex(t)
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| s3_error!(InvalidArgument, "the continuation token is not valid"))?,
            ),
            None => None,
        };
        let args = ListArgs::of(
            input.prefix.as_deref(),
            input.delimiter,
            input.max_keys,
            input.encoding_type.as_ref(),
        )?;
        let after = after_token.as_deref().or(input.start_after.as_deref());
        let listing = self.list_page(&input.bucket, &args, after).await?;
        // The owner only when asked for (fetch-owner=true), as S3 does in v2.
        let owner = match input.fetch_owner {
            Some(true) => Some(self.bucket_owner(&input.bucket, &req.credentials).await),
            _ => None,
        };
        let contents = listing.contents(args.url, owner.as_ref());
        let common_prefixes = listing.common_prefixes(args.url);
        let count = contents.len() + common_prefixes.as_ref().map_or(0, Vec::len);
        Ok(S3Response::new(dto::ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: args.prefix_out(),
            delimiter: args.delimiter_out(),
            max_keys: args.max_keys_out(),
            key_count: Some(i32::try_from(count).unwrap_or(i32::MAX)),
            is_truncated: Some(listing.truncated),
            continuation_token: input.continuation_token,
            next_continuation_token: listing.next.as_deref().map(|k| hex(k.as_bytes())),
            start_after: input.start_after,
            encoding_type: input.encoding_type,
            contents: Some(contents),
            common_prefixes,
            ..Default::default()
        }))
    }

    async fn list_objects(
        &self,
        req: S3Request<dto::ListObjectsInput>,
    ) -> S3Result<S3Response<dto::ListObjectsOutput>> {
        let input = req.input;
        self.check_bucket_access(&input.bucket, &requester(&req.extensions), Access::Read)
            .await?;
        let args = ListArgs::of(
            input.prefix.as_deref(),
            input.delimiter,
            input.max_keys,
            input.encoding_type.as_ref(),
        )?;
        let marker = input.marker.filter(|m| !m.is_empty());
        let listing = self.list_page(&input.bucket, &args, marker.as_deref()).await?;
        // v1 always names each object's owner, as S3 does.
        let owner = self.bucket_owner(&input.bucket, &req.credentials).await;
        let url = args.url;
        Ok(S3Response::new(dto::ListObjectsOutput {
            name: Some(input.bucket),
            prefix: args.prefix_out(),
            delimiter: args.delimiter_out(),
            // S3 always echoes the marker, empty when none was given.
            marker: args.marker_out(marker.as_deref()),
            max_keys: args.max_keys_out(),
            is_truncated: Some(listing.truncated),
            // S3 sends NextMarker only with a delimiter; without one the
            // client continues from the last key.
            next_marker: listing
                .next
                .as_deref()
                .filter(|_| args.delimiter.is_some())
                .map(|k| encode_key(k, url)),
            encoding_type: input.encoding_type,
            contents: Some(listing.contents(url, Some(&owner))),
            common_prefixes: listing.common_prefixes(url),
            ..Default::default()
        }))
    }

    async fn copy_object(
        &self,
        req: S3Request<dto::CopyObjectInput>,
    ) -> S3Result<S3Response<dto::CopyObjectOutput>> {
        let input = req.input;
        let (src_bucket, src_key, src_version) = bucket_key_source(&input.copy_source)?;
        let src = self.disk.object_path(src_bucket, src_key).await?;
        let dest = self.disk.object_path(&input.bucket, &input.key).await?;
        let replace = input
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == dto::MetadataDirective::REPLACE);
        let source_key = Protection::of_customer(customer_headers!(copy_source input))?;
        let protection =
            Protection::of_write(input.server_side_encryption.as_ref(), customer_headers!(input))?;
        let protection = self.with_default(&input.bucket, protection).await?;
        let (st, copy_source_version_id) = self
            .read_version_if(
                src_bucket,
                src_key,
                src_version,
                (read_conditions!(copy_source input), &Requester::Owner),
                true,
            )
            .await?;
        // As S3: a copy onto itself must change something (the metadata or
        // the encryption); copying an older version over its key is how S3
        // restores it.
        if src == dest
            && !replace
            && src_version.is_none()
            && !protection.encrypts()
            && st.meta.encryption.is_none()
        {
            return Err(s3_error!(
                InvalidRequest,
                "copying an object onto itself needs the REPLACE metadata directive"
            ));
        }
        let copy_acl = Canned::parse(input.acl.as_ref().map(|a| a.as_str()), true)?;
        self.check_acl_allowed(&input.bucket, copy_acl).await?;
        let unlocked = st.unlock(&source_key, &self.master)?;
        let source_etag = st.meta.etag.clone();
        let meta = st.meta.clone();
        let got = self
            .copy_range(
                (st, unlocked),
                (0, meta.size),
                ChecksumHasher::default(),
                "writing the copy",
                &protection,
            )
            .await?;
        let attrs = if replace { attrs_of!(input) } else { meta.attrs };
        // The source's ETag is the MD5 of its bytes unless it was made of
        // parts or under a client's key.
        let etag = if protection.encrypts() && !matches!(protection, Protection::Server) {
            protection.etag(&got.md5)
        } else if meta.parts.is_empty()
            && !matches!(meta.encryption.as_ref().map(|e| e.mode), Some(Mode::Customer))
        {
            source_etag
        } else {
            hex(&got.md5)
        };
        let mut new = Meta {
            key: input.key.clone(),
            size: meta.size,
            etag,
            modified_ms: now_ms(),
            attrs,
            sums: meta.sums,
            encryption: got.encryption,
            acl: copy_acl,
            ..Default::default()
        };
        let version_id = self
            .store_object(&input.bucket, &input.key, got.tmp, &mut new, WriteCondition::None)
            .await?;
        let enc = Described::of(new.encryption.as_ref());
        Ok(S3Response::new(dto::CopyObjectOutput {
            copy_object_result: Some(dto::CopyObjectResult {
                e_tag: Some(ETag::Strong(new.etag)),
                last_modified: Some(timestamp(new.modified_ms)),
                ..Default::default()
            }),
            copy_source_version_id,
            version_id,
            server_side_encryption: enc.server_side_encryption,
            sse_customer_algorithm: enc.sse_customer_algorithm,
            sse_customer_key_md5: enc.sse_customer_key_md5,
            ..Default::default()
        }))
    }
    async fn create_multipart_upload(
        &self,
        req: S3Request<dto::CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::CreateMultipartUploadOutput>> {
        let input = req.input;
        check_key(&input.key)?;
        self.disk.existing_bucket(&input.bucket).await?;
        let protection =
            Protection::of_write(input.server_side_encryption.as_ref(), customer_headers!(input))?;
        let protection = self.with_default(&input.bucket, protection).await?;
        let checksum = UploadChecksum::of(input.checksum_algorithm.as_ref(), input.checksum_type.as_ref())?;
        let upload_acl = Canned::parse(input.acl.as_ref().map(|a| a.as_str()), true)?;
        self.check_acl_allowed(&input.bucket, upload_acl).await?;
        self.sweep_stale_uploads().await;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let up = Upload {
            bucket: input.bucket.clone(),
            key: input.key.clone(),
            owner: req.credentials.map(|c| c.access_key),
            attrs: attrs_of!(input),
            initiated_ms: now_ms(),
            encryption: protection.upload_mode(),
            acl: upload_acl,
            checksum,
        };
        self.create_upload(&id, &up).await?;
        let enc = Described::of_protection(&protection);
        Ok(S3Response::new(dto::CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(id),
            checksum_algorithm: checksum.map(|c| c.algorithm.to_dto()),
            checksum_type: checksum.map(|c| c.kind.to_dto()),
            server_side_encryption: enc.server_side_encryption,
            sse_customer_algorithm: enc.sse_customer_algorithm,
            sse_customer_key_md5: enc.sse_customer_key_md5,
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<dto::UploadPartInput>,
    ) -> S3Result<S3Response<dto::UploadPartOutput>> {
        let input = req.input;
        check_key(&input.key)?;
        check_part_number(input.part_number)?;
        let owner = req.credentials.as_ref().map(|c| c.access_key.as_str());
        let (dir, up) = self
            .load_upload(&input.upload_id, &input.bucket, &input.key, owner)
            .await?;
        let protection = Protection::of_customer(customer_headers!(input))?;
        protection.check_part(up.encryption.as_ref())?;
        let protection = protection.for_part(up.encryption.as_ref());
        let mut expected = expected_of!(input, req);
        if let Some(c) = up.checksum {
            c.require(&mut expected)?;
        }
        let got = self
            .receive(
                input.body,
                input.content_length,
                &mut expected,
                req.trailing_headers,
                &protection,
            )
            .await?;
        let meta = Meta {
            size: got.size,
            etag: protection.etag(&got.md5),
            modified_ms: now_ms(),
            sums: got.sums,
            encryption: got.encryption,
            ..Meta::default()
        };
        self.store_part(got.tmp, &meta, &dir, input.part_number).await?;
        let enc = Described::of(meta.encryption.as_ref());
        Ok(S3Response::new(dto::UploadPartOutput {
            e_tag: Some(ETag::Strong(meta.etag)),
            checksum_crc32: meta.sums.crc32,
            checksum_crc32c: meta.sums.crc32c,
            checksum_sha1: meta.sums.sha1,
            checksum_sha256: meta.sums.sha256,
            checksum_crc64nvme: meta.sums.crc64nvme,
            server_side_encryption: enc.server_side_encryption,
            sse_customer_algorithm: enc.sse_customer_algorithm,
            sse_customer_key_md5: enc.sse_customer_key_md5,
            ..Default::default()
        }))
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<dto::UploadPartCopyInput>,
    ) -> S3Result<S3Response<dto::UploadPartCopyOutput>> {
        let input = req.input;
        check_key(&input.key)?;
        check_part_number(input.part_number)?;
        let (src_bucket, src_key, src_version) = bucket_key_source(&input.copy_source)?;
        let owner = req.credentials.as_ref().map(|c| c.access_key.as_str());
        let (dir, up) = self
            .load_upload(&input.upload_id, &input.bucket, &input.key, owner)
            .await?;
        let protection = Protection::of_customer(customer_headers!(input))?;
        protection.check_part(up.encryption.as_ref())?;
        let protection = protection.for_part(up.encryption.as_ref());
        let source_key = Protection::of_customer(customer_headers!(copy_source input))?;
        let (st, copy_source_version_id) = self
            .read_version_if(
                src_bucket,
                src_key,
                src_version,
                (read_conditions!(copy_source input), &Requester::Owner),
                true,
            )
            .await?;
        let unlocked = st.unlock(&source_key, &self.master)?;
        let range = match input.copy_source_range.as_deref() {
            None => (0, st.meta.size),
            Some(r) => copy_source_range(r, st.meta.size)?,
        };
        let hasher = up.checksum.map(|c| c.algorithm.hasher()).unwrap_or_default();
        let got = self
            .copy_range((st, unlocked), range, hasher, "writing the part", &protection)
            .await?;
        let part = Meta {
            size: got.size,
            etag: protection.etag(&got.md5),
            modified_ms: now_ms(),
            sums: got.sums,
            encryption: got.encryption,
            ..Meta::default()
        };
        self.store_part(got.tmp, &part, &dir, input.part_number).await?;
        let enc = Described::of(part.encryption.as_ref());
        Ok(S3Response::new(dto::UploadPartCopyOutput {
            copy_part_result: Some(dto::CopyPartResult {
                e_tag: Some(ETag::Strong(part.etag)),
                last_modified: Some(timestamp(part.modified_ms)),
                checksum_crc32: part.sums.crc32,
                checksum_crc32c: part.sums.crc32c,
                checksum_crc64nvme: part.sums.crc64nvme,
                checksum_sha1: part.sums.sha1,
                checksum_sha256: part.sums.sha256,
            }),
            server_side_encryption: enc.server_side_encryption,
            sse_customer_algorithm: enc.sse_customer_algorithm,
            sse_customer_key_md5: enc.sse_customer_key_md5,
            copy_source_version_id,
            ..Default::default()
        }))
    }

    async fn list_parts(
        &self,
        req: S3Request<dto::ListPartsInput>,
    ) -> S3Result<S3Response<dto::ListPartsOutput>> {
        let owner = req.credentials.as_ref().map(|c| c.access_key.as_str());
        Ok(S3Response::new(self.parts_page(req.input, owner).await?))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<dto::CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::CompleteMultipartUploadOutput>> {
        let input = req.input;
        let owner = req.credentials.as_ref().map(|c| c.access_key.as_str());
        let dest = self.disk.object_path(&input.bucket, &input.key).await?;
        let (dir, up) = match self
            .load_upload(&input.upload_id, &input.bucket, &input.key, owner)
            .await
        {
            Ok(u) => u,
            Err(e) if *e.code() == S3ErrorCode::NoSuchUpload => {
                // A retry whose first answer was lost gets that answer.
                return match Self::completed_by(&dest, &input.upload_id).await? {
                    Some(meta) => Ok(S3Response::new(completed(&input.bucket, &input.key, meta))),
                    None => Err(e),
                };
            }
            Err(e) => return Err(e),
        };
        let cond = WriteCondition::of(input.if_match.clone(), input.if_none_match.clone())?;
        // As S3 since 2024: completing an SSE-C upload takes its key too.
        Protection::of_customer(customer_headers!(input))?.check_part(up.encryption.as_ref())?;
        let wanted = input
            .multipart_upload
            .and_then(|m| m.parts)
            .filter(|p| !p.is_empty())
            .ok_or_else(|| s3_error!(MalformedXML, "the request lists no parts"))?;
        let chosen = self.chosen_parts(&dir, &wanted).await?;
        let claimed = sums_of!(input);
        check_type(up.checksum, input.checksum_type.as_ref())?;
        let (sums, part_sums) = object_sums(&up, &chosen, &wanted, &claimed)?;
        let entry = upload_entry(&input.upload_id, &up);
        let (tmp, mut meta) = self
            .assemble(&dir, &chosen, up, (&input.upload_id, sums, part_sums))
            .await?;
        let version_id = self
            .store_object(&input.bucket, &input.key, tmp, &mut meta, cond)
            .await?;
        if let Err(e) = self.remove_upload(&dir, entry).await {
            tracing::warn!("removing the finished upload {}: {e}", dir.display());
        }
        let enc = Described::of(meta.encryption.as_ref());
        let mut done = completed(&input.bucket, &input.key, meta);
        done.server_side_encryption = enc.server_side_encryption;
        done.version_id = version_id;
        let mut resp = S3Response::new(done);
        // s3s's output has no SSE-C fields; S3 sends them.
        for (name, value) in [
            (
                "x-amz-server-side-encryption-customer-algorithm",
                enc.sse_customer_algorithm,
            ),
            (
                "x-amz-server-side-encryption-customer-key-md5",
                enc.sse_customer_key_md5,
            ),
        ] {
            if let Some(v) = value.and_then(|v| http::HeaderValue::from_str(&v).ok()) {
                resp.headers.insert(name, v);
            }
        }
        Ok(resp)
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<dto::ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<dto::ListMultipartUploadsOutput>> {
        self.sweep_stale_uploads().await;
        Ok(S3Response::new(self.list_uploads(req.input).await?))
    }

    async fn list_object_versions(
        &self,
        req: S3Request<dto::ListObjectVersionsInput>,
    ) -> S3Result<S3Response<dto::ListObjectVersionsOutput>> {
        self.check_bucket_access(&req.input.bucket, &requester(&req.extensions), Access::Read)
            .await?;
        let owner = self.bucket_owner(&req.input.bucket, &req.credentials).await;
        Ok(S3Response::new(self.version_page(req.input, owner).await?))
    }

    async fn put_bucket_versioning(
        &self,
        req: S3Request<dto::PutBucketVersioningInput>,
    ) -> S3Result<S3Response<dto::PutBucketVersioningOutput>> {
        let input = req.input;
        self.set_versioning(&input.bucket, &input.versioning_configuration)
            .await?;
        Ok(S3Response::new(dto::PutBucketVersioningOutput {}))
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<dto::GetBucketVersioningInput>,
    ) -> S3Result<S3Response<dto::GetBucketVersioningOutput>> {
        Ok(S3Response::new(self.get_versioning(&req.input.bucket).await?))
    }
    async fn put_public_access_block(
        &self,
        req: S3Request<dto::PutPublicAccessBlockInput>,
    ) -> S3Result<S3Response<dto::PutPublicAccessBlockOutput>> {
        let input = req.input;
        self.set_public_access_block(&input.bucket, Some(&input.public_access_block_configuration))
            .await?;
        Ok(S3Response::new(dto::PutPublicAccessBlockOutput {}))
    }

    async fn get_public_access_block(
        &self,
        req: S3Request<dto::GetPublicAccessBlockInput>,
    ) -> S3Result<S3Response<dto::GetPublicAccessBlockOutput>> {
        let bucket = &req.input.bucket;
        self.disk.existing_bucket(bucket).await?;
        let Some(config) = self.public_access_block(bucket).await? else {
            let mut e = S3Error::with_message(
                S3ErrorCode::Custom("NoSuchPublicAccessBlockConfiguration".into()),
                "The public access block configuration was not found",
            );
            e.set_status_code(http::StatusCode::NOT_FOUND);
            return Err(e);
        };
        Ok(S3Response::new(dto::GetPublicAccessBlockOutput {
            public_access_block_configuration: Some(config),
        }))
    }

    async fn delete_public_access_block(
        &self,
        req: S3Request<dto::DeletePublicAccessBlockInput>,
    ) -> S3Result<S3Response<dto::DeletePublicAccessBlockOutput>> {
        self.set_public_access_block(&req.input.bucket, None).await?;
        Ok(S3Response::new(dto::DeletePublicAccessBlockOutput {}))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<dto::AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::AbortMultipartUploadOutput>> {
        let input = req.input;
        let owner = req.credentials.as_ref().map(|c| c.access_key.as_str());
        let (dir, up) = self
            .load_upload(&input.upload_id, &input.bucket, &input.key, owner)
            .await?;
        self.remove_upload(&dir, upload_entry(&input.upload_id, &up))
            .await
            .map_err(|e| internal("aborting an upload", e))?;
        Ok(S3Response::new(dto::AbortMultipartUploadOutput::default()))
    }
}
