//! A child that `fork()` makes after init never uses the parent's keys,
//! QPs or registrations (issue 38, finding 6): every call on the inherited
//! instance fails with `NotInitialized` before it touches anything, letting
//! go of it releases nothing (the kernel objects behind a real NIC's are
//! shared with the parent through the inherited device file), and the
//! child can initialize its own. Before, the child's first token drew the
//! parent's next window key.
//!
//! The child reports by its exit status: 0, or the number of the first
//! check that failed (the parent names it). One test in this file, so the
//! process forks with no other test thread running.
#![allow(clippy::unwrap_used, unsafe_code)]

mod support;

use hipobj::{Direction, ErrorKind};
use hipobj_platform::fake::FakePlatform;
use support::{Script, config, fake, host_buf, options, started, windows};

/// What the child checks, in order; the exit status names the failure.
const CHECKS: &[&str] = &[
    "ok",
    "Library::instance in the child is not NotInitialized",
    "rdma_token on the inherited instance is not NotInitialized",
    "a transfer on the inherited instance is not NotInitialized",
    "the transfer's Control was called",
    "Client::register in the child is not NotInitialized",
    "Client::get in the child is not NotInitialized",
    "letting go of the inherited client, registration or library made a verbs call",
    "init in the child failed",
    "a token of the child's own instance failed",
];

fn child(
    lib: &hipobj::Library,
    client: hipobj::Client,
    mut reg: hipobj::Registration<'static>,
    p: &FakePlatform,
    buf: usize,
) -> i32 {
    let not_init = |e: &hipobj::Error| e.kind() == ErrorKind::NotInitialized;
    let calls = p.faults.calls().len();
    let Err(e) = lib.instance() else { return 1 };
    if !not_init(&e) {
        return 1;
    }
    // The instance itself, as a C program's copy or a client's holds it.
    let inst = client.instance().clone();
    match inst.rdma_token(buf, 4096, Direction::Get) {
        Err(e) if not_init(&e) => {}
        _ => return 2,
    }
    let mut script = Script::replying(&["200"]);
    match inst.transfer(Direction::Put, buf, 4096, 0, &mut script) {
        Err(e) if not_init(&e) => {}
        _ => return 3,
    }
    if !script.tokens.is_empty() {
        return 4;
    }
    match client.register(vec![0u8; 4096]) {
        Err(e) if not_init(&e) => {}
        _ => return 5,
    }
    let mut s = Script::replying(&["200"]);
    match client.get(&mut reg, 0, 4096, &mut s) {
        Err(e) if not_init(&e) => {}
        _ => return 6,
    }
    drop(reg);
    drop(inst);
    drop(client);
    lib.shutdown();
    if p.faults.calls().len() != calls {
        return 7;
    }
    // Its own instance, on a NIC of its own.
    let own = fake(0, windows(true));
    if lib.init(&config(), || Ok(own.platform()), || options(2)).is_err() {
        return 8;
    }
    let Ok(mine) = lib.instance() else { return 8 };
    let b = host_buf(4096);
    if mine.register_host(b).is_err() || mine.rdma_token(b.addr(), 4096, Direction::Get).is_err() {
        return 9;
    }
    0
}

#[test]
fn a_forked_child_never_uses_the_parents_keys_qps_or_registrations() {
    let p = fake(0, windows(true));
    let lib = started(&p, 2);
    let inst = lib.instance().unwrap();
    let buf = host_buf(4096);
    inst.register_host(buf).unwrap();
    let client = hipobj::Client::builder(p.platform())
        .nic_hint("fake0")
        .options(options(2))
        .build()
        .unwrap();
    let reg = client.register(vec![7u8; 4096]).unwrap();
    // The parent has drawn keys before it forks.
    let first = inst.rdma_token(buf.addr(), 4096, Direction::Get).unwrap();
    inst.release_token(first.as_str());

    // SAFETY: the child runs only the checks above (no other thread of
    // this test binary is running: this file has one test) and leaves with
    // `_exit`, running no destructor or atexit handler of the parent's.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            child(&lib, client.clone(), reg, &p, buf.addr())
        }))
        .unwrap_or(100);
        // SAFETY: ends the child at once, as above.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just made; `status` is a live i32.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid);
    assert!(libc::WIFEXITED(status), "the child did not exit: {status:#x}");
    let code = libc::WEXITSTATUS(status);
    assert_eq!(
        code,
        0,
        "{}",
        CHECKS.get(code as usize).copied().unwrap_or("the child panicked")
    );

    // The parent's instance and client still work after the child let go.
    let next = inst.rdma_token(buf.addr(), 4096, Direction::Get).unwrap();
    assert_ne!(next.as_str(), first.as_str());
    inst.release_token(next.as_str());
    let again = client.register(vec![1u8; 64]).unwrap();
    assert_eq!(again.len(), 64);
}
