//! Issue 37, finding 5: a bucket name freed and taken again must not carry
//! an hipobj-rc-v2 session across. PREPARE checks who owns the bucket;
//! if the bucket is then deleted and made again under the same name (by
//! another key, or by the same one), the session's READY is refused and
//! nothing moves: no byte of the new bucket's objects reaches the client's
//! buffer, and no byte of the client's lands in the new bucket.
//!
//! The real server on the soft NIC, two keys, buckets made through the
//! server (so their owner records exist), and a test client driving its
//! own QP as the upstream client does.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use hipobj_platform::fake::ClientQp;
use hipobj_platform::rc::{self, RcPath};
use hipobj_platform::vendor::{QpLimits, VendorProfile};
use hipobj_platform::{Gid, NoTopology, SendOp, SendWr, WorkCompletion};
use hipobj_proto::rc_v2::{
    self, Cookie, Direction, ObjectPath, PrepareRequest, PrepareResponse, Psn, Qpn, ReadyRequest, RemoteMr,
    Size,
};
use hipobj_proto::{Token, Transport};
use hipobj_server::config::AccessKey;
use hipobj_server::rdma::VerbsProvider;
use hipobj_server::rdma::sigv4;
use hipobj_server::{Handle, Server};
use hipobj_softroce::{SoftConfig, SoftVerbs};

const USER1: (&str, &str) = (support::AK, support::SK);
const USER2: (&str, &str) = ("tenant-two", "tenant-two-secret");
const COOKIE: u32 = 0x5eed_0037;
const SIZE: usize = 6000;

fn soft(name: &str) -> Arc<SoftVerbs> {
    Arc::new(SoftVerbs::new(SoftConfig {
        name: name.into(),
        ..SoftConfig::default()
    }))
}

async fn start(device: &str) -> (Handle, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut c = support::config(dir.path());
    c.credentials.push(AccessKey {
        access_key: USER2.0.into(),
        secret_key: USER2.1.into(),
    });
    c.rdma.enabled = true;
    c.rdma.device = Some(device.into());
    c.rdma.v2_staging_max = 16 << 10;
    let provider = VerbsProvider {
        verbs: soft(device),
        topology: Arc::new(NoTopology),
    };
    (Server::start_with(c, Some(provider)).await.unwrap(), dir)
}

