//! A check of the CUDA backend on a machine with an NVIDIA GPU and its
//! driver (only `libcuda.so.1`; no toolkit). Run it through
//! `scripts/gpu-check.sh`.
//!
//! Every line starts with a label: `INFO` for facts, `PASS` or `FAIL` for
//! checks, and a final `RESULT`. The exit status is 0 only when every check
//! passed; 2 when CUDA did not load or sees no GPU.

use std::io::{Seek, SeekFrom};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hipobj::{Config, Control, ControlError, Direction, Library, Options};
use hipobj_gpu::cuda::CudaRuntime;
use hipobj_platform::NoTopology;
use hipobj_platform::fake::{FakeDeviceSpec, FakeTopology, FakeVerbs, Faults};
use hipobj_platform::gpu::wait_for_copy;
use hipobj_platform::{GpuRuntime, MemRegion, Platform, PointerKind};
use hipobj_softroce::{SoftConfig, SoftVerbs};
use hipobj_target::double::{Action, ObjectServer};
use hipobj_target::{Target, TargetConfig};

const LEN: usize = 4 << 20;
const COPY_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Report {
    failures: Vec<String>,
}

impl Report {
    fn info(&self, what: &str, value: impl std::fmt::Display) {
        println!("INFO  {what}: {value}");
    }

