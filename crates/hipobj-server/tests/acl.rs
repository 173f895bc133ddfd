//! Canned ACLs as an attacker meets them: a stranger with no key (public
//! access on, and off) and another signed key of the same server. Each may
//! do what the bucket's or object's ACL grants and nothing else: no private
//! object, no ETag through a 304, no existence of a key through a 404, no
//! ACL read or changed, and never RDMA without a signature.
#![allow(clippy::unwrap_used)]

mod support;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{BucketCannedAcl, ObjectCannedAcl};
use hipobj_server::config::AccessKey;
use support::{client, client_for, code, raw, start};

const OTHER: &str = "hipobj-other";
const OTHER_SK: &str = "hipobj-other-secret";

/// Gives the server a second key, `OTHER`, that owns none of the buckets.
fn add_other_key(c: &mut hipobj_server::Config) {
    c.credentials.push(AccessKey {
        access_key: OTHER.into(),
        secret_key: OTHER_SK.into(),
    });
}

fn unsigned(method: &str, path: &str, extra: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acls_open_exactly_what_they_grant() {
    let (h, _dir) = start(|c| {
        c.public_access = true;
        add_other_key(c);
    })
    .await;
    let owner = client(&h);
    let other = client_for(&h.endpoint(), OTHER, OTHER_SK);
    owner.create_bucket().bucket("priv").send().await.unwrap();
    owner
        .create_bucket()
        .bucket("pub")
        .acl(BucketCannedAcl::PublicRead)
        .send()
        .await
        .unwrap();
    owner
        .create_bucket()
        .bucket("drop")
        .acl(BucketCannedAcl::PublicReadWrite)
        .send()
        .await
        .unwrap();
    let put = |b: &'static str, k: &'static str, acl: Option<ObjectCannedAcl>| {
        owner
            .put_object()
            .bucket(b)
            .key(k)
            .set_acl(acl)
            .body(ByteStream::from_static(b"secret bytes"))
            .send()
    };
    put("priv", "private", None).await.unwrap();
    put("priv", "open", Some(ObjectCannedAcl::PublicRead))
        .await
        .unwrap();
    put("pub", "private", None).await.unwrap();
    put("pub", "signed", Some(ObjectCannedAcl::AuthenticatedRead))
        .await
        .unwrap();
    let etag = put("pub", "open", Some(ObjectCannedAcl::PublicRead))
        .await
        .unwrap()
        .e_tag
        .unwrap();

    // A stranger: public objects, public listings, nothing else.
    let a = h.addr();
    let get = |path: &str| {
        let req = unsigned("GET", path, "");
        async move { raw(a, &req).await }
    };
    let (st, body) = get("/priv/open").await;
    assert!(st == 200 && body.ends_with("secret bytes"), "{st}");
    assert_eq!(get("/pub/open").await.0, 200);
    for path in [
        "/priv/private",
        "/pub/private",
        "/pub/signed",
        "/priv?list-type=2",
        "/priv",
    ] {
        assert_eq!(get(path).await.0, 403, "a stranger read {path}");
    }
    let (st, listing) = get("/pub?list-type=2").await;
    assert!(st == 200 && listing.contains("<Key>private</Key>"), "{st}");
    // A key that does not exist is 403 where the stranger cannot list.
    assert_eq!(get("/priv/nothing-here").await.0, 403);
    assert_eq!(get("/pub/nothing-here").await.0, 404);
    // No ETag of a private object through a condition.
    let cond = format!("If-None-Match: {etag}\r\n");
    assert_eq!(raw(a, &unsigned("GET", "/pub/private", &cond)).await.0, 403);
    assert_eq!(raw(a, &unsigned("HEAD", "/pub/private", &cond)).await.0, 403);
    // No ACLs, no writes but where the bucket grants WRITE.
    for (m, path) in [
        ("GET", "/pub?acl"),
        ("GET", "/pub/open?acl"),
        ("PUT", "/pub/open?acl"),
        ("PUT", "/pub/new"),
        ("DELETE", "/pub/open"),
        ("PUT", "/priv/new"),
        ("POST", "/drop/new?uploads"),
    ] {
        let extra = if path.ends_with("?acl") && m == "PUT" {
            "x-amz-acl: public-read-write\r\n"
        } else {
            ""
        };
        assert_eq!(
            raw(a, &unsigned(m, path, extra)).await.0,
            403,
            "a stranger did {m} {path}"
        );
    }
    assert_eq!(raw(a, &unsigned("PUT", "/drop/new", "")).await.0, 200);
    // Never RDMA for a stranger, even on a public object.
    let token = format!("{}: 00\r\n", hipobj_proto::TOKEN_HEADER);
    let (st, body) = raw(a, &unsigned("GET", "/pub/open", &token)).await;
    assert!(st == 403 && body.contains("RDMA"), "{st}");

    // Another signed key: what the ACLs grant to signed requesters.
    let read = |b: &'static str, k: &'static str| other.get_object().bucket(b).key(k).send();
    assert!(read("pub", "open").await.is_ok());
    assert!(read("pub", "signed").await.is_ok());
    assert!(read("priv", "open").await.is_ok());
    for (b, k) in [("pub", "private"), ("priv", "private")] {
        let e = read(b, k).await.unwrap_err();
        assert_eq!(code(&e), "AccessDenied", "{b}/{k}");
    }
    let e = other.get_bucket_acl().bucket("pub").send().await.unwrap_err();
    assert_eq!(code(&e), "AccessDenied");
    let e = other
        .put_object_acl()
        .bucket("pub")
        .key("private")
        .acl(ObjectCannedAcl::PublicRead)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "AccessDenied");
    let e = other
        .copy_object()
        .bucket("drop")
        .key("stolen")
        .copy_source("pub/private")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "AccessDenied", "a copy out of a private object");
    assert!(other.list_objects_v2().bucket("priv").send().await.is_err());
    let e = other
        .put_object()
        .bucket("pub")
        .key("x")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "AccessDenied");
    other
        .put_object()
        .bucket("drop")
        .key("x")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap();

    // The owner sees the ACLs as S3 writes them.
    let acl = owner.get_bucket_acl().bucket("drop").send().await.unwrap();
    let perms: Vec<_> = acl
        .grants()
        .iter()
        .map(|g| g.permission().map(|p| p.as_str().to_owned()).unwrap_or_default())
        .collect();
    assert_eq!(perms, ["READ", "WRITE", "FULL_CONTROL"]);
    // Making an object private again closes it at once.
    owner
        .put_object_acl()
        .bucket("priv")
        .key("open")
        .acl(ObjectCannedAcl::Private)
        .send()
        .await
        .unwrap();
    assert_eq!(get("/priv/open").await.0, 403);
    let got = owner
        .get_object()
        .bucket("priv")
        .key("open")
        .send()
        .await
        .unwrap();
    assert_eq!(
        &got.body.collect().await.unwrap().into_bytes()[..],
        b"secret bytes"
    );
    h.shutdown().await;
}

