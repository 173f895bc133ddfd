//! Every acknowledged change is on stable storage before its answer, read
//! from the outside: the `hipobj-server` binary runs under strace (a
//! tracer we did not write), a client makes every kind of change the store
//! knows, and the trace of the server's file system calls must show, for
//! each name it made, replaced or removed in its data directory:
//!
//! * the directory that holds the name opened and `fsync`ed by the same
//!   thread after the change, before that thread changes another name;
//! * for a file renamed or linked out of `.tmp` into place, its data
//!   `fdatasync`ed (or `fsync`ed) before the rename or link.
//!
//! Names under `.tmp` (files being written) and the contents of a folder
//! that is removed whole are exempt: a crash leaves them or not, and no
//! answer depends on them.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::HashMap;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketVersioningStatus, CompletedMultipartUpload, CompletedPart, VersioningConfiguration,
};
use support::{AK, SK, client_for, pattern};

/// One traced system call.
#[derive(Debug, Clone)]
struct Call {
    ts: f64,
    tid: u32,
    name: String,
    args: Vec<String>,
    ret: i64,
}

/// Splits a strace argument list, keeping quoted strings whole (unquoted).
fn split_args(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut escaped = false;
    let mut depth = 0i32;
    for c in s.chars() {
        if quoted {
            if escaped {
                cur.push(c);
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                quoted = false;
            } else {
                cur.push(c);
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            '[' | '{' => {
                depth += 1;
                cur.push(c);
            }
            ']' | '}' => {
                depth -= 1;
                cur.push(c);
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur).trim().to_owned()),
            _ => cur.push(c),
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_owned());
    }
    out
}

/// Reads every per-thread trace file `dir/trace.<tid>`, in time order.
fn read_trace(dir: &Path) -> Vec<Call> {
    let mut calls = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let Some(tid) = p
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("trace."))
            .and_then(|t| t.parse().ok())
        else {
            continue;
        };
        for line in std::fs::read_to_string(&p).unwrap().lines() {
            let Some((ts, rest)) = line.split_once(' ') else {
                continue;
            };
            let Some(open) = rest.find('(') else { continue };
            // strace pads the return value into a column: `fsync(9)    = 0`.
            let Some(assign) = rest.rfind(" = ") else { continue };
            let Some(eq) = rest[..assign].rfind(')') else {
                continue;
            };
            let ret = rest[assign + 3..]
                .split_whitespace()
                .next()
                .and_then(|r| r.parse().ok())
                .unwrap_or(-1);
            calls.push(Call {
                ts: ts.parse().unwrap(),
                tid,
                name: rest[..open].to_owned(),
                args: split_args(&rest[open + 1..eq]),
                ret,
            });
        }
    }
    calls.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    calls
}

/// A name change: what it names, and the source of a rename or link.
struct Change {
    at: usize,
    name: PathBuf,
    from: Option<PathBuf>,
}

/// `path` as an absolute path: as given, or under the directory `dirfd`
/// names.
fn resolve(fds: &HashMap<String, PathBuf>, dirfd: &str, path: &str) -> PathBuf {
    if path.starts_with('/') || dirfd == "AT_FDCWD" {
        PathBuf::from(path)
    } else {
        fds.get(dirfd).cloned().unwrap_or_default().join(path)
    }
}

