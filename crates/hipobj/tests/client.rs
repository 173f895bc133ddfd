//! The safe Rust API on the fake platform: registrations deregister when
//! dropped, a registration only works with its own client, and no safe
//! code (`mem::forget` included) leaves memory registered past its owner.
#![allow(clippy::unwrap_used)]

mod support;

use hipobj::{Client, ErrorKind};
use hipobj_platform::fake::FakeDeviceSpec;

use support::{Script, done, fake, options, server_token};

#[test]
fn registrations_deregister_on_drop_and_stay_with_their_client() {
    let p = fake(0, FakeDeviceSpec::default());
    let client = Client::builder(p.platform())
        .nic_hint("fake0")
        .options(options(2))
        .build()
        .unwrap();
    let buf = {
        let mut reg = client.register(vec![7u8; 4096]).unwrap();
        assert_eq!(p.verbs.live().mrs, 2);
        reg.write_from(0, &[42]).unwrap();
        let mut two = [0u8; 2];
        reg.read_into(0, &mut two).unwrap();
        assert_eq!(two, [42, 7]);
        assert_eq!(reg.to_vec()[..3], [42, 7, 7]);
        assert_eq!(
            reg.read_into(4095, &mut two).unwrap_err().kind(),
            ErrorKind::InvalidValue
        );
        assert_eq!(
            reg.write_from(4096, &[1]).unwrap_err().kind(),
            ErrorKind::InvalidValue
        );
        let bind = hipobj_proto::Reply::Bind {
            token: server_token(),
            psn: 3,
        }
        .to_string();
        client
            .get(&mut reg, 0, 4096, &mut Script::serving(&p, &[&bind, &done(4096)]))
            .unwrap();
        client
            .put(&reg, 100, 10, &mut Script::serving(&p, &[&done(10)]))
            .unwrap();
        let e = client
            .get(&mut reg, 1, 4096, &mut Script::replying(&["200"]))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidValue);

        let other = Client::builder(p.platform())
            .nic_hint("fake0")
            .options(options(1))
            .build()
            .unwrap();
        let e = other
            .put(&reg, 0, 1, &mut Script::replying(&["200"]))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidValue);
        reg.into_inner()
    };
    assert_eq!(p.verbs.live().mrs, 0, "into_inner deregistered it");
    assert_eq!(buf[0], 42);
    drop(client);
    assert!(p.verbs.live().is_zero(), "{:?}", p.verbs.live());
}

fn client_on(p: &hipobj_platform::fake::FakePlatform) -> Client {
    Client::builder(p.platform())
        .nic_hint("fake0")
        .options(options(2))
        .build()
        .unwrap()
}

#[test]
fn an_empty_buffer_is_refused_and_a_dropped_owned_registration_deregisters() {
    let p = fake(0, FakeDeviceSpec::default());
    let client = client_on(&p);
    let e = client.register(Vec::new()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidValue);
    let reg = client.register(vec![1u8; 100]).unwrap();
    assert_eq!(p.verbs.live().mrs, 2);
    drop(reg);
    assert_eq!(p.verbs.live().mrs, 0);
}

#[test]
fn a_scope_registers_borrowed_memory_for_its_run_only_even_when_it_panics() {
    let p = fake(0, FakeDeviceSpec::default());
    let client = client_on(&p);
    let mut buf = vec![0u8; 4096];
    let bind = hipobj_proto::Reply::Bind {
        token: server_token(),
        psn: 3,
    }
    .to_string();
    let addr = client
        .with_registration(&mut buf, |reg| {
            assert_eq!(p.verbs.live().mrs, 2);
            reg.write_from(10, &[9, 9]).unwrap();
            client
                .get(reg, 0, 4096, &mut Script::serving(&p, &[&bind, &done(4096)]))
                .unwrap();
            reg.len()
        })
        .unwrap();
    assert_eq!(addr, 4096);
    assert_eq!(p.verbs.live().mrs, 0, "the scope's end deregistered the memory");
    assert_eq!(&buf[10..12], &[9, 9]);
    // The memory is no longer known to the instance: no token can name it.
    let e = client
        .instance()
        .transfer(
            hipobj::Direction::Get,
            buf.as_ptr() as usize,
            16,
            0,
            &mut Script::replying(&["200"]),
        )
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BufNotRegistered);

    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        client.with_registration(&mut buf, |_reg| -> () { panic!("the closure gives up") })
    }));
    assert!(panicked.is_err());
    assert_eq!(
        p.verbs.live().mrs,
        0,
        "a panic in the scope deregistered the memory too"
    );
}

#[test]
fn a_forgotten_owned_registration_keeps_its_memory_alive_with_it() {
    let p = fake(0, FakeDeviceSpec::default());
    let client = client_on(&p);
    // The program, in the new API: what is forgotten is the
    // buffer too, so the registered memory is never handed back.
    let reg = client.register(vec![5u8; 4096]).unwrap();
    std::mem::forget(reg);
    assert_eq!(
        p.verbs.live().mrs,
        2,
        "still registered, and so still allocated (leaked)"
    );
}

#[test]
fn a_registration_that_a_forgotten_session_holds_is_leaked_not_freed() {
    let p = fake(0, FakeDeviceSpec::default());
    let client = client_on(&p);
    let mut reg = client.register(vec![3u8; 4096]).unwrap();
    let session = client.rc_v2_get(&mut reg, 0, 4096).unwrap();
    std::mem::forget(session);
    // The session holds the buffer: deregistration would leave its MR
    // reachable, so the buffer is leaked and only a copy comes back.
    let back = reg.into_inner();
    assert_eq!(back, vec![3u8; 4096]);
    assert_eq!(
        p.verbs.live().mrs,
        2,
        "the leaked session's buffer stays registered and allocated"
    );
}