/// A bucket's ACL and default encryption go with the bucket: the next
/// bucket of that name, whoever makes it, starts private and unencrypted
/// by default (a public ACL left behind would publish its new owner's
/// objects).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_buckets_acl_does_not_open_the_next_bucket_of_its_name() {
    let (h, _dir) = start(|c| {
        c.public_access = true;
        add_other_key(c);
    })
    .await;
    let owner = client(&h);
    let other = client_for(&h.endpoint(), OTHER, OTHER_SK);
    owner
        .create_bucket()
        .bucket("reused")
        .acl(BucketCannedAcl::PublicReadWrite)
        .send()
        .await
        .unwrap();
    assert_eq!(
        raw(h.addr(), &unsigned("GET", "/reused?list-type=2", "")).await.0,
        200
    );
    owner.delete_bucket().bucket("reused").send().await.unwrap();
    other.create_bucket().bucket("reused").send().await.unwrap();
    other
        .put_object()
        .bucket("reused")
        .key("mine")
        .body(ByteStream::from_static(b"private"))
        .send()
        .await
        .unwrap();
    for (m, path) in [
        ("GET", "/reused?list-type=2"),
        ("GET", "/reused/mine"),
        ("PUT", "/reused/x"),
    ] {
        assert_eq!(raw(h.addr(), &unsigned(m, path, "")).await.0, 403, "{m} {path}");
    }
    let acl = other.get_bucket_acl().bucket("reused").send().await.unwrap();
    assert_eq!(acl.grants().len(), 1, "{:?}", acl.grants());
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_public_access_a_stranger_reads_nothing() {
    let (h, _dir) = start(|_| {}).await;
    let owner = client(&h);
    owner
        .create_bucket()
        .bucket("pub")
        .acl(BucketCannedAcl::PublicRead)
        .send()
        .await
        .unwrap();
    owner
        .put_object()
        .bucket("pub")
        .key("open")
        .acl(ObjectCannedAcl::PublicRead)
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap();
    for path in ["/pub/open", "/pub?list-type=2"] {
        // (Unsigned: with public access off, refused before any ACL.)
        assert_eq!(raw(h.addr(), &unsigned("GET", path, "")).await.0, 403, "{path}");
    }
    h.shutdown().await;
}

