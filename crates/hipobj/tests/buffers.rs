//! Registration: the three ways a buffer reaches the NIC, the bad-input
//! rules, staging copies with their deadline, and every Busy rule.
#![allow(clippy::unwrap_used, unsafe_code)]

mod support;

use std::time::Duration;

use hipobj::{BufKind, MAX_BUFFERS};
use hipobj::{ErrorKind, Library, Options, SyncDirection};
use hipobj_platform::MemRegion;
use hipobj_platform::fake::{FakeDeviceSpec, FakePlatform, Fault};

use support::{config, fake, host_buf, started};

fn gpu_platform(dmabuf: bool) -> FakePlatform {
    fake(
        1,
        FakeDeviceSpec {
            dmabuf,
            ..FakeDeviceSpec::default()
        },
    )
}

fn start(p: &FakePlatform, opts: Options) -> Library {
    let lib = Library::new();
    lib.init(&config(), || Ok(p.platform()), || opts).unwrap();
    lib
}

/// A region over fake device memory: the fake never lets the NIC touch it.
fn device_region(p: &FakePlatform, len: usize) -> MemRegion {
    let addr = p.gpu.alloc_device(0, len);
    // SAFETY: the fake GPU keeps the allocation until the test frees it, and
    // nothing dereferences it through this region.
    unsafe { region(addr, len) }
}

unsafe fn region(addr: usize, len: usize) -> MemRegion {
    // SAFETY: forwarded to the caller.
    unsafe { MemRegion::new(addr, len) }
}

#[test]
fn dmabuf_when_supported() {
    let p = gpu_platform(true);
    let lib = start(&p, Options::default());
    let inst = lib.instance().unwrap();
    let r = device_region(&p, 4096);
    inst.register_device(r).unwrap();
    assert_eq!(
        inst.buffers().find(r.addr()).unwrap().kind(),
        BufKind::Device { dmabuf: true }
    );
    assert_eq!(p.faults.count("reg_dmabuf_mr"), 2, "one dma-buf MR per direction");
    assert_eq!(p.faults.count("reg_mr"), 0);
}

#[test]
fn plain_mr_when_dmabuf_is_off_or_fails() {
    let p = gpu_platform(true);
    let lib = start(
        &p,
        Options {
            dmabuf: false,
            ..Options::default()
        },
    );
    let inst = lib.instance().unwrap();
    let r = device_region(&p, 4096);
    inst.register_device(r).unwrap();
    assert_eq!(
        inst.buffers().find(r.addr()).unwrap().kind(),
        BufKind::Device { dmabuf: false }
    );
    assert_eq!(p.faults.count("export_dmabuf"), 0);

    p.gpu.set_dmabuf_export(false);
    let lib2 = Library::new();
    lib.shutdown();
    lib2.init(&config(), || Ok(p.platform()), Options::default)
        .unwrap();
    let r2 = device_region(&p, 4096);
    lib2.instance().unwrap().register_device(r2).unwrap();
    assert_eq!(
        lib2.instance().unwrap().buffers().find(r2.addr()).unwrap().kind(),
        BufKind::Device { dmabuf: false }
    );
}

#[test]
fn staging_when_the_nic_cannot_reach_the_gpu() {
    let p = gpu_platform(false);
    let lib = start(&p, Options::default());
    let inst = lib.instance().unwrap();
    let r = device_region(&p, 4096);
    // The plain MR over device memory fails; the one over staging works.
    p.faults.set_after("reg_mr", Fault::Fail, 0, 1);
    inst.register_device(r).unwrap();
    let entry = inst.buffers().find(r.addr()).unwrap();
    assert_eq!(entry.kind(), BufKind::Staged);
    let staging = entry.staging_addr().unwrap();
    assert_eq!(
        entry.token_addr(),
        staging as u64,
        "tokens name the staging buffer"
    );
    assert_eq!(p.gpu.live_pinned(), 1);
    drop(entry);

    // Staging copies move exactly the range asked for.
    assert!(p.gpu.write(r.addr() + 100, b"hello"));
    inst.sync(r.addr(), 5, 100, SyncDirection::ToHost).unwrap();
    assert_eq!(p.gpu.read(staging + 100, 5).unwrap(), b"hello");
    assert!(p.gpu.write(staging + 200, b"world"));
    inst.sync(r.addr(), 5, 200, SyncDirection::ToDevice).unwrap();
    assert_eq!(p.gpu.read(r.addr() + 200, 5).unwrap(), b"world");

    inst.deregister(r.addr()).unwrap();
    assert_eq!(p.gpu.live_pinned(), 0, "deregistration frees the staging buffer");
    assert_eq!(p.verbs.live().mrs, 0);
}

