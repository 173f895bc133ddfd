//! Client and server halves of the protocol on a real kernel verbs device:
//! the library (client) and an in-process `hipobj_target::Target` (server), both on
//! `rxe0`, PUT and GET with exact bytes. Ignored by default; it runs inside
//! the rxe VM (scripts/rxe-test.sh).
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;

use hipobj::{Config, Library, Options};
use hipobj_ibverbs::{IbVerbs, SysfsTopology};
use hipobj_platform::{NoGpu, Platform};
use hipobj_target::{Target, TargetConfig};

use support::server::{Server, app_driven_get, put_get_roundtrip};

#[test]
#[ignore = "needs an rxe device: run inside scripts/rxe-vm.sh (scripts/rxe-test.sh does)"]
fn put_and_get_on_rxe() {
    let dev = std::env::var("HIPOBJ_RXE_DEVICE").unwrap_or_else(|_| "rxe0".into());
    let verbs = Arc::new(IbVerbs::load().unwrap());
    let topology = Arc::new(SysfsTopology::system());
    let platform = Platform {
        verbs: verbs.clone(),
        gpu: Arc::new(NoGpu::new("the rxe VM has no GPU")),
        topology: topology.clone(),
    };
    let lib = Library::new();
    let cfg = Config {
        flags: 0,
        gpu_device: -1,
        nic_hint: Some(dev.clone()),
    };
    lib.init(
        &cfg,
        || Ok(platform),
        || Options {
            max_transfers: 4,
            ..Options::default()
        },
    )
    .unwrap();
    let inst = lib.instance().unwrap();
    let peer = Target::open(
        verbs.as_ref(),
        topology.as_ref(),
        Some(&dev),
        TargetConfig {
            chunk: 256 << 10,
            ..TargetConfig::default()
        },
    )
    .unwrap();
    let server = Server::new(peer);
    let start = std::time::Instant::now();
    put_get_roundtrip(&inst, &server, &[1, 4096, 1 << 20, 3 << 20]);
    let stats = server.target.stats();
    println!(
        "rxe e2e: {} transfers, {} bytes, {} bindings, {:?}",
        stats.transfers,
        stats.bytes,
        stats.bindings,
        start.elapsed()
    );
    assert_eq!(stats.transfers, 8);
    // The application drives a GET itself through the token connection.
    let want = server.objects.lock().unwrap()["obj-4096"].clone();
    assert_eq!(app_driven_get(&inst, &server, "obj-4096", 4096), want);
    println!("rxe e2e: an application-driven GET through hipObjHandleRdmaReply's path passed");
    lib.shutdown();
}
