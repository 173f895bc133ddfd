//! Init and shutdown: config checks, the one-instance rules, calls that keep
//! the instance they found, and nothing leaked.
#![allow(clippy::unwrap_used)]

mod support;

use hipobj::{Config, ErrorKind, Library, Options};
use hipobj_platform::PortState;
use hipobj_platform::fake::{FakeDeviceSpec, Fault};

use support::{config, fake, host_buf, options, started};

#[test]
fn config_checks_come_first() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = Library::new();
    let bad_flags = Config { flags: 1, ..config() };
    let e = lib
        .init(&bad_flags, || Ok(p.platform()), Options::default)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidValue);
    let bad_gpu = Config {
        gpu_device: -2,
        ..config()
    };
    assert_eq!(
        lib.init(&bad_gpu, || Ok(p.platform()), Options::default)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidValue
    );
    // Nothing was opened for a refused config.
    assert!(p.verbs.live().is_zero());
    assert_eq!(p.faults.count("open_device"), 0);
}

#[test]
fn gpu_that_does_not_exist_is_invalid() {
    let p = fake(2, FakeDeviceSpec::default());
    let lib = Library::new();
    let cfg = Config {
        gpu_device: 2,
        ..config()
    };
    let e = lib.init(&cfg, || Ok(p.platform()), Options::default).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidValue, "{e}");
    let cfg = Config {
        gpu_device: 1,
        ..config()
    };
    lib.init(&cfg, || Ok(p.platform()), Options::default).unwrap();
    assert_eq!(lib.instance().unwrap().chosen().gpu, Some(1));
}

#[test]
fn no_gpu_and_no_hint_is_nic_not_found() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = Library::new();
    let cfg = Config {
        nic_hint: None,
        ..config()
    };
    let e = lib.init(&cfg, || Ok(p.platform()), Options::default).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NicNotFound);
    let cfg = Config {
        nic_hint: Some("fake0,fake1".into()),
        ..config()
    };
    assert_eq!(
        lib.init(&cfg, || Ok(p.platform()), Options::default)
            .unwrap_err()
            .kind(),
        ErrorKind::NicNotFound
    );
    let cfg = Config {
        nic_hint: Some("mlx5_9".into()),
        ..config()
    };
    assert_eq!(
        lib.init(&cfg, || Ok(p.platform()), Options::default)
            .unwrap_err()
            .kind(),
        ErrorKind::NicNotFound
    );
}

#[test]
fn a_nic_without_an_active_port_is_not_found() {
    let p = fake(
        0,
        FakeDeviceSpec {
            port_state: PortState::Down,
            ..FakeDeviceSpec::default()
        },
    );
    let e = Library::new()
        .init(&config(), || Ok(p.platform()), Options::default)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NicNotFound, "{e}");
    assert!(p.verbs.live().is_zero(), "{:?}", p.verbs.live());
}

#[test]
fn init_creates_the_pool_and_the_token_connection() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 5);
    let live = p.verbs.live();
    assert_eq!(live.qps, 6, "5 pooled connections and the token connection");
    assert_eq!(live.cqs, 6);
    assert_eq!((live.devices, live.pds), (1, 1));
    assert_eq!(lib.instance().unwrap().pool().size(), 5);
    lib.shutdown();
    assert!(p.verbs.live().is_zero(), "shutdown leaked {:?}", p.verbs.live());
}

#[test]
fn failing_to_create_every_connection_fails_init_and_releases_everything() {
    let p = fake(0, FakeDeviceSpec::default());
    // The token connection and three pool connections work, the fourth fails.
    p.faults.set_after("create_qp", Fault::Fail, 4, 1);
    let e = Library::new()
        .init(&config(), || Ok(p.platform()), || options(8))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RdmaError, "{e}");
    assert!(
        p.verbs.live().is_zero(),
        "a failed init leaked {:?}",
        p.verbs.live()
    );
}

#[test]
fn already_initialized_and_not_initialized() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 1);
    let e = lib
        .init(&config(), || Ok(p.platform()), Options::default)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyInitialized);
    lib.shutdown();
    assert_eq!(lib.instance().unwrap_err().kind(), ErrorKind::NotInitialized);
    // Shutdown without an instance does nothing.
    lib.shutdown();
    lib.init(&config(), || Ok(p.platform()), || options(1)).unwrap();
    lib.shutdown();
    assert!(p.verbs.live().is_zero());
}

#[test]
fn calls_in_flight_keep_their_instance_and_a_new_init_can_start() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 2);
    let old = lib.instance().unwrap();
    lib.shutdown();
    // The old instance is still whole for the call holding it.
    let region = host_buf(64);
    old.register_host(region).unwrap();
    // A new init runs while the old call is still going.
    lib.init(&config(), || Ok(p.platform()), || options(2)).unwrap();
    assert_eq!(p.verbs.live().devices, 2);
    old.deregister(region.addr()).unwrap();
    drop(old);
    assert_eq!(
        p.verbs.live().devices,
        1,
        "the old instance is released with its last call"
    );
    lib.shutdown();
    assert!(p.verbs.live().is_zero());
}

#[test]
fn shutdown_deregisters_buffers() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 1);
    for _ in 0..3 {
        lib.instance().unwrap().register_host(host_buf(128)).unwrap();
    }
    assert_eq!(p.verbs.live().mrs, 6, "two MRs (one per direction) per buffer");
    lib.shutdown();
    assert!(p.verbs.live().is_zero());
}