#[test]
fn require_gpu_direct_refuses_staging() {
    let p = gpu_platform(false);
    let lib = start(
        &p,
        Options {
            require_gpu_direct: true,
            ..Options::default()
        },
    );
    let inst = lib.instance().unwrap();
    let r = device_region(&p, 4096);
    p.faults.set("reg_mr", Fault::Fail);
    let e = inst.register_device(r).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DmabufNotSupported, "{e}");
    assert!(inst.buffers().is_empty());
    assert_eq!(p.gpu.live_pinned(), 0);
}

#[test]
fn bad_registrations_change_nothing() {
    let p = gpu_platform(true);
    let lib = start(&p, Options::default());
    let inst = lib.instance().unwrap();
    let dev = device_region(&p, 4096);
    let host = host_buf(4096);

    // Past the end of the allocation, and a range starting inside it.
    // SAFETY: nothing is registered; the checks refuse both.
    let past = unsafe { region(dev.addr(), 4097) };
    assert_eq!(
        inst.register_device(past).unwrap_err().kind(),
        ErrorKind::InvalidValue
    );
    // SAFETY: as above.
    let past2 = unsafe { region(dev.addr() + 4000, 200) };
    assert_eq!(
        inst.register_device(past2).unwrap_err().kind(),
        ErrorKind::InvalidValue
    );
    // Host memory given as GPU memory, and the other way round.
    assert_eq!(
        inst.register_device(host).unwrap_err().kind(),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        inst.register_host(dev).unwrap_err().kind(),
        ErrorKind::InvalidValue
    );
    // Size 0 and NULL.
    // SAFETY: empty and NULL regions are refused before use.
    let empty = unsafe { region(host.addr(), 0) };
    assert_eq!(
        inst.register_host(empty).unwrap_err().kind(),
        ErrorKind::InvalidValue
    );
    // SAFETY: as above.
    let null = unsafe { region(0, 16) };
    assert_eq!(
        inst.register_host(null).unwrap_err().kind(),
        ErrorKind::InvalidValue
    );
    // Over 4 GiB.
    // SAFETY: refused by size before use.
    let huge = unsafe { region(host.addr(), (4 << 30) + 1) };
    assert_eq!(
        inst.register_host(huge).unwrap_err().kind(),
        ErrorKind::SizeTooLarge
    );
    assert!(inst.buffers().is_empty());
    assert_eq!(p.verbs.live().mrs, 0);

    // Duplicates and overlaps.
    inst.register_host(host).unwrap();
    assert_eq!(
        inst.register_host(host).unwrap_err().kind(),
        ErrorKind::BufAlreadyRegistered
    );
    let inner = host.slice(10, 10).unwrap();
    assert_eq!(
        inst.register_host(inner).unwrap_err().kind(),
        ErrorKind::BufAlreadyRegistered
    );
    // SAFETY: refused as an overlap before use.
    let straddle = unsafe { region(host.addr() - 8, 16) };
    assert_eq!(
        inst.register_host(straddle).unwrap_err().kind(),
        ErrorKind::BufAlreadyRegistered
    );
    assert_eq!(inst.buffers().len(), 1);
    // Unknown pointers.
    assert_eq!(
        inst.deregister(host.addr() + 1).unwrap_err().kind(),
        ErrorKind::BufNotRegistered
    );
    assert_eq!(
        inst.sync(host.addr() + 1, 1, 0, SyncDirection::ToHost)
            .unwrap_err()
            .kind(),
        ErrorKind::BufNotRegistered
    );
    // Bad sync ranges.
    assert_eq!(
        inst.sync(host.addr(), 4096, 1, SyncDirection::ToHost)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        inst.sync(host.addr(), 1, usize::MAX, SyncDirection::ToHost)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidValue
    );
    // A host buffer needs no staging: sync does nothing and succeeds.
    inst.sync(host.addr(), 4096, 0, SyncDirection::ToDevice).unwrap();
    assert_eq!(p.faults.count("copy_async"), 0);
    assert_eq!(p.verbs.live().mrs, 2, "one buffer, one MR per direction");
}

