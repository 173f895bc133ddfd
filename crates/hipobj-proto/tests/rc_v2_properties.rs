//! Property tests of the `hipobj-rc-v2` vocabulary, through the public API:
//! every message survives `to_headers` then `from_headers`, every value its
//! `Display` then `parse`, and no input makes a parser panic.

use hipobj_proto::rc_v2::{
    CancelRequest, Cookie, Direction, MAX_SIZE, ObjectPath, PrepareRequest, PrepareResponse, Psn, Qpn,
    ReadyRequest, ReadyResponse, RemoteMr, SessionId, Size, UploadPart, parse_mr_addr, parse_mr_rkey,
};
use hipobj_proto::{Token, Transport};
use proptest::prelude::*;

fn pairs<'a>(h: &'a [(&'static str, String)]) -> impl Iterator<Item = (&'static str, &'a [u8])> {
    h.iter().map(|(n, v)| (*n, v.as_bytes()))
}

prop_compose! {
    fn rc_token()(qpn in 1u32..=0xff_ffff, gid in any::<[u8; 16]>(), rkey in any::<u32>(),
                  addr in any::<u64>(), len in any::<u64>(), port in any::<u8>(), lid in any::<u16>())
                  -> Token {
        Token { transport: Transport::Rc, qpn, gid, rkey, addr, len, port, lid }
    }
}

fn psn() -> impl Strategy<Value = Psn> {
    (1u32..=0xff_ffff).prop_map(|v| Psn::new(v).expect("in range"))
}

fn cookie() -> impl Strategy<Value = Cookie> {
    (1u32..=u32::MAX).prop_map(|v| Cookie::new(v).expect("non-zero"))
}

fn client_mr() -> impl Strategy<Value = Option<(RemoteMr, Qpn)>> {
    proptest::option::of(
        (any::<u64>(), any::<u32>(), 1u32..=0xff_ffff)
            .prop_map(|(addr, rkey, q)| (RemoteMr { addr, rkey }, Qpn::new(q).expect("in range"))),
    )
}

fn target() -> impl Strategy<Value = ObjectPath> {
    ("[a-z0-9][a-z0-9.-]{0,20}", "[^\u{0}]{1,40}")
        .prop_map(|(b, k)| ObjectPath::new(&b, &k).expect("valid bucket and key"))
}

proptest! {
    #[test]
    fn prepare_requests_round_trip(
        op in prop_oneof![Just(Direction::Get), Just(Direction::Put)],
        target in target(),
        size in 1u64..=u64::from(MAX_SIZE),
        offset in proptest::option::of(any::<u64>()),
        token in rc_token(),
        psn in psn(),
        cookie in cookie(),
        client_mr in client_mr(),
        part in proptest::option::of((1u16..=10_000, "[!-~]{1,64}")),
    ) {
        // Only a PUT names a part.
        let part = part
            .filter(|_| op == Direction::Put)
            .map(|(number, upload_id)| UploadPart { upload_id, number });
        let req = PrepareRequest {
            op, target, size: Size::new(size).expect("in range"), offset, token, psn, cookie, client_mr, part,
        };
        let h = req.to_headers();
        prop_assert_eq!(PrepareRequest::from_headers(pairs(&h)), Ok(req));
    }

    #[test]
    fn prepare_responses_round_trip(
        mut token in rc_token(), session in any::<[u8; 16]>(), psn in psn(), multipart in any::<bool>(),
    ) {
        if token.gid == [0; 16] { token.gid[15] = 1; }
        let resp = PrepareResponse { token, session: SessionId(session), psn, multipart };
        let h = resp.to_headers();
        prop_assert_eq!(PrepareResponse::from_headers(pairs(&h)), Ok(resp));
    }

    #[test]
    fn ready_and_cancel_round_trip(
        session in any::<[u8; 16]>(), cookie in cookie(), client_mr in client_mr(),
        bytes in any::<u64>(), etag in proptest::option::of("\"[0-9a-f]{32}\""),
        crc in proptest::option::of(any::<u64>().prop_map(hipobj_proto::rc_v2::Crc64Nvme)),
    ) {
        let req = ReadyRequest { session: SessionId(session), cookie, client_mr };
        prop_assert_eq!(ReadyRequest::from_headers(pairs(&req.to_headers())), Ok(req));
        let resp = ReadyResponse { cookie, bytes, etag, version_id: None, checksum_crc64nvme: crc };
        prop_assert_eq!(ReadyResponse::from_headers(pairs(&resp.to_headers())), Ok(resp));
        let cancel = CancelRequest { session: SessionId(session) };
        prop_assert_eq!(CancelRequest::from_headers(pairs(&cancel.to_headers())), Ok(cancel));
    }

    #[test]
    fn values_round_trip_through_their_text(p in psn(), c in cookie(), s in any::<[u8; 16]>(),
                                            q in 1u32..=0xff_ffff, a in any::<u64>(), k in any::<u32>()) {
        prop_assert_eq!(Psn::parse(p.to_string().as_bytes()), Some(p));
        prop_assert_eq!(p.to_string().len(), 6);
        prop_assert_eq!(Cookie::parse(c.to_string().as_bytes()), Some(c));
        prop_assert_eq!(c.to_string().len(), 8);
        let id = SessionId(s);
        prop_assert_eq!(SessionId::parse(id.to_string().as_bytes()), Some(id));
        prop_assert_eq!(SessionId::parse(id.to_string().to_uppercase().as_bytes()), Some(id));
        let qpn = Qpn::new(q).expect("in range");
        prop_assert_eq!(Qpn::parse(qpn.to_string().as_bytes()), Some(qpn));
        prop_assert_eq!(parse_mr_addr(format!("{a:x}").as_bytes()), Some(a));
        prop_assert_eq!(parse_mr_addr(format!("{a:016X}").as_bytes()), Some(a));
        prop_assert_eq!(parse_mr_rkey(format!("{k:x}").as_bytes()), Some(k));
    }

    #[test]
    fn sizes_are_exactly_one_to_the_maximum(n in any::<u64>()) {
        let parsed = Size::parse(n.to_string().as_bytes());
        prop_assert_eq!(parsed.is_ok(), (1..=u64::from(MAX_SIZE)).contains(&n));
        if let Ok(s) = parsed { prop_assert_eq!(s.get_u64(), n); }
    }

    /// Arbitrary header values never panic a parser, and whatever a parser
    /// accepts it writes back in a form that parses to the same value.
    #[test]
    fn no_input_panics_a_parser(values in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..100), 12)) {
        let names = [
            "x-amz-rdma-protocol", "x-amz-rdma-op", "x-amz-rdma-target", "x-amz-rdma-size",
            "x-amz-rdma-offset", "x-amz-rdma-token", "x-amz-rdma-psn", "x-amz-rdma-cookie",
            "x-amz-rdma-mr-addr", "x-amz-rdma-mr-rkey", "x-amz-rdma-qpn", "x-amz-rdma-session",
        ];
        let mut h: Vec<(&str, &[u8])> = names.iter().zip(&values).map(|(n, v)| (*n, v.as_slice())).collect();
        h[0].1 = b"hipobj-rc-v2";
        if let Ok(p) = PrepareRequest::from_headers(h.iter().copied()) {
            prop_assert_eq!(PrepareRequest::from_headers(pairs(&p.to_headers())), Ok(p));
        }
        if let Ok(r) = ReadyRequest::from_headers(h.iter().copied()) {
            prop_assert_eq!(ReadyRequest::from_headers(pairs(&r.to_headers())), Ok(r));
        }
        let _ = PrepareResponse::from_headers(h.iter().copied());
        let _ = ReadyResponse::from_headers(h.iter().copied());
        let _ = CancelRequest::from_headers(h.iter().copied());
        if let Ok(t) = ObjectPath::parse(&values[2]) {
            prop_assert_eq!(ObjectPath::parse(t.to_string().as_bytes()), Ok(t));
        }
    }
}
