//! Issue 39, finding 6: S3 errors as S3 writes them, read as clients read
//! them (aws-sdk-s3's parsed code, message and request id; the body with
//! quick-xml).
//!
//! * every error body has `<Code>`, a `<Message>` that is a sentence (the
//!   AWS CLI printed `Unknown` for a missing one), `<Resource>` and
//!   `<RequestId>`, the id also in `x-amz-request-id`; no message names the
//!   data directory or a secret;
//! * an unknown access key is `403 InvalidAccessKeyId`;
//! * a full disk is `507 InsufficientStorage`, with nothing of the write
//!   kept;
//! * an object stored without a Content-Type (PUT, or CopyObject with
//!   `REPLACE`) reads back as `binary/octet-stream`, S3's default;
//! * keys that start with `/` or hold `//` are stored, read, listed and
//!   deleted, and nothing lands outside the data directory.
#![allow(clippy::unwrap_used)]

mod support;

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::operation::RequestId;
use aws_sdk_s3::primitives::ByteStream;
use aws_smithy_runtime_api::http::Response as HttpResponse;
use support::{AK, SK, client, client_for, start};

/// An S3 error body's fields, as quick-xml reads them.
#[derive(Debug, Default)]
struct Body {
    code: String,
    message: Option<String>,
    resource: Option<String>,
    request_id: Option<String>,
}