#[test]
fn at_most_256_buffers() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 1);
    let inst = lib.instance().unwrap();
    let bufs: Vec<MemRegion> = (0..MAX_BUFFERS).map(|_| host_buf(64)).collect();
    for b in &bufs {
        inst.register_host(*b).unwrap();
    }
    let e = inst.register_host(host_buf(64)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::SizeTooLarge, "{e}");
    assert_eq!(
        p.verbs.live().mrs,
        2 * MAX_BUFFERS as i64,
        "the refused one registered nothing"
    );
    inst.deregister(bufs[0].addr()).unwrap();
    inst.register_host(host_buf(64)).unwrap();
}

#[test]
fn a_staging_copy_that_times_out_keeps_the_buffer_busy_until_it_ends() {
    let p = gpu_platform(false);
    let lib = start(
        &p,
        Options {
            stage_timeout: Duration::from_millis(50),
            ..Options::default()
        },
    );
    let inst = lib.instance().unwrap();
    let r = device_region(&p, 4096);
    p.faults.set_after("reg_mr", Fault::Fail, 0, 1);
    inst.register_device(r).unwrap();

    p.gpu.hang_copies();
    let e = inst.sync(r.addr(), 4096, 0, SyncDirection::ToHost).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InternalError, "{e}");
    assert_eq!(inst.abandoned().len(), 1);
    // Every call on the buffer is Busy now, deregistration included.
    assert_eq!(
        inst.sync(r.addr(), 1, 0, SyncDirection::ToHost)
            .unwrap_err()
            .kind(),
        ErrorKind::Busy
    );
    assert_eq!(
        inst.rdma_token(r.addr(), 16, hipobj::Direction::Get)
            .unwrap_err()
            .kind(),
        ErrorKind::Busy
    );
    let mut script = support::Script::replying(&["200"]);
    assert_eq!(
        inst.transfer(hipobj::Direction::Get, r.addr(), 16, 0, &mut script)
            .unwrap_err()
            .kind(),
        ErrorKind::Busy
    );
    assert!(
        script.tokens.is_empty(),
        "a busy buffer never reaches the S3 side"
    );
    assert_eq!(inst.deregister(r.addr()).unwrap_err().kind(), ErrorKind::Busy);
    assert_eq!(inst.buffers().len(), 1);
    // Other buffers are not affected.
    let other = host_buf(64);
    inst.register_host(other).unwrap();
    inst.sync(other.addr(), 64, 0, SyncDirection::ToHost).unwrap();

    // Once the copy ends, the buffer works again and can go.
    p.gpu.release();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while inst.sync(r.addr(), 1, 0, SyncDirection::ToHost).is_err() {
        assert!(std::time::Instant::now() < deadline, "the buffer stayed busy");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(inst.abandoned().is_empty());
    inst.deregister(r.addr()).unwrap();
    assert_eq!(p.gpu.live_pinned(), 0);
}