/// A grant in an XML ACL names a user id or an e-mail address: one that
/// names no account of the server is refused as S3 refuses it (400), one
/// to another account is not implemented (501), and none of them changes
/// the bucket's ACL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grants_to_unknown_accounts_are_400_and_to_known_ones_501() {
    use aws_sdk_s3::types::{AccessControlPolicy, Grant, Grantee, Owner, Permission, Type};
    let (h, _dir) = start(|c| {
        add_other_key(c);
    })
    .await;
    let owner = client(&h);
    owner
        .create_bucket()
        .bucket("bkt")
        .acl(BucketCannedAcl::PublicRead)
        .send()
        .await
        .unwrap();
    let acl = owner.get_bucket_acl().bucket("bkt").send().await.unwrap();
    let me = acl.owner().cloned().unwrap_or_else(|| Owner::builder().build());
    let grant = |grantee: Grantee| {
        AccessControlPolicy::builder()
            .owner(me.clone())
            .grants(
                Grant::builder()
                    .grantee(grantee)
                    .permission(Permission::FullControl)
                    .build(),
            )
            .build()
    };
    let by_id = |id: &str| {
        Grantee::builder()
            .r#type(Type::CanonicalUser)
            .id(id)
            .build()
            .unwrap()
    };
    let by_mail = Grantee::builder()
        .r#type(Type::AmazonCustomerByEmail)
        .email_address("nobody@example.invalid")
        .build()
        .unwrap();
    for (grantee, want) in [
        (by_id("_foo"), "InvalidArgument"),
        (by_mail, "UnresolvableGrantByEmailAddress"),
        (by_id(OTHER), "NotImplemented"),
    ] {
        let e = owner
            .put_bucket_acl()
            .bucket("bkt")
            .access_control_policy(grant(grantee))
            .send()
            .await
            .unwrap_err();
        assert_eq!(code(&e), want);
    }
    let after = owner.get_bucket_acl().bucket("bkt").send().await.unwrap();
    assert_eq!(after.grants(), acl.grants(), "a refused ACL changed the bucket's");
    h.shutdown().await;
}

/// `x-amz-expected-bucket-owner` naming someone else is 403 for everyone,
/// even where the ACL would let the request in; naming the owner, the
/// request goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wrong_expected_bucket_owner_is_refused() {
    let (h, _dir) = start(|c| c.public_access = true).await;
    let owner = client(&h);
    owner
        .create_bucket()
        .bucket("drop")
        .acl(BucketCannedAcl::PublicReadWrite)
        .send()
        .await
        .unwrap();
    let me = support::AK;
    for who in ["someone-else", me] {
        let r = owner
            .put_object()
            .bucket("drop")
            .key("k")
            .expected_bucket_owner(who)
            .body(ByteStream::from_static(b"x"))
            .send()
            .await;
        assert_eq!(r.is_ok(), who == me, "owner's PUT naming {who}");
        let (status, text) = raw(
            h.addr(),
            &unsigned(
                "GET",
                "/drop?list-type=2",
                &format!("x-amz-expected-bucket-owner: {who}\r\n"),
            ),
        )
        .await;
        assert_eq!(
            status,
            if who == me { 200 } else { 403 },
            "stranger's list naming {who}: {text}"
        );
    }
    h.shutdown().await;
}

