//! `examples/c/put-object.c` against a plain S3 server that already holds
//! the object (issue 38, finding 1): the example probes with a one-byte
//! ranged GET first, sends no PutObject with a token, exits 1 saying why,
//! and the object is unchanged. Before, its body-less PutObject replaced
//! the object with an empty one.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex};

use support::{lib_dir, root, run_ok};

#[derive(Default)]
struct Plain {
    objects: HashMap<String, Vec<u8>>,
    /// (method, whether it carried a token) of every request.
    seen: Vec<(String, bool)>,
}

/// One request on `s`, answered as a plain S3 server does: PUT stores the
/// body, GET reads with a Range. Returns false when the peer is gone.
fn serve_one(s: &mut BufReader<TcpStream>, state: &Mutex<Plain>) -> bool {
    let mut line = String::new();
    if s.read_line(&mut line).unwrap_or(0) == 0 {
        return false;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_owned();
    let path = parts
        .next()
        .unwrap_or("")
        .split('?')
        .next()
        .unwrap_or("")
        .to_owned();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if s.read_line(&mut h).unwrap_or(0) == 0 {
            return false;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    let n: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; n];
    if s.read_exact(&mut body).is_err() {
        return false;
    }
    let mut st = state.lock().unwrap();
    st.seen
        .push((method.clone(), headers.contains_key("x-amz-rdma-token")));
    let (status, extra, out) = match method.as_str() {
        "PUT" => {
            st.objects.insert(path, body);
            (200, String::new(), Vec::new())
        }
        _ => match st.objects.get(&path) {
            None => (
                404,
                String::new(),
                b"<Error><Code>NoSuchKey</Code></Error>".to_vec(),
            ),
            Some(obj) => match headers.get("range").and_then(|r| r.strip_prefix("bytes=0-")) {
                Some(_) => (
                    206,
                    format!("content-range: bytes 0-0/{}\r\n", obj.len()),
                    obj[..1].to_vec(),
                ),
                None => (200, String::new(), obj.clone()),
            },
        },
    };
    let head = format!(
        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\n{extra}\r\n",
        out.len()
    );
    let w = s.get_mut();
    w.write_all(head.as_bytes()).is_ok() && w.write_all(&out).is_ok()
}

#[test]
fn the_c_put_example_never_sends_a_token_put_to_a_plain_server() {
    let libs = lib_dir("put-object-plain");
    let exe = libs.join("put-object");
    run_ok(
        Command::new("cc")
            .args([
                "-std=c99",
                "-D_DEFAULT_SOURCE",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
            ])
            .arg("-I")
            .arg(root().join("include"))
            .arg(root().join("examples/c/put-object.c"))
            .arg("-L")
            .arg(&libs)
            .args(["-lhipobj", "-lcurl", "-o"])
            .arg(&exe),
    );
    let state = Arc::new(Mutex::new(Plain::default()));
    let old: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    state
        .lock()
        .unwrap()
        .objects
        .insert("/bkt/obj".into(), old.clone());
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", l.local_addr().unwrap());
    let st = state.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let st = st.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(s);
                while serve_one(&mut r, &st) {}
            });
        }
    });
    let file = libs.join("new.bin");
    std::fs::write(&file, vec![9u8; 70_000]).unwrap();
    let out = Command::new(&exe)
        .args([endpoint.as_str(), "bkt", "obj"])
        .arg(&file)
        .env("LD_LIBRARY_PATH", &libs)
        .env("HIPOBJ_NIC", "softroce0")
        .env("AWS_ACCESS_KEY_ID", "k")
        .env("AWS_SECRET_ACCESS_KEY", "s")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("does not speak the RDMA protocol"), "{err}");
    let st = state.lock().unwrap();
    assert!(st.objects["/bkt/obj"] == old, "the object changed");
    assert!(!st.seen.is_empty(), "no probe reached the server");
    assert!(
        st.seen.iter().all(|(m, _)| m == "GET"),
        "a write reached the server: {:?}",
        st.seen
    );
}