/// One signed control request; the status and the whole response.
async fn control(
    h: &Handle,
    path: &str,
    headers: &[(&'static str, String)],
    key: (&str, &str),
) -> (u16, String) {
    control_at(h.addr(), path, headers, key).await
}

async fn control_at(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(&'static str, String)],
    key: (&str, &str),
) -> (u16, String) {
    let date = sigv4::amz_date_now();
    let mut all: Vec<(String, String)> = vec![
        ("host".into(), "127.0.0.1".into()),
        ("x-amz-date".into(), date.clone()),
    ];
    all.extend(headers.iter().map(|(n, v)| ((*n).to_owned(), v.clone())));
    let auth = sigv4::sign("POST", path, &all, key.0, key.1, &date);
    let mut req = format!("POST {path} HTTP/1.1\r\n");
    for (n, v) in &all {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str(&format!(
        "authorization: {auth}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    ));
    support::raw(addr, &req).await
}

/// Bytes from a seeded xorshift: no run of one seed's is found in
/// another's.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// User 1's client: a QP and a buffer on its own soft device, the buffer
/// filled with a mark that no object holds.
struct Client {
    c: ClientQp,
}

const MARK: u8 = 0xe7;

impl Client {
    fn new(name: &str) -> Self {
        let c = ClientQp::new(soft(name), name, 16 << 10);
        assert!(c.buf.write_at(0, &vec![MARK; 16 << 10]));
        Self { c }
    }

    fn token(&self) -> Token {
        Token {
            transport: Transport::Rc,
            qpn: self.c.qp.qp_num(),
            gid: self.c.sel.gid.0,
            rkey: 0,
            addr: 0,
            len: 0,
            port: self.c.sel.port,
            lid: 0,
        }
    }

    async fn prepare(&self, h: &Handle, op: Direction, bucket: &str, key: &str) -> PrepareResponse {
        let headers = PrepareRequest {
            op,
            target: ObjectPath::new(bucket, key).unwrap(),
            size: Size::new(SIZE as u64).unwrap(),
            offset: None,
            token: self.token(),
            psn: Psn::new(1).unwrap(),
            cookie: Cookie::new(COOKIE).unwrap(),
            client_mr: None,
            part: None,
        }
        .to_headers();
        let (code, resp) = control(h, rc_v2::PREPARE_PATH, &headers, USER1).await;
        assert_eq!(code, 200, "PREPARE: {resp}");
        let hs: Vec<(String, String)> = resp
            .lines()
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
            .filter_map(|l| {
                l.split_once(':')
                    .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            })
            .collect();
        let prepared =
            PrepareResponse::from_headers(hs.iter().map(|(n, v)| (n.as_str(), v.as_bytes()))).unwrap();
        self.connect(&prepared);
        prepared
    }

    /// The client's QP to RTS towards the session's, as a client does
    /// before READY.
    fn connect(&self, prepared: &PrepareResponse) {
        let ClientQp { qp, sel, device, .. } = &self.c;
        let attr = device.attr().unwrap();
        let port = device.query_port(sel.port).unwrap();
        rc::to_rts(
            qp.as_ref(),
            &RcPath {
                port: sel.port,
                sgid_index: sel.gid_index as u8,
                mtu: sel.mtu,
                dest_qpn: prepared.token.qpn,
                dgid: Gid(prepared.token.gid),
                rq_psn: prepared.psn.get(),
                sq_psn: 1,
                max_dest_rd_atomic: 1,
                max_rd_atomic: 1,
            },
            VendorProfile::Generic,
            &QpLimits::new(&attr, &port),
        )
        .unwrap();
    }

    fn ready(&self, prepared: &PrepareResponse) -> Vec<(&'static str, String)> {
        ReadyRequest {
            session: prepared.session,
            cookie: Cookie::new(COOKIE).unwrap(),
            client_mr: Some((
                RemoteMr {
                    addr: self.c.buf.addr(),
                    rkey: self.c.buf.mr().rkey(),
                },
                Qpn::new(self.c.qp.qp_num()).unwrap(),
            )),
        }
        .to_headers()
    }

    /// The PUT's one write: the first SIZE bytes of the buffer into the
    /// session's staging buffer.
    fn write(&self, prepared: &PrepareResponse) {
        let sge = self.c.buf.sge(0, SIZE as u32).unwrap();
        self.c
            .qp
            .post_send(&SendWr {
                wr_id: 7,
                op: SendOp::WriteWithImm {
                    remote_addr: prepared.token.addr,
                    rkey: prepared.token.rkey,
                    imm: COOKIE,
                },
                sg_list: &[sge],
                signaled: true,
            })
            .unwrap();
    }

    /// A completion at the client within `within`, if any.
    fn completion(&self, within: Duration) -> Option<WorkCompletion> {
        let deadline = Instant::now() + within;
        let mut wc = [WorkCompletion::EMPTY; 1];
        while Instant::now() < deadline {
            if self.c.cq.poll(&mut wc).unwrap() == 1 {
                return Some(wc[0]);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    fn buffer(&self) -> Vec<u8> {
        let mut got = vec![0u8; 16 << 10];
        assert!(self.c.buf.read_at(0, &mut got));
        got
    }
}

async fn put(s3: &aws_sdk_s3::Client, bucket: &str, key: &str, data: &[u8]) {
    s3.put_object()
        .bucket(bucket)
        .key(key)
        .body(data.to_vec().into())
        .send()
        .await
        .unwrap();
}

async fn delete_bucket(s3: &aws_sdk_s3::Client, bucket: &str, keys: &[&str]) {
    for k in keys {
        s3.delete_object().bucket(bucket).key(*k).send().await.unwrap();
    }
    s3.delete_bucket().bucket(bucket).send().await.unwrap();
}

/// Whether `haystack` holds any 16-byte run of `needle`.
fn holds_any_of(haystack: &[u8], needle: &[u8]) -> bool {
    needle
        .chunks(16)
        .filter(|w| w.len() == 16)
        .any(|w| haystack.windows(16).any(|h| h == w))
}

/// Every byte the server's data directory holds, in all its files.
fn stored_bytes(dir: &std::path::Path) -> Vec<u8> {
    support::files(dir)
        .iter()
        .flat_map(|p| std::fs::read(p).unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_prepared_before_the_bucket_changed_hands_moves_none_of_the_new_owners_bytes() {
    let (h, dir) = start("softroce-t37-get-srv").await;
    let user1 = support::client(&h);
    let user2 = support::client_for(&h.endpoint(), USER2.0, USER2.1);
    user1.create_bucket().bucket("shared-name").send().await.unwrap();
    put(&user1, "shared-name", "obj", &noise(SIZE, 1)).await;

    let client = Client::new("softroce-t37-get-cli");
    let prepared = client.prepare(&h, Direction::Get, "shared-name", "obj").await;

    // Within the PREPARE timeout: user 1 frees the name, user 2 takes it
    // and keeps a secret under the same key (and another).
    delete_bucket(&user1, "shared-name", &["obj"]).await;
    user2.create_bucket().bucket("shared-name").send().await.unwrap();
    let secret = noise(SIZE, 201);
    put(&user2, "shared-name", "obj", &secret).await;
    put(&user2, "shared-name", "other", &noise(SIZE, 202)).await;

    let (code, resp) = control(&h, rc_v2::READY_PATH, &client.ready(&prepared), USER1).await;
    assert_eq!(code, 403, "READY after the bucket changed hands: {resp}");
    assert!(
        client.completion(Duration::from_millis(500)).is_none(),
        "a write reached user 1's QP"
    );
    let got = client.buffer();
    assert!(
        got.iter().all(|&b| b == MARK),
        "user 1's buffer was written: {} bytes changed",
        got.iter().filter(|&&b| b != MARK).count()
    );
    assert!(!holds_any_of(&got, &secret));
    // The session is over: READY again finds nothing.
    let (code, _) = control(&h, rc_v2::READY_PATH, &client.ready(&prepared), USER1).await;
    assert_eq!(code, 409);
    // User 2's secret is whole and still user 2's.
    let back = user2
        .get_object()
        .bucket("shared-name")
        .key("obj")
        .send()
        .await
        .unwrap();
    assert_eq!(
        back.body.collect().await.unwrap().into_bytes().as_ref(),
        &secret[..]
    );
    drop(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_prepared_before_the_bucket_changed_hands_stores_nothing_in_the_new_owners_bucket() {
    let (h, dir) = start("softroce-t37-put-srv").await;
    let user1 = support::client(&h);
    let user2 = support::client_for(&h.endpoint(), USER2.0, USER2.1);
    user1.create_bucket().bucket("shared-name").send().await.unwrap();

    let client = Client::new("softroce-t37-put-cli");
    let mine = noise(SIZE, 77);
    assert!(client.c.buf.write_at(0, &mine));
    let prepared = client.prepare(&h, Direction::Put, "shared-name", "planted").await;

    delete_bucket(&user1, "shared-name", &[]).await;
    user2.create_bucket().bucket("shared-name").send().await.unwrap();
    put(&user2, "shared-name", "kept", &noise(SIZE, 203)).await;

    // READY open while the client writes, as the upstream client does.
    let ready = {
        let (addr, headers) = (h.addr(), client.ready(&prepared));
        tokio::spawn(async move { control_at(addr, rc_v2::READY_PATH, &headers, USER1).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    client.write(&prepared);
    let (code, resp) = ready.await.unwrap();
    assert_eq!(code, 403, "READY after the bucket changed hands: {resp}");

    // Nothing of user 1's is in user 2's bucket, nor anywhere on disk.
    let listed = user2
        .list_objects_v2()
        .bucket("shared-name")
        .send()
        .await
        .unwrap();
    let names: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(names, ["kept"]);
    assert!(
        user2
            .head_object()
            .bucket("shared-name")
            .key("planted")
            .send()
            .await
            .is_err()
    );
    assert!(!holds_any_of(&stored_bytes(dir.path()), &mine));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_deleted_and_made_again_by_its_own_owner_ends_the_session() {
    let (h, dir) = start("softroce-t37-own-srv").await;
    let user1 = support::client(&h);
    user1.create_bucket().bucket("mine").send().await.unwrap();
    put(&user1, "mine", "obj", &noise(SIZE, 3)).await;

    let client = Client::new("softroce-t37-own-cli");
    let prepared = client.prepare(&h, Direction::Get, "mine", "obj").await;
    delete_bucket(&user1, "mine", &["obj"]).await;
    user1.create_bucket().bucket("mine").send().await.unwrap();
    let again = noise(SIZE, 4);
    put(&user1, "mine", "obj", &again).await;

    let (code, resp) = control(&h, rc_v2::READY_PATH, &client.ready(&prepared), USER1).await;
    assert_eq!(code, 403, "READY in a bucket made again: {resp}");
    assert!(client.buffer().iter().all(|&b| b == MARK));
    let (code, _) = control(&h, rc_v2::READY_PATH, &client.ready(&prepared), USER1).await;
    assert_eq!(code, 409, "the session ended with its bucket");
    assert_eq!(h.v2_sessions().unwrap().open_sessions(), 0);

    // A session prepared in the bucket as it is now moves its bytes.
    let client = Client::new("softroce-t37-own-cli2");
    let prepared = client.prepare(&h, Direction::Get, "mine", "obj").await;
    let (code, resp) = control(&h, rc_v2::READY_PATH, &client.ready(&prepared), USER1).await;
    assert_eq!(code, 200, "{resp}");
    assert!(client.completion(Duration::from_secs(10)).is_some());
    assert_eq!(&client.buffer()[..SIZE], &again[..]);
    drop(dir);
}

/// The same hole on plain HTTP, with no RDMA at all: a PUT allowed in user
/// 1's bucket streams its body slowly; meanwhile user 1 deletes the bucket
/// (empty: the PUT has not committed) and user 2 makes it again. The PUT
/// must not land in user 2's bucket. While the PUT is in flight the bucket
/// is in use, so DeleteBucket is refused (`409 OperationAborted`), user 2
/// cannot take the name, and the PUT completes in user 1's bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_put_in_flight_never_commits_into_a_bucket_made_again_by_another_key() {
    use tokio::io::AsyncWriteExt as _;
    let (h, dir) = start("softroce-t37-http-srv").await;
    let user1 = support::client(&h);
    let user2 = support::client_for(&h.endpoint(), USER2.0, USER2.1);
    user1.create_bucket().bucket("slow-name").send().await.unwrap();

    let body = noise(2 << 20, 7);
    let signed = support::sigv4::sign(
        "PUT",
        "/slow-name/slow",
        "127.0.0.1",
        "UNSIGNED-PAYLOAD",
        &[],
        USER1,
    );
    let head = signed.head(
        "PUT",
        "/slow-name/slow",
        &[("content-length", body.len().to_string())],
    );
    let mut s = tokio::net::TcpStream::connect(h.addr()).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&body[..1 << 20]).await.unwrap();
    s.flush().await.unwrap();
    // The PUT is past its access check and streaming into the store.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let deleted = user1.delete_bucket().bucket("slow-name").send().await;
    let made_again = user2.create_bucket().bucket("slow-name").send().await;

    s.write_all(&body[1 << 20..]).await.unwrap();
    s.flush().await.unwrap();
    let mut buf = Vec::new();
    let put = support::wire::read_response(&mut s, &mut buf).await.unwrap();

    // Whatever happened, user 2's bucket never holds user 1's object.
    if made_again.is_ok() {
        let listed = user2.list_objects_v2().bucket("slow-name").send().await.unwrap();
        assert!(
            listed.contents().is_empty(),
            "user 1's in-flight PUT ({}) committed into the bucket user 2 made again",
            put.status
        );
    }
    // And what the server does: the bucket in use is not deleted.
    let e = deleted.expect_err("DeleteBucket went through with a PUT in flight");
    assert_eq!(support::code(&e), "OperationAborted");
    assert_eq!(
        support::code(&made_again.expect_err("user 2 took the name")),
        "BucketAlreadyExists"
    );
    assert_eq!(put.status, 200, "{}", String::from_utf8_lossy(&put.body));
    let back = user1
        .get_object()
        .bucket("slow-name")
        .key("slow")
        .send()
        .await
        .unwrap();
    assert_eq!(
        back.body.collect().await.unwrap().into_bytes().as_ref(),
        &body[..]
    );
    // Once the PUT has ended, the bucket is free to delete again.
    delete_bucket(&user1, "slow-name", &["slow"]).await;
    drop(dir);
}
