//! The S3 back end serves what the filesystem store serves. Two servers in
//! this process on loopback: one on the fs store, and a gateway whose store
//! is the first one, reached through aws-sdk-s3 (`[storage] kind = "s3"`).
//! The same aws-sdk-s3 session of every operation the server serves
//! (`hipobj_store::operations::OPERATIONS`) runs against each,
//! in a bucket of its own, and the two must answer alike: the fs store
//! with no `501 NotImplemented`, the gateway as the fs store did.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketVersioningStatus, CompletedMultipartUpload, CompletedPart, Delete, ObjectAttributes,
    ObjectIdentifier, VersioningConfiguration,
};
use hipobj_server::config::{RemoteConfig, StorageConfig};
use hipobj_store::operations::OPERATIONS;

/// What one operation answered: a summary of its result that does not
/// depend on which server gave it, or its HTTP status and S3 code.
type Answer = Result<String, String>;

#[derive(Default)]
struct Answers(BTreeMap<&'static str, Answer>);

impl Answers {
    /// Notes `op`'s answer, summarised by `summary`; the output, for the
    /// steps that build on it.
    fn note<T, E>(
        &mut self,
        op: &'static str,
        r: Result<T, SdkError<E, HttpResponse>>,
        summary: impl FnOnce(&T) -> String,
    ) -> Option<T>
    where
        E: ProvideErrorMetadata,
    {
        let (answer, out) = match r {
            Ok(t) => (Ok(summary(&t)), Some(t)),
            Err(e) => {
                let status = e.raw_response().map_or(0, |r| r.status().as_u16());
                (
                    Err(format!("HTTP {status} {}", e.code().unwrap_or("(no code)"))),
                    None,
                )
            }
        };
        assert!(self.0.insert(op, answer).is_none(), "{op} noted twice");
        out
    }
}

fn keys<'a>(k: impl IntoIterator<Item = Option<&'a str>>) -> String {
    k.into_iter()
        .map(|k| k.unwrap_or("?"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Every operation of `OPERATIONS`, through `c`, in bucket `b`.
async fn session(c: &aws_sdk_s3::Client, b: &str) -> Answers {
    let mut a = Answers::default();
    a.note("create_bucket", c.create_bucket().bucket(b).send().await, |_| {
        "created".into()
    });
    a.note("head_bucket", c.head_bucket().bucket(b).send().await, |_| {
        "exists".into()
    });
    a.note("list_buckets", c.list_buckets().send().await, |o| {
        format!(
            "own bucket listed: {}",
            o.buckets().iter().any(|x| x.name() == Some(b))
        )
    });
    a.note(
        "get_bucket_location",
        c.get_bucket_location().bucket(b).send().await,
        |o| format!("{:?}", o.location_constraint().map(|l| l.as_str())),
    );
    {
        use aws_sdk_s3::types::{
            ServerSideEncryption, ServerSideEncryptionByDefault, ServerSideEncryptionConfiguration,
            ServerSideEncryptionRule,
        };
        let rule = ServerSideEncryptionRule::builder()
            .apply_server_side_encryption_by_default(
                ServerSideEncryptionByDefault::builder()
                    .sse_algorithm(ServerSideEncryption::Aes256)
                    .build()
                    .unwrap(),
            )
            .build();
        let config = ServerSideEncryptionConfiguration::builder()
            .rules(rule)
            .build()
            .unwrap();
        let put = c
            .put_bucket_encryption()
            .bucket(b)
            .server_side_encryption_configuration(config)
            .send()
            .await;
        a.note("put_bucket_encryption", put, |_| "set".into());
        let got = c.get_bucket_encryption().bucket(b).send().await;
        a.note("get_bucket_encryption", got, |o| {
            let rules = o.server_side_encryption_configuration().map(|c| c.rules());
            format!(
                "{:?}",
                rules.and_then(|r| r.first()).and_then(|r| r
                    .apply_server_side_encryption_by_default()
                    .map(|d| d.sse_algorithm().as_str().to_owned()))
            )
        });
        let del = c.delete_bucket_encryption().bucket(b).send().await;
        a.note("delete_bucket_encryption", del, |_| "cleared".into());
    }
    {
        use aws_sdk_s3::types::PublicAccessBlockConfiguration;
        let config = PublicAccessBlockConfiguration::builder()
            .block_public_acls(true)
            .ignore_public_acls(false)
            .build();
        let put = c
            .put_public_access_block()
            .bucket(b)
            .public_access_block_configuration(config)
            .send()
            .await;
        a.note("put_public_access_block", put, |_| "set".into());
        let got = c.get_public_access_block().bucket(b).send().await;
        a.note("get_public_access_block", got, |o| {
            let c = o.public_access_block_configuration();
            format!("{:?}", c.map(|c| (c.block_public_acls(), c.ignore_public_acls())))
        });
        let del = c.delete_public_access_block().bucket(b).send().await;
        a.note("delete_public_access_block", del, |_| "cleared".into());
    }
    let body = || ByteStream::from_static(b"hello, gateway");
    let put = c.put_object().bucket(b).key("k1").body(body()).send().await;
    a.note("put_object", put, |o| format!("etag: {}", o.e_tag().is_some()));
    {
        use aws_sdk_s3::types::{BucketCannedAcl, ObjectCannedAcl};
        let perms = |g: &[aws_sdk_s3::types::Grant]| {
            g.iter()
                .map(|g| g.permission().map(|p| p.as_str().to_owned()).unwrap_or_default())
                .collect::<Vec<_>>()
                .join(",")
        };
        let put = c
            .put_bucket_acl()
            .bucket(b)
            .acl(BucketCannedAcl::Private)
            .send()
            .await;
        a.note("put_bucket_acl", put, |_| "private".into());
        let got = c.get_bucket_acl().bucket(b).send().await;
        a.note("get_bucket_acl", got, |o| perms(o.grants()));
        let put = c
            .put_object_acl()
            .bucket(b)
            .key("k1")
            .acl(ObjectCannedAcl::Private)
            .send()
            .await;
        a.note("put_object_acl", put, |_| "private".into());
        let got = c.get_object_acl().bucket(b).key("k1").send().await;
        a.note("get_object_acl", got, |o| perms(o.grants()));
    }
    let head = c.head_object().bucket(b).key("k1").send().await;
    a.note("head_object", head, |o| format!("{:?}", o.content_length()));
    let got = c.get_object().bucket(b).key("k1").send().await;
    if let Some(o) = a.note("get_object", got, |o| format!("{:?}", o.content_length())) {
        let bytes = o.body.collect().await.unwrap().into_bytes();
        assert_eq!(&bytes[..], b"hello, gateway");
    }
    let attrs = c
        .get_object_attributes()
        .bucket(b)
        .key("k1")
        .object_attributes(ObjectAttributes::ObjectSize)
        .object_attributes(ObjectAttributes::Etag)
        .send()
        .await;
    a.note("get_object_attributes", attrs, |o| {
        format!("size {:?}, etag: {}", o.object_size(), o.e_tag().is_some())
    });
    let copy = c
        .copy_object()
        .bucket(b)
        .key("k2")
        .copy_source(format!("{b}/k1"))
        .send()
        .await;
    a.note("copy_object", copy, |o| {
        format!("etag: {}", o.copy_object_result().is_some())
    });
    let v1 = c.list_objects().bucket(b).send().await;
    a.note("list_objects", v1, |o| keys(o.contents().iter().map(|x| x.key())));
    let v2 = c.list_objects_v2().bucket(b).send().await;
    a.note("list_objects_v2", v2, |o| {
        keys(o.contents().iter().map(|x| x.key()))
    });
    let vs = c.list_object_versions().bucket(b).send().await;
    a.note("list_object_versions", vs, |o| {
        keys(o.versions().iter().map(|x| x.key()))
    });
    multipart(c, b, &mut a).await;
    let del = c.delete_object().bucket(b).key("k2").send().await;
    a.note("delete_object", del, |_| "deleted".into());
    let ids = ["k1", "k3"].map(|k| ObjectIdentifier::builder().key(k).build().unwrap());
    let many = Delete::builder().set_objects(Some(ids.to_vec())).build().unwrap();
    let del = c.delete_objects().bucket(b).delete(many).send().await;
    a.note("delete_objects", del, |o| {
        keys(o.deleted().iter().map(|x| x.key()))
    });
    // Versioning last: the deletes above would otherwise leave markers.
    let vc = VersioningConfiguration::builder()
        .status(BucketVersioningStatus::Suspended)
        .build();
    let set = c
        .put_bucket_versioning()
        .bucket(b)
        .versioning_configuration(vc)
        .send()
        .await;
    a.note("put_bucket_versioning", set, |_| "set".into());
    let got = c.get_bucket_versioning().bucket(b).send().await;
    a.note("get_bucket_versioning", got, |o| format!("{:?}", o.status()));
    let del = c.delete_bucket().bucket(b).send().await;
    a.note("delete_bucket", del, |_| "deleted".into());
    a
}

/// The multipart operations: one upload completed (k3), one aborted.
async fn multipart(c: &aws_sdk_s3::Client, b: &str, a: &mut Answers) {
    let up = c.create_multipart_upload().bucket(b).key("k3").send().await;
    let id = a
        .note("create_multipart_upload", up, |o| {
            format!("id: {}", o.upload_id().is_some())
        })
        .and_then(|o| o.upload_id().map(str::to_owned))
        .unwrap_or_default();
    let part = c
        .upload_part()
        .bucket(b)
        .key("k3")
        .upload_id(&id)
        .part_number(1)
        .body(ByteStream::from_static(b"one part"))
        .send()
        .await;
    let etag = a
        .note("upload_part", part, |o| format!("etag: {}", o.e_tag().is_some()))
        .and_then(|o| o.e_tag().map(str::to_owned));
    let parts = c.list_parts().bucket(b).key("k3").upload_id(&id).send().await;
    a.note("list_parts", parts, |o| {
        format!(
            "{:?}",
            o.parts()
                .iter()
                .map(|p| (p.part_number(), p.size()))
                .collect::<Vec<_>>()
        )
    });
    let ups = c.list_multipart_uploads().bucket(b).send().await;
    a.note("list_multipart_uploads", ups, |o| {
        keys(o.uploads().iter().map(|u| u.key()))
    });
    let done = CompletedMultipartUpload::builder()
        .parts(CompletedPart::builder().part_number(1).set_e_tag(etag).build())
        .build();
    let fin = c
        .complete_multipart_upload()
        .bucket(b)
        .key("k3")
        .upload_id(&id)
        .multipart_upload(done)
        .send()
        .await;
    a.note("complete_multipart_upload", fin, |o| {
        format!("etag: {}", o.e_tag().is_some())
    });

    let up = c.create_multipart_upload().bucket(b).key("k4").send().await;
    let id = up.unwrap().upload_id().unwrap().to_owned();
    let copy = c
        .upload_part_copy()
        .bucket(b)
        .key("k4")
        .upload_id(&id)
        .part_number(1)
        .copy_source(format!("{b}/k1"))
        .send()
        .await;
    a.note("upload_part_copy", copy, |o| {
        format!("etag: {}", o.copy_part_result().is_some())
    });
    let abort = c
        .abort_multipart_upload()
        .bucket(b)
        .key("k4")
        .upload_id(&id)
        .send()
        .await;
    a.note("abort_multipart_upload", abort, |_| "aborted".into());
}

#[test]
fn the_s3_back_end_answers_every_operation_the_fs_store_does() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = rt
        .block_on(hipobj_server::Server::start(support::config(
            &dir.path().join("store"),
        )))
        .unwrap();
    let mut c = support::config(&dir.path().join("unused"));
    c.storage = StorageConfig::S3(RemoteConfig {
        endpoint: store.endpoint(),
        region: "us-east-1".into(),
        access_key: support::AK.into(),
        secret_key: support::SK.into(),
        path_style: true,
    });
    let gateway = rt.block_on(hipobj_server::Server::start(c)).unwrap();

    let fs = rt.block_on(session(&support::client(&store), "on-fs"));
    let remote = rt.block_on(session(&support::client(&gateway), "through-gateway"));

    // The session covers the list, no more and no less.
    let driven: Vec<&str> = fs.0.keys().copied().collect();
    let mut listed = OPERATIONS.to_vec();
    listed.sort_unstable();
    assert_eq!(
        driven, listed,
        "the session and the server's operation list differ"
    );
    for (op, answer) in &fs.0 {
        assert!(answer.is_ok(), "the fs store answered {op} with {answer:?}");
    }
    let differ: Vec<_> =
        fs.0.iter()
            .filter(|(op, answer)| remote.0.get(*op) != Some(answer))
            .map(|(op, answer)| format!("{op}: fs {answer:?}, S3 back end {:?}", remote.0.get(op)))
            .collect();
    assert!(
        differ.is_empty(),
        "the gateway answered otherwise:\n{}",
        differ.join("\n")
    );

    // An operation outside the list is 501 through either, by the same path.
    for h in [&store, &gateway] {
        let e = rt
            .block_on(support::client(h).get_bucket_tagging().bucket("any").send())
            .unwrap_err();
        assert_eq!(e.raw_response().map(|r| r.status().as_u16()), Some(501), "{e:?}");
    }
    for s in [gateway, store] {
        rt.block_on(s.shutdown());
    }
}