    fn check(&mut self, what: &str, ok: bool, detail: impl std::fmt::Display) -> bool {
        if ok {
            println!("PASS  {what}: {detail}");
        } else {
            println!("FAIL  {what}: {detail}");
            self.failures.push(what.to_owned());
        }
        ok
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

/// One copy through the seam, waited for; says what happened.
fn copy(rt: &dyn GpuRuntime, dst: usize, src: usize, len: usize) -> Result<Duration, String> {
    let start = Instant::now();
    let event = rt.copy_async(dst, src, len).map_err(|e| e.to_string())?;
    match wait_for_copy(event.as_ref(), COPY_TIMEOUT) {
        Ok(true) => Ok(start.elapsed()),
        Ok(false) => Err(format!("not done after {COPY_TIMEOUT:?}")),
        Err(e) => Err(e.to_string()),
    }
}

fn main() {
    let started = Instant::now();
    let mut r = Report::default();
    let rt = match CudaRuntime::load() {
        Ok(rt) => rt,
        Err(e) => {
            println!("FAIL  load: {e}");
            println!("RESULT FAIL (CUDA did not load)");
            std::process::exit(2);
        }
    };
    r.info("library", rt.library());
    r.info("driver version", rt.driver_version());
    r.info("cuMemGetHandleForAddressRange present", rt.has_dmabuf_export());
    let count = match rt.device_count() {
        Ok(n) if n > 0 => n,
        other => {
            println!("FAIL  device count: {other:?}");
            println!("RESULT FAIL (no GPU)");
            std::process::exit(2);
        }
    };
    r.info("device count", count);
    for d in 0..count.min(16) {
        match rt.pci_bus_id(d) {
            Ok(id) => {
                let ok = id.len() == 12 && id == id.to_ascii_lowercase();
                r.check(&format!("pci bus id of GPU {d}"), ok, &id);
            }
            Err(e) => {
                r.check(&format!("pci bus id of GPU {d}"), false, e);
            }
        }
    }
    let current = rt.current_device();
    r.check(
        "current device (no context current: primary context of GPU 0)",
        current == Ok(0),
        format!("{current:?}"),
    );
    let dmabuf_attr = rt.dma_buf_supported(0);
    r.info(
        "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED of GPU 0",
        format!("{dmabuf_attr:?}"),
    );

    // Device memory and what the runtime says about it.
    let dev = match rt.alloc_device(LEN) {
        Ok(d) => d,
        Err(e) => {
            r.check("cuMemAlloc 4 MiB", false, e);
            finish(&r, started);
        }
    };
    r.info("device buffer", format!("{:#x}+{}", dev.addr(), dev.len()));
    let info = rt.pointer_info(dev.addr());
    r.check(
        "pointer_info(device base)",
        matches!(&info, Ok(i) if i.kind == PointerKind::Device(0) && i.allocation.is_some_and(|(b, s)| b == dev.addr() && s >= LEN)),
        format!("{info:?}"),
    );
    let inner = rt.pointer_info(dev.addr() + 12345);
    r.check(
        "pointer_info(device base + 12345)",
        matches!(&inner, Ok(i) if i.kind == PointerKind::Device(0) && i.allocation.is_some_and(|(b, _)| b == dev.addr())),
        format!("{inner:?}"),
    );
    let plain = vec![0u8; 4096];
    let pinfo = rt.pointer_info(plain.as_ptr() as usize);
    r.check(
        "pointer_info(malloc memory)",
        matches!(&pinfo, Ok(i) if i.kind == PointerKind::Unknown),
        format!("{pinfo:?}"),
    );

    // Pinned host memory.
    let (a, b) = match (rt.alloc_pinned_buffer(LEN), rt.alloc_pinned_buffer(LEN)) {
        (Ok(a), Ok(b)) => (a, b),
        (a, b) => {
            r.check(
                "cuMemHostAlloc 2 x 4 MiB",
                false,
                format!("{:?} / {:?}", a.err(), b.err()),
            );
            finish(&r, started);
        }
    };
    use hipobj_platform::PinnedHostBuffer;
    let hinfo = rt.pointer_info(a.addr());
    r.check(
        "pointer_info(pinned host)",
        matches!(&hinfo, Ok(i) if i.kind == PointerKind::Host),
        format!("{hinfo:?}"),
    );

    // dma-buf export.
    for (what, off, len) in [
        ("whole buffer", 0usize, LEN),
        ("unaligned range +100, 1000 bytes", 100, 1000),
    ] {
        match rt.export_dmabuf(dev.addr() + off, len) {
            Ok(buf) => {
                let mut f = std::fs::File::from(buf.fd);
                let size = f.seek(SeekFrom::End(0)).map_err(|e| e.to_string());
                let ok = buf.offset == (((dev.addr() + off) % hipobj_gpu::host_page_size()) as u64)
                    && size.as_ref().is_ok_and(|&s| s >= buf.offset + len as u64);
                r.check(
                    &format!("dma-buf export, {what}"),
                    ok,
                    format!("offset {} size {:?}", buf.offset, size),
                );
            }
            Err(e) => {
                // Only a failure if the driver claims dma-buf support.
                let claimed = matches!(dmabuf_attr, Ok(true));
                if claimed {
                    r.check(&format!("dma-buf export, {what}"), false, e);
                } else {
                    r.info(&format!("dma-buf export, {what} (not supported here)"), e);
                }
            }
        }
    }

    // Copies: host A -> device -> host B, through the seam's copy + event.
    let data = pattern(LEN, 7);
    a.write(0, &data);
    b.write(0, &vec![0u8; LEN]);
    let up = copy(&rt, dev.addr(), a.addr(), LEN);
    r.check("copy_async host->device 4 MiB", up.is_ok(), format!("{up:?}"));
    let down = copy(&rt, b.addr(), dev.addr(), LEN);
    r.check("copy_async device->host 4 MiB", down.is_ok(), format!("{down:?}"));
    let back = b.read(0, LEN).unwrap_or_default();
    let first_diff = back.iter().zip(&data).position(|(x, y)| x != y);
    r.check(
        "bytes round-trip host->device->host",
        back == data,
        format!("first difference at {first_diff:?}"),
    );

    // An offset copy: 1000 bytes from device offset 4097 to host offset 3.
    b.write(0, &vec![0u8; 8192]);
    let part = copy(&rt, b.addr() + 3, dev.addr() + 4097, 1000);
    let got = b.read(3, 1000).unwrap_or_default();
    r.check(
        "offset copy device+4097 -> host+3, 1000 bytes",
        part.is_ok() && got.as_slice() == &data[4097..5097],
        format!("{part:?}"),
    );
    let sync = rt.synchronize();
    r.check("synchronize", sync.is_ok(), format!("{sync:?}"));

    // The same from a second thread, which has no current context either.
    let rt2 = rt.clone();
    let (b_addr, d_addr) = (b.addr(), dev.addr());
    let other = std::thread::spawn(move || {
        let info = rt2.pointer_info(d_addr).map(|i| i.kind);
        let c = copy(&rt2, b_addr, d_addr, 65536);
        (info, c)
    })
    .join();
    match other {
        Ok((info, c)) => {
            let got = b.read(0, 65536).unwrap_or_default();
            r.check(
                "second thread: pointer_info and copy",
                info == Ok(PointerKind::Device(0)) && c.is_ok() && got.as_slice() == &data[..65536],
                format!("{info:?} {c:?}"),
            );
        }
        Err(_) => {
            r.check("second thread", false, "panicked");
        }
    }

    // Through the core: init for GPU 0 on the fake NIC, then register.
    let gpu: Arc<dyn GpuRuntime> = Arc::new(rt.clone());
    let faults = Faults::default();
    let platform = Platform {
        verbs: Arc::new(FakeVerbs::new(vec![FakeDeviceSpec::default()], faults.clone())),
        gpu,
        topology: Arc::new(FakeTopology::new(Vec::new(), faults)),
    };
    let lib = Library::new();
    let config = Config {
        flags: 0,
        gpu_device: 0,
        nic_hint: Some("fake0".into()),
    };
    match lib.init(&config, || Ok(platform), Options::default) {
        Ok(()) => {
            let chosen = lib.instance().map(|i| i.chosen().clone());
            r.check(
                "core init for GPU 0",
                matches!(&chosen, Ok(c) if c.gpu == Some(0) && c.gpu_pci.is_some()),
                format!("{:?}", chosen.as_ref().map(|c| (&c.gpu, &c.gpu_pci))),
            );
            if let Ok(inst) = lib.instance() {
                let host = MemRegion::from_static(Box::leak(vec![0u8; 8192].into_boxed_slice()));
                let reg = inst.register_host(host);
                r.check("core register_host", reg.is_ok(), format!("{reg:?}"));
            }
            lib.shutdown();
        }
        Err(e) => {
            r.check("core init for GPU 0", false, e);
        }
    }
    staged_on_the_soft_nic(&mut r, &rt);
    drop((a, b, dev));
    finish(&r, started);
}

/// The server's side of a transfer, in process: the server double
/// (`hipobj_target::double`) on a second soft RoCE device, keeping the
/// object "gpu" in memory.
struct Serve<'a> {
    server: &'a ObjectServer,
    put: bool,
    reply: Option<String>,
}

impl Control for Serve<'_> {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        let op = if self.put {
            Action::Put("gpu".into())
        } else {
            Action::Get("gpu".into())
        };
        self.reply = Some(self.server.serve(&op, token).map_err(ControlError)?);
        Ok(())
    }

    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        let r = self.reply.take().ok_or_else(|| ControlError("no reply".into()))?;
        reply[..r.len()].copy_from_slice(r.as_bytes());
        Ok(r.len())
    }
}