fn parse(xml: &[u8]) -> Body {
    use quick_xml::events::Event;
    let mut r = quick_xml::Reader::from_reader(xml);
    let mut b = Body::default();
    let mut at = Vec::new();
    let mut buf = Vec::new();
    loop {
        match r.read_event_into(&mut buf).unwrap() {
            Event::Start(e) => at.push(String::from_utf8_lossy(e.name().as_ref()).into_owned()),
            Event::End(_) => {
                at.pop();
            }
            Event::Text(t) => {
                let text = t.decode().unwrap().into_owned();
                let text = quick_xml::escape::unescape(&text).unwrap().into_owned();
                match at.as_slice() {
                    [e, f] if e == "Error" && f == "Code" => b.code = text,
                    [e, f] if e == "Error" && f == "Message" => b.message = Some(text),
                    [e, f] if e == "Error" && f == "Resource" => b.resource = Some(text),
                    [e, f] if e == "Error" && f == "RequestId" => b.request_id = Some(text),
                    _ => {}
                }
            }
            Event::GeneralRef(g) => {
                // An entity (`&amp;`) splits the text: only messages hold them here.
                let name = String::from_utf8_lossy(&g).into_owned();
                if at.last().is_some_and(|f| f == "Message") {
                    let m = b.message.get_or_insert_default();
                    m.push_str(&quick_xml::escape::unescape(&format!("&{name};")).unwrap());
                }
            }
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    b
}

/// What a user relies on in an error: the code, a message that says
/// something (and nothing of `hidden`), the resource, and one request id
/// in the header and the body. Returns the message.
fn judge<E>(e: &SdkError<E, HttpResponse>, code: &str, resource: &str, hidden: &[&str]) -> String
where
    E: ProvideErrorMetadata + RequestId + std::fmt::Debug,
{
    let svc = e
        .as_service_error()
        .unwrap_or_else(|| panic!("not a service error: {e:?}"));
    assert_eq!(svc.code(), Some(code), "{e:?}");
    let message = svc
        .message()
        .unwrap_or_else(|| panic!("{code}: no message: {e:?}"));
    assert_sentence(code, message, hidden);
    let raw = e.raw_response().unwrap();
    let header = raw.headers().get("x-amz-request-id").map(str::to_owned);
    assert!(
        header.as_deref().is_some_and(|h| !h.is_empty()),
        "{code}: no x-amz-request-id"
    );
    assert_eq!(
        svc.request_id(),
        header.as_deref(),
        "{code}: the SDK's request id"
    );
    let body = parse(raw.body().bytes().unwrap());
    assert_eq!(body.code, code);
    assert_eq!(body.message.as_deref(), Some(message));
    assert_eq!(body.resource.as_deref(), Some(resource), "{code}: <Resource>");
    assert_eq!(
        body.request_id, header,
        "{code}: <RequestId> and x-amz-request-id differ"
    );
    message.to_owned()
}

fn assert_sentence(code: &str, message: &str, hidden: &[&str]) {
    assert!(
        message.len() > 15 && message.contains(' ') && message != "Unknown",
        "{code}: {message:?} is not a sentence"
    );
    for h in hidden {
        assert!(!message.contains(h), "{code}: {message:?} names {h:?}");
    }
}

/// A raw response's status, `x-amz-request-id` and body.
fn split(text: &str) -> (u16, Option<String>, Body) {
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let id = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("x-amz-request-id: ")
                .map(str::to_owned)
        })
        .map(|v| v.trim().to_ascii_uppercase());
    (status, id, parse(body.as_bytes()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_error_has_a_code_a_message_a_resource_and_a_request_id() {
    let (h, dir) = start(|c| {
        c.credentials.push(hipobj_server::config::AccessKey {
            access_key: "other".into(),
            secret_key: "other-secret".into(),
        });
    })
    .await;
    let data = dir.path().to_str().unwrap().to_owned();
    let hidden = [data.as_str(), SK, "other-secret", ".tmp"];
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    c.put_object()
        .bucket("bkt")
        .key("here")
        .body(ByteStream::from_static(b"0123456789"))
        .send()
        .await
        .unwrap();

    // The store's.
    let e = c
        .get_object()
        .bucket("bkt")
        .key("missing")
        .send()
        .await
        .unwrap_err();
    judge(&e, "NoSuchKey", "/bkt/missing", &hidden);
    let e = c.get_object().bucket("nobkt").key("k").send().await.unwrap_err();
    judge(&e, "NoSuchBucket", "/nobkt/k", &hidden);
    let e = c.delete_bucket().bucket("bkt").send().await.unwrap_err();
    judge(&e, "BucketNotEmpty", "/bkt/", &hidden); // (the SDK's path)
    let e = c
        .put_object()
        .bucket("bkt")
        .key("here")
        .if_none_match("*")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap_err();
    judge(&e, "PreconditionFailed", "/bkt/here", &hidden);
    let e = c
        .get_object()
        .bucket("bkt")
        .key("here")
        .range("bytes=100-200")
        .send()
        .await
        .unwrap_err();
    judge(&e, "InvalidRange", "/bkt/here", &hidden);
    let e = c
        .list_parts()
        .bucket("bkt")
        .key("here")
        .upload_id("0123456789abcdef0123456789abcdef")
        .send()
        .await
        .unwrap_err();
    judge(&e, "NoSuchUpload", "/bkt/here", &hidden);

    // Authentication's and the access policy's.
    let wrong = client_for(&h.endpoint(), AK, "not-the-secret");
    let e = wrong
        .get_object()
        .bucket("bkt")
        .key("here")
        .send()
        .await
        .unwrap_err();
    judge(&e, "SignatureDoesNotMatch", "/bkt/here", &hidden);
    let stranger = client_for(&h.endpoint(), "NOSUCHKEY", "whatever");
    let e = stranger.list_buckets().send().await.unwrap_err();
    judge(&e, "InvalidAccessKeyId", "/", &hidden);
    let other = client_for(&h.endpoint(), "other", "other-secret");
    let e = other
        .get_object()
        .bucket("bkt")
        .key("here")
        .send()
        .await
        .unwrap_err();
    judge(&e, "AccessDenied", "/bkt/here", &hidden);

    // s3s's own (CreateBucket with a body that is not XML).
    let (status, text) = support::raw(h.addr(), &signed_put("/newbkt", b"<nope", (AK, SK))).await;
    let (_, id, body) = split(&text);
    assert_eq!(status, 400, "{text}");
    assert_eq!(body.code, "MalformedXML", "{text}");
    assert_sentence(&body.code, body.message.as_deref().unwrap_or(""), &hidden);
    assert_eq!(body.resource.as_deref(), Some("/newbkt"));
    assert!(id.is_some() && body.request_id == id, "{text}");

    // The front door's own, before s3s: a CORS preflight, and a chunked
    // body without a length from an unknown key.
    let (status, text) = support::raw(
        h.addr(),
        "OPTIONS /bkt/here HTTP/1.1\r\nhost: x\r\norigin: http://a\r\naccess-control-request-method: GET\r\nconnection: close\r\n\r\n",
    )
    .await;
    let (_, id, body) = split(&text);
    assert_eq!((status, body.code.as_str()), (403, "AccessForbidden"), "{text}");
    assert_eq!(body.resource.as_deref(), Some("/bkt/here"));
    assert!(id.is_some() && body.request_id == id, "{text}");
    let s = support::sigv4::sign(
        "PUT",
        "/bkt/u",
        "127.0.0.1",
        "UNSIGNED-PAYLOAD",
        &[],
        ("STRANGER", "x"),
    );
    let head = s.head("PUT", "/bkt/u", &[("transfer-encoding", "chunked".into())]);
    let (status, text) = support::raw(h.addr(), &format!("{head}0\r\n\r\n")).await;
    let (_, id, body) = split(&text);
    assert_eq!(
        (status, body.code.as_str()),
        (403, "InvalidAccessKeyId"),
        "{text}"
    );
    assert_sentence(&body.code, body.message.as_deref().unwrap_or(""), &hidden);
    assert_eq!(body.resource.as_deref(), Some("/bkt/u"));
    assert!(id.is_some() && body.request_id == id, "{text}");
}

/// A PUT of `body` to `path` signed with `key` (and no Content-Type),
/// closing the connection after the answer.
fn signed_put(path: &str, body: &[u8], key: (&str, &str)) -> String {
    let s = support::sigv4::sign("PUT", path, "127.0.0.1", "UNSIGNED-PAYLOAD", &[], key);
    let head = s.head(
        "PUT",
        path,
        &[
            ("content-length", body.len().to_string()),
            ("connection", "close".into()),
        ],
    );
    format!("{head}{}", String::from_utf8_lossy(body))
}

/// Finding 6's unknown key: `403 InvalidAccessKeyId` (s3s says
/// `NotSignedUp`, which clients do not read as a bad key), for a signed
/// request and a presigned URL alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unknown_access_key_is_invalid_access_key_id() {
    use aws_sdk_s3::presigning::PresigningConfig;
    let (h, _dir) = start(|_| {}).await;
    client(&h).create_bucket().bucket("bkt").send().await.unwrap();
    let stranger = client_for(&h.endpoint(), "AKIDONTEXIST", "whatever");
    let e = stranger.head_bucket().bucket("bkt").send().await.unwrap_err();
    assert_eq!(e.raw_response().map(|r| r.status().as_u16()), Some(403));
    let e = stranger
        .get_object()
        .bucket("bkt")
        .key("k")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        e.as_service_error().and_then(|s| s.code()),
        Some("InvalidAccessKeyId")
    );
    assert_eq!(e.raw_response().map(|r| r.status().as_u16()), Some(403));
    let url = stranger
        .get_object()
        .bucket("bkt")
        .key("k")
        .presigned(PresigningConfig::expires_in(std::time::Duration::from_secs(60)).unwrap())
        .await
        .unwrap();
    let path = url.uri().strip_prefix(&h.endpoint()).unwrap().to_owned();
    let (status, text) = support::raw(
        h.addr(),
        &format!(
            "GET {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n",
            h.addr()
        ),
    )
    .await;
    let (_, _, body) = split(&text);
    assert_eq!(
        (status, body.code.as_str()),
        (403, "InvalidAccessKeyId"),
        "{text}"
    );
}

/// An object stored without a Content-Type reads back with S3's
/// `binary/octet-stream`: a PUT that sent none, and a CopyObject with
/// `x-amz-metadata-directive: REPLACE` that sent none (minio-py's copy),
/// where a plain copy keeps the source's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_object_without_a_content_type_is_binary_octet_stream() {
    use aws_sdk_s3::types::MetadataDirective;
    let (h, _dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    // A PUT by hand, so that nothing adds a Content-Type on the way.
    let (status, text) = support::raw(h.addr(), &signed_put("/bkt/plain", b"bytes", (AK, SK))).await;
    assert_eq!(status, 200, "{text}");
    let got = c.head_object().bucket("bkt").key("plain").send().await.unwrap();
    assert_eq!(
        got.content_type(),
        Some("binary/octet-stream"),
        "a PUT without Content-Type"
    );
    c.put_object()
        .bucket("bkt")
        .key("typed")
        .content_type("text/x")
        .body(ByteStream::from_static(b"t"))
        .send()
        .await
        .unwrap();
    c.copy_object()
        .bucket("bkt")
        .key("kept")
        .copy_source("bkt/typed")
        .send()
        .await
        .unwrap();
    let got = c.get_object().bucket("bkt").key("kept").send().await.unwrap();
    assert_eq!(
        got.content_type(),
        Some("text/x"),
        "a COPY keeps the source's type"
    );
    c.copy_object()
        .bucket("bkt")
        .key("replaced")
        .copy_source("bkt/typed")
        .metadata_directive(MetadataDirective::Replace)
        .metadata("k", "v")
        .send()
        .await
        .unwrap();
    let got = c.get_object().bucket("bkt").key("replaced").send().await.unwrap();
    assert_eq!(
        got.content_type(),
        Some("binary/octet-stream"),
        "a REPLACE without Content-Type"
    );
    assert_eq!(
        got.metadata().and_then(|m| m.get("k")).map(String::as_str),
        Some("v")
    );
}

/// Keys that start with `/`, or hold `//`, are keys like any other (S3
/// stores them); `.` and `..` segments stay refused; and whatever a key
/// says, nothing is written outside the data directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keys_that_start_with_a_slash_are_stored_listed_read_and_deleted() {
    let parent = tempfile::tempdir().unwrap();
    let data = parent.path().join("data");
    let h = hipobj_server::Server::start(support::config(&data))
        .await
        .unwrap();
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let keys = ["/", "//", "/etc/passwd", "a//b", "/x/", "///deep//er"];
    for (i, k) in keys.iter().enumerate() {
        c.put_object()
            .bucket("bkt")
            .key(*k)
            .body(ByteStream::from(format!("object {i}").into_bytes()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("PUT {k:?}: {e:?}"));
    }
    for (i, k) in keys.iter().enumerate() {
        let got = c.get_object().bucket("bkt").key(*k).send().await.unwrap();
        let bytes = got.body.collect().await.unwrap().into_bytes();
        assert_eq!(bytes, format!("object {i}").as_bytes(), "GET {k:?}");
    }
    // Copies from and to such keys.
    c.copy_object()
        .bucket("bkt")
        .key("/copy")
        .copy_source("bkt//etc/passwd")
        .send()
        .await
        .unwrap();
    let got = c.get_object().bucket("bkt").key("/copy").send().await.unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes(),
        "object 2".as_bytes()
    );

    let listed = c.list_objects_v2().bucket("bkt").send().await.unwrap();
    let mut names: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    names.sort_unstable();
    let mut want: Vec<&str> = keys.iter().copied().chain(["/copy"]).collect();
    want.sort_unstable();
    assert_eq!(names, want);
    let by_dir = c
        .list_objects_v2()
        .bucket("bkt")
        .delimiter("/")
        .send()
        .await
        .unwrap();
    let prefixes: Vec<&str> = by_dir
        .common_prefixes()
        .iter()
        .filter_map(|p| p.prefix())
        .collect();
    assert_eq!(prefixes, ["/", "a/"]);
    assert!(by_dir.contents().is_empty());
    let under_etc = c
        .list_objects_v2()
        .bucket("bkt")
        .prefix("/etc/")
        .send()
        .await
        .unwrap();
    let names: Vec<&str> = under_etc.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(names, ["/etc/passwd"]);

    for bad in ["/../x", "/./x", "a/../../b", "//.."] {
        let e = c
            .put_object()
            .bucket("bkt")
            .key(bad)
            .body(ByteStream::from_static(b"x"))
            .send()
            .await
            .unwrap_err();
        assert_eq!(support::code(&e), "InvalidArgument", "{bad:?}");
    }

    // Nothing beside the data directory, and every file in it is a store
    // file, never a path a key spelled.
    let beside: Vec<_> = std::fs::read_dir(parent.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(beside, [std::ffi::OsString::from("data")]);
    for f in support::files(&data) {
        let rel = f.strip_prefix(&data).unwrap().to_string_lossy().into_owned();
        assert!(
            !rel.contains("passwd") && !rel.contains("deep") && !rel.starts_with("bkt/x"),
            "{rel}"
        );
    }

    for k in keys.iter().chain(&["/copy"]) {
        c.delete_object().bucket("bkt").key(*k).send().await.unwrap();
        let e = c.head_object().bucket("bkt").key(*k).send().await.unwrap_err();
        assert_eq!(e.raw_response().map(|r| r.status().as_u16()), Some(404), "{k:?}");
    }
    let listed = c.list_objects_v2().bucket("bkt").send().await.unwrap();
    assert!(listed.contents().is_empty());
    c.delete_bucket().bucket("bkt").send().await.unwrap();
}

/// Finding 6's full disk: the server's data directory on a 1 MiB tmpfs of
/// its own mount namespace (`unshare`, which the test needs: root, or
/// user namespaces). A PUT that does not fit is `507 InsufficientStorage`
/// with a message, not a 500; nothing of it is kept (no object, no
/// temporary file); and once room is made the same PUT succeeds.
#[test]
fn a_full_disk_is_507_insufficient_storage_and_keeps_nothing() {
    use std::io::BufRead as _;
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let cfg = dir.path().join("server.toml");
    std::fs::write(
        &cfg,
        format!(
            "address = \"127.0.0.1:0\"\nmetrics_log_secs = 0\n\
             [[credentials]]\naccess_key = \"{AK}\"\nsecret_key = \"{SK}\"\n\
             [storage]\nkind = \"fs\"\ndata_dir = \"{}/data\"\n\
             [limits]\nfsync = false\n",
            mnt.display()
        ),
    )
    .unwrap();
    let root = rustix::process::geteuid().is_root();
    let ns = if root { "-m" } else { "-Urm" };
    let probe = Command::new("unshare").args([ns, "true"]).output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "this test needs `unshare {ns}` (util-linux) to mount a small tmpfs of its own"
    );
    let mut child = Command::new("unshare")
        .args([
            ns,
            "sh",
            "-c",
            "mount -t tmpfs -o size=1m hipobj-full \"$0\" && exec \"$1\" --config \"$2\"",
        ])
        .arg(&mnt)
        .arg(env!("CARGO_BIN_EXE_hipobj-server"))
        .arg(&cfg)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    // Killed however the test ends, so that no server outlives it.
    let child = Killed(child);
    let mut line = String::new();
    std::io::BufReader::new(out).read_line(&mut line).unwrap();
    // The server's view of the tmpfs, from outside its namespace.
    let data = std::path::PathBuf::from(format!("/proc/{}/root{}/data", child.0.id(), mnt.display()));
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("server said {line:?}"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let outcome = rt.block_on(async {
        let c = client_for(&format!("http://{addr}"), AK, SK);
        c.create_bucket().bucket("bkt").send().await.unwrap();
        let put = |key: &'static str, n: usize| {
            c.put_object()
                .bucket("bkt")
                .key(key)
                .body(ByteStream::from(vec![7u8; n]))
                .send()
        };
        put("first", 600 << 10).await.unwrap();
        let e = put("second", 800 << 10).await.unwrap_err();
        assert_eq!(e.raw_response().map(|r| r.status().as_u16()), Some(507), "{e:?}");
        let message = judge(
            &e,
            "InsufficientStorage",
            "/bkt/second",
            &[&mnt.to_string_lossy()],
        );
        // Nothing of it kept: no object, no temporary file.
        let listed = c.list_objects_v2().bucket("bkt").send().await.unwrap();
        let names: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
        assert_eq!(names, ["first"]);
        let tmp: Vec<_> = std::fs::read_dir(data.join(".tmp")).unwrap().collect();
        assert!(tmp.is_empty(), "left in .tmp: {tmp:?}");
        // Room made, the same PUT goes through.
        c.delete_object().bucket("bkt").key("first").send().await.unwrap();
        put("second", 800 << 10).await.unwrap();
        message
    });
    drop(child);
    println!("a full disk: 507 InsufficientStorage: {outcome}");
}

/// A child process killed and reaped when dropped.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