/// PublicAccessBlock, as the other key and a stranger meet it: with
/// `IgnorePublicAcls` the public bucket and object let neither in, with
/// `BlockPublicAcls` no public ACL can be set, and once the block is
/// deleted the ACLs count again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_public_access_block_shuts_public_acls() {
    use aws_sdk_s3::types::PublicAccessBlockConfiguration;
    let (h, _dir) = start(|c| {
        c.public_access = true;
        add_other_key(c);
    })
    .await;
    let owner = client(&h);
    let other = client_for(&h.endpoint(), OTHER, OTHER_SK);
    owner
        .create_bucket()
        .bucket("pub")
        .acl(BucketCannedAcl::PublicRead)
        .send()
        .await
        .unwrap();
    owner
        .put_object()
        .bucket("pub")
        .key("k")
        .acl(ObjectCannedAcl::PublicRead)
        .body(ByteStream::from_static(b"open"))
        .send()
        .await
        .unwrap();
    let reads = || async {
        let listed = other.list_objects_v2().bucket("pub").send().await.is_ok();
        let got = other.get_object().bucket("pub").key("k").send().await.is_ok();
        let (anon, _) = raw(h.addr(), &unsigned("GET", "/pub/k", "")).await;
        (listed, got, anon)
    };
    assert_eq!(reads().await, (true, true, 200));
    let e = owner
        .get_public_access_block()
        .bucket("pub")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "NoSuchPublicAccessBlockConfiguration");
    let block = |ignore: bool, block: bool| {
        PublicAccessBlockConfiguration::builder()
            .ignore_public_acls(ignore)
            .block_public_acls(block)
            .build()
    };
    let e = other
        .put_public_access_block()
        .bucket("pub")
        .public_access_block_configuration(block(false, false))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "AccessDenied", "another key set the owner's block");
    owner
        .put_public_access_block()
        .bucket("pub")
        .public_access_block_configuration(block(true, false))
        .send()
        .await
        .unwrap();
    assert_eq!(reads().await, (false, false, 403));
    owner
        .put_public_access_block()
        .bucket("pub")
        .public_access_block_configuration(block(false, true))
        .send()
        .await
        .unwrap();
    let got = owner
        .get_public_access_block()
        .bucket("pub")
        .send()
        .await
        .unwrap();
    let c = got.public_access_block_configuration().unwrap();
    assert_eq!(
        (c.ignore_public_acls(), c.block_public_acls()),
        (Some(false), Some(true))
    );
    let e = owner
        .put_bucket_acl()
        .bucket("pub")
        .acl(BucketCannedAcl::PublicReadWrite)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "AccessDenied");
    let e = owner
        .put_object()
        .bucket("pub")
        .key("k2")
        .acl(ObjectCannedAcl::PublicRead)
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "AccessDenied");
    owner
        .put_object()
        .bucket("pub")
        .key("k2")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap();
    // The ACLs set before the block still count: BlockPublicAcls alone
    // refuses new public ACLs, it does not ignore the old ones.
    assert_eq!(reads().await, (true, true, 200));
    owner
        .delete_public_access_block()
        .bucket("pub")
        .send()
        .await
        .unwrap();
    assert!(
        owner
            .get_public_access_block()
            .bucket("pub")
            .send()
            .await
            .is_err()
    );
    owner
        .put_bucket_acl()
        .bucket("pub")
        .acl(BucketCannedAcl::PublicReadWrite)
        .send()
        .await
        .unwrap();
    h.shutdown().await;
}