fn changes(
    calls: &[Call],
    fds: &mut HashMap<String, PathBuf>,
    opened: &mut Vec<(usize, String, PathBuf)>,
) -> Vec<Change> {
    let mut out = Vec::new();
    for (i, c) in calls.iter().enumerate() {
        let a = &c.args;
        let ok = c.ret == 0;
        match c.name.as_str() {
            "openat" if c.ret >= 0 => {
                let p = resolve(fds, &a[0], &a[1]);
                fds.insert(c.ret.to_string(), p.clone());
                opened.push((i, c.ret.to_string(), p));
            }
            "open" if c.ret >= 0 => {
                let p = PathBuf::from(&a[0]);
                fds.insert(c.ret.to_string(), p.clone());
                opened.push((i, c.ret.to_string(), p));
            }
            "rename" | "link" if ok => out.push(Change {
                at: i,
                name: PathBuf::from(&a[1]),
                from: Some(PathBuf::from(&a[0])),
            }),
            "renameat" | "renameat2" | "linkat" if ok => out.push(Change {
                at: i,
                name: resolve(fds, &a[2], &a[3]),
                from: Some(resolve(fds, &a[0], &a[1])),
            }),
            "unlink" | "rmdir" | "mkdir" if ok => out.push(Change {
                at: i,
                name: PathBuf::from(&a[0]),
                from: None,
            }),
            "unlinkat" | "mkdirat" if ok => out.push(Change {
                at: i,
                name: resolve(fds, &a[0], &a[1]),
                from: None,
            }),
            _ => {}
        }
    }
    out
}