#[test]
fn a_copy_still_running_at_shutdown_leaks_its_staging_buffer_on_purpose() {
    let p = gpu_platform(false);
    let lib = start(
        &p,
        Options {
            stage_timeout: Duration::from_millis(20),
            ..Options::default()
        },
    );
    let inst = lib.instance().unwrap();
    let r = device_region(&p, 4096);
    p.faults.set_after("reg_mr", Fault::Fail, 0, 1);
    inst.register_device(r).unwrap();
    p.gpu.hang_copies();
    inst.sync(r.addr(), 4096, 0, SyncDirection::ToDevice).unwrap_err();
    drop(inst);
    lib.shutdown();
    // The staging buffer (and the MRs over it) stay: the copy may still write.
    assert_eq!(p.gpu.live_pinned(), 1);
    assert_eq!(p.verbs.live().mrs, 2);
    p.gpu.release();
    p.gpu.wait_idle();
}

#[test]
fn deregistration_is_busy_while_a_transfer_uses_the_buffer() {
    let p = fake(0, FakeDeviceSpec::default());
    let lib = std::sync::Arc::new(started(&p, 1));
    let inst = lib.instance().unwrap();
    let buf = host_buf(64);
    inst.register_host(buf).unwrap();
    let mut script = support::Script::replying(&["501"]);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (inst2, seen2) = (inst.clone(), seen.clone());
    script.on_send = Some(Box::new(move || {
        *seen2.lock().unwrap() = Some(inst2.deregister(buf.addr()).map_err(|e| e.kind()));
    }));
    let e = inst
        .transfer(hipobj::Direction::Put, buf.addr(), 64, 0, &mut script)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::S3Error);
    assert_eq!(*seen.lock().unwrap(), Some(Err(ErrorKind::Busy)));
    inst.deregister(buf.addr()).unwrap();
}

#[test]
fn each_token_grants_only_its_direction() {
    use hipobj::Direction;
    use hipobj_platform::AccessFlags;
    let p = fake(0, FakeDeviceSpec::default());
    let lib = started(&p, 1);
    let inst = lib.instance().unwrap();
    let buf = host_buf(4096);
    inst.register_host(buf).unwrap();
    let key = |dir| {
        let hex = inst.rdma_token(buf.addr(), 4096, dir).unwrap();
        hipobj_proto::Token::decode(hex.as_bytes()).unwrap().rkey
    };
    let put = p.verbs.mr_access(key(Direction::Put)).unwrap();
    let get = p.verbs.mr_access(key(Direction::Get)).unwrap();
    assert!(put.contains(AccessFlags::REMOTE_READ), "{put:?}");
    assert!(
        !put.contains(AccessFlags::REMOTE_WRITE),
        "a PUT token must not let the server write: {put:?}"
    );
    assert!(get.contains(AccessFlags::REMOTE_WRITE), "{get:?}");
    assert!(
        !get.contains(AccessFlags::REMOTE_READ),
        "a GET token must not let the server read: {get:?}"
    );
}

/// A binding's stream argument reaches the GPU runtime's stream
/// synchronize with the handle unchanged; a handle the runtime refuses is
/// `InvalidValue` carrying the runtime's error number, and a host with no
/// GPU runtime refuses every stream.
#[test]
fn a_stream_is_synchronized_through_the_gpu_runtime() {
    let p = gpu_platform(false);
    let lib = start(&p, Options::default());
    let inst = lib.instance().unwrap();
    inst.synchronize_stream(0xdead_b000).unwrap();
    inst.synchronize_stream(0).unwrap();
    assert_eq!(p.gpu.synced_streams(), [0xdead_b000, 0]);

    p.faults.set("stream_synchronize", Fault::Fail);
    let e = inst.synchronize_stream(0x42).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidValue);
    assert_eq!(e.gpu_error(), 1, "the runtime's error number is kept");
    assert!(e.to_string().contains("0x42"), "{e}");
    assert_eq!(
        p.gpu.synced_streams().len(),
        2,
        "a failed synchronize is not counted"
    );

    let none = hipobj_platform::NoGpu::new("test");
    let e = hipobj_platform::GpuRuntime::stream_synchronize(&none, 0).unwrap_err();
    assert_eq!(e.call, "stream_synchronize");
}
