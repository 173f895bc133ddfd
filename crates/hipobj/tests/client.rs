//! The safe Rust API on the fake platform: registrations deregister when
//! dropped, and a registration only works with its own client.
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
    let mut buf = vec![7u8; 4096];
    {
        let mut reg = client.register(&mut buf).unwrap();
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
    }
    assert_eq!(p.verbs.live().mrs, 0, "dropping the registration deregistered it");
    assert_eq!(buf[0], 42);
    drop(client);
    assert!(p.verbs.live().is_zero(), "{:?}", p.verbs.live());
}