#[test]
fn every_change_is_synced_before_its_answer() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let data = data.canonicalize().unwrap();
    let traces = work.path().join("traces");
    std::fs::create_dir(&traces).unwrap();
    let cfg = work.path().join("server.toml");
    std::fs::write(
        &cfg,
        format!(
            "address = \"127.0.0.1:0\"\nmetrics_log_secs = 0\n\
             [[credentials]]\naccess_key = \"{AK}\"\nsecret_key = \"{SK}\"\n\
             [storage]\nkind = \"fs\"\ndata_dir = \"{}\"\n\
             [limits]\nfsync = true\nmin_part_size = 1048576\n",
            data.display()
        ),
    )
    .unwrap();
    let strace = Command::new("strace").arg("-V").output();
    assert!(
        strace.is_ok_and(|o| o.status.success()),
        "strace is not installed (apt-get install strace; .ci/run installs it)"
    );
    let mut child = Command::new("strace")
        .args(["-ff", "-ttt", "-qq", "-o"])
        .arg(traces.join("trace"))
        .args([
            "-e",
            "trace=open,openat,close,rename,renameat,renameat2,link,linkat,unlink,unlinkat,mkdir,mkdirat,rmdir,fsync,fdatasync",
        ])
        .arg(env!("CARGO_BIN_EXE_hipobj-server"))
        .args(["--config", cfg.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let addr = line.trim().strip_prefix("listening on ").unwrap().to_owned();

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = client_for(&format!("http://{addr}"), AK, SK);
        let put = |b: &'static str, k: &'static str, body: Vec<u8>| {
            let c = c.clone();
            async move {
                c.put_object()
                    .bucket(b)
                    .key(k)
                    .body(ByteStream::from(body))
                    .send()
                    .await
                    .unwrap()
            }
        };
        c.create_bucket().bucket("plain").send().await.unwrap();
        put("plain", "a", pattern(300_000, 1)).await;
        put("plain", "a", pattern(1000, 2)).await;
        c.copy_object()
            .bucket("plain")
            .key("b")
            .copy_source("plain/a")
            .send()
            .await
            .unwrap();
        c.delete_object().bucket("plain").key("b").send().await.unwrap();
        let up = c
            .create_multipart_upload()
            .bucket("plain")
            .key("mp")
            .send()
            .await
            .unwrap();
        let id = up.upload_id().unwrap();
        let mut parts = Vec::new();
        for n in 1..=2 {
            let p = c
                .upload_part()
                .bucket("plain")
                .key("mp")
                .upload_id(id)
                .part_number(n)
                .body(ByteStream::from(pattern(1 << 20, n as u8)))
                .send()
                .await
                .unwrap();
            parts.push(CompletedPart::builder().part_number(n).set_e_tag(p.e_tag).build());
        }
        c.complete_multipart_upload()
            .bucket("plain")
            .key("mp")
            .upload_id(id)
            .multipart_upload(CompletedMultipartUpload::builder().set_parts(Some(parts)).build())
            .send()
            .await
            .unwrap();
        let aborted = c
            .create_multipart_upload()
            .bucket("plain")
            .key("gone")
            .send()
            .await
            .unwrap();
        c.abort_multipart_upload()
            .bucket("plain")
            .key("gone")
            .upload_id(aborted.upload_id().unwrap())
            .send()
            .await
            .unwrap();

        c.create_bucket().bucket("ver").send().await.unwrap();
        c.put_bucket_versioning()
            .bucket("ver")
            .versioning_configuration(
                VersioningConfiguration::builder()
                    .status(BucketVersioningStatus::Enabled)
                    .build(),
            )
            .send()
            .await
            .unwrap();
        put("ver", "k", pattern(5000, 3)).await;
        let v2 = put("ver", "k", pattern(6000, 4)).await;
        c.delete_object().bucket("ver").key("k").send().await.unwrap();
        c.delete_object()
            .bucket("ver")
            .key("k")
            .version_id(v2.version_id().unwrap())
            .send()
            .await
            .unwrap();
        c.create_bucket().bucket("brief").send().await.unwrap();
        c.delete_bucket().bucket("brief").send().await.unwrap();
    });

    // SIGTERM to strace and the server together (one process group): the
    // server shuts down, strace writes out and ends with it.
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process_group(pid, rustix::process::Signal::TERM).unwrap();
    let _ = child.wait();

    let calls = read_trace(&traces);
    let mut fds = HashMap::new();
    let mut opened = Vec::new();
    let all = changes(&calls, &mut fds, &mut opened);
    let tmp = data.join(".tmp");
    let exempt = |p: &Path| {
        p.starts_with(&tmp) || p == tmp || !p.starts_with(&data) || p == data
            // The contents of an upload's folder, removed with it.
            || p.parent().is_some_and(|d| d.parent() == Some(&data.join(".uploads")))
    };
    let mut checked = 0;
    let mut failures = Vec::new();
    for ch in &all {
        if exempt(&ch.name) {
            continue;
        }
        checked += 1;
        let c = &calls[ch.at];
        let dir = ch.name.parent().unwrap().to_path_buf();
        // The same thread's calls after this one, up to its next change.
        let next_change = all
            .iter()
            .filter(|o| o.at > ch.at && calls[o.at].tid == c.tid && !exempt(&o.name))
            .map(|o| o.at)
            .next()
            .unwrap_or(calls.len());
        let synced = (ch.at + 1..next_change).any(|j| {
            let s = &calls[j];
            s.tid == c.tid
                && s.name == "fsync"
                && s.ret == 0
                && opened
                    .iter()
                    .rev()
                    .find(|(at, fd, _)| *at < j && *at > ch.at && *fd == s.args[0])
                    .is_some_and(|(_, _, p)| *p == dir)
        });
        if !synced {
            failures.push(format!(
                "{} {:?}: its folder was not synced after it",
                c.name, ch.name
            ));
        }
        if let Some(from) = &ch.from
            && from.starts_with(&tmp)
            && c.name != "unlink"
        {
            // The data of a file made visible from .tmp was synced first.
            let data_synced = calls[..ch.at].iter().enumerate().any(|(j, s)| {
                (s.name == "fdatasync" || s.name == "fsync")
                    && s.ret == 0
                    && opened
                        .iter()
                        .rev()
                        .find(|(at, fd, _)| *at < j && *fd == s.args[0])
                        .is_some_and(|(_, _, p)| p == from)
            });
            // A link of a link (the current version's name) has data that
            // was synced when the version was written.
            let is_relink = from
                .file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with("-current"));
            if !data_synced && !is_relink {
                failures.push(format!(
                    "{} {from:?} -> {:?}: its data was not synced first",
                    c.name, ch.name
                ));
            }
        }
    }
    assert!(
        checked >= 20,
        "only {checked} changes traced: {all:?}",
        all = all.len()
    );
    assert!(
        failures.is_empty(),
        "{} problems in {checked} changes:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
