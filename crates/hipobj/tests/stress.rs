//! 64 threads at once doing transfers, registrations and deregistrations,
//! with one shutdown/init cycle in the middle: every call ends in a code the
//! contract allows, and nothing leaks. Run it under ThreadSanitizer with
//! scripts/tsan.sh.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

use hipobj::{Control, ControlError, Direction, ErrorKind, Library};
use hipobj_platform::QpState;
use hipobj_platform::fake::{FakeDeviceSpec, FakeVerbs};
use hipobj_proto::{Reply, Token};

use support::{config, fake, host_buf, options, server_token};

/// A server double that binds an unbound client QP and then succeeds,
/// delivering a GET's WRITE WITH IMMEDIATE before its reply.
struct Binder {
    verbs: Arc<FakeVerbs>,
    reply: String,
}

impl Control for Binder {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        let t = Token::decode(token.as_bytes()).map_err(|e| ControlError(e.to_string()))?;
        self.reply = if self.verbs.qp_state(t.qpn) == Some(QpState::Rts) {
            if support::is_get_token(&self.verbs, &t) {
                support::deliver_get_proof(&self.verbs, &t);
            }
            support::done(t.len)
        } else {
            Reply::Bind {
                token: server_token(),
                psn: 1,
            }
            .to_string()
        };
        Ok(())
    }
    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        reply[..self.reply.len()].copy_from_slice(self.reply.as_bytes());
        Ok(self.reply.len())
    }
}

#[test]
fn sixty_four_threads_and_a_shutdown_init_cycle() {
    const THREADS: usize = 64;
    const ROUNDS: usize = 40;
    let p = fake(0, FakeDeviceSpec::default());
    let lib = Arc::new(Library::new());
    lib.init(&config(), || Ok(p.platform()), || options(8)).unwrap();
    let ok = Arc::new(AtomicUsize::new(0));
    let not_init = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (lib, p, ok, not_init, start) = (
                lib.clone(),
                p.clone(),
                ok.clone(),
                not_init.clone(),
                start.clone(),
            );
            std::thread::spawn(move || {
                start.wait();
                for round in 0..ROUNDS {
                    if t == 0 && round == ROUNDS / 2 {
                        lib.shutdown();
                        lib.init(&config(), || Ok(p.platform()), || options(8)).unwrap();
                    }
                    let inst = match lib.instance() {
                        Ok(i) => i,
                        Err(e) => {
                            assert_eq!(e.kind(), ErrorKind::NotInitialized);
                            not_init.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    };
                    let buf = host_buf(4096);
                    inst.register_host(buf).unwrap();
                    let dir = if (t + round) % 2 == 0 {
                        Direction::Get
                    } else {
                        Direction::Put
                    };
                    let mut server = Binder {
                        verbs: p.verbs.clone(),
                        reply: String::new(),
                    };
                    match inst.transfer(dir, buf.addr(), 1 + (t * 31 + round) % 4096, 0, &mut server) {
                        Ok(()) => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        // Shutdown wakes a transfer waiting for a connection.
                        Err(e) => {
                            assert_eq!(e.kind(), ErrorKind::NotInitialized, "{e}");
                            not_init.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    if round % 3 == 0 {
                        let token = inst.rdma_token(buf.addr(), 64, dir).unwrap();
                        assert_eq!(token.as_str().len(), 88);
                    }
                    inst.deregister(buf.addr()).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let ok = ok.load(Ordering::Relaxed);
    let refused = not_init.load(Ordering::Relaxed);
    // Only calls that overlap the shutdown/init cycle may be refused.
    assert!(
        ok > 0 && ok + refused == THREADS * ROUNDS,
        "{ok} succeeded, {refused} refused"
    );
    lib.shutdown();
    assert!(p.verbs.live().is_zero(), "leaked {:?}", p.verbs.live());
    println!("stress: {ok} transfers succeeded, {refused} calls found the library shut down");
}