/// cuMemAlloc'd memory through the library on the soft RoCE NIC: says
/// whether registration chose dma-buf, a plain MR or staging, then PUTs from
/// GPU memory and GETs into GPU memory, checking the bytes with the GPU's
/// own copies.
#[allow(unsafe_code)]
fn staged_on_the_soft_nic(r: &mut Report, rt: &CudaRuntime) {
    use hipobj_platform::PinnedHostBuffer;
    const LEN: usize = 8 << 20;
    let platform = Platform {
        verbs: Arc::new(SoftVerbs::new(SoftConfig {
            name: "softroce-gpu".into(),
            ..SoftConfig::default()
        })),
        gpu: Arc::new(rt.clone()),
        topology: Arc::new(NoTopology),
    };
    let lib = Library::new();
    let config = Config {
        flags: 0,
        gpu_device: 0,
        nic_hint: Some("softroce-gpu".into()),
    };
    if let Err(e) = lib.init(&config, || Ok(platform), Options::default) {
        r.check("soft NIC: init for GPU 0", false, e);
        return;
    }
    let Ok(inst) = lib.instance() else { return };
    let server = SoftVerbs::new(SoftConfig {
        name: "softroce-gpu-srv".into(),
        ..SoftConfig::default()
    });
    let server = match Target::open(
        &server,
        &NoTopology,
        Some("softroce-gpu-srv"),
        TargetConfig::default(),
    ) {
        Ok(t) => ObjectServer::new(t),
        Err(e) => {
            r.check("soft NIC: server peer", false, e);
            return;
        }
    };
    let (Ok(src), Ok(dst), Ok(host)) = (
        rt.alloc_device(LEN),
        rt.alloc_device(LEN),
        rt.alloc_pinned_buffer(LEN),
    ) else {
        r.check(
            "soft NIC: allocations",
            false,
            "cuMemAlloc or cuMemHostAlloc failed",
        );
        return;
    };
    let want = pattern(LEN, 7);
    host.write(0, &want);
    if let Err(e) = copy(rt, src.addr(), host.addr(), LEN) {
        r.check("soft NIC: fill GPU memory", false, e);
        return;
    }
    // SAFETY: both device buffers outlive the instance (shut down below).
    let (src_r, dst_r) = unsafe { (MemRegion::new(src.addr(), LEN), MemRegion::new(dst.addr(), LEN)) };
    let reg = inst
        .register_device(src_r)
        .and_then(|()| inst.register_device(dst_r));
    if !r.check(
        "soft NIC: register cuMemAlloc memory",
        reg.is_ok(),
        format!("{reg:?}"),
    ) {
        return;
    }
    let kind = inst.buffers().find(src.addr()).map(|e| e.kind());
    r.info(
        "soft NIC: registration chose",
        format!("{kind:?} (Staged: through pinned host memory)"),
    );
    let t = Instant::now();
    let mut put = Serve {
        server: &server,
        put: true,
        reply: None,
    };
    let res = inst.transfer(Direction::Put, src.addr(), LEN, 0, &mut put);
    let ok = res.is_ok()
        && server
            .objects
            .lock()
            .map(|o| o.get("gpu") == Some(&want))
            .unwrap_or(false);
    r.check(
        "soft NIC: PUT 8 MiB from GPU memory",
        ok,
        format!("{res:?} in {:?}", t.elapsed()),
    );
    let t = Instant::now();
    let mut get = Serve {
        server: &server,
        put: false,
        reply: None,
    };
    let res = inst.transfer(Direction::Get, dst.addr(), LEN, 0, &mut get);
    host.write(0, &vec![0u8; LEN]);
    let back = copy(rt, host.addr(), dst.addr(), LEN).map(|_| host.read(0, LEN).unwrap_or_default());
    let ok = res.is_ok() && matches!(&back, Ok(b) if *b == want);
    r.check(
        "soft NIC: GET 8 MiB into GPU memory",
        ok,
        format!("{res:?} in {:?}", t.elapsed()),
    );
    let _ = inst.deregister(src.addr());
    let _ = inst.deregister(dst.addr());
    drop(inst);
    lib.shutdown();
}

fn finish(r: &Report, started: Instant) -> ! {
    println!("INFO  elapsed: {:?}", started.elapsed());
    if r.failures.is_empty() {
        println!("RESULT PASS");
        std::process::exit(0);
    }
    println!(
        "RESULT FAIL ({} failed: {})",
        r.failures.len(),
        r.failures.join(", ")
    );
    std::process::exit(1);
}
