//! The sysfs topology and the selection rules, over fake sysfs trees built in
//! a temporary folder.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use hipobj_ibverbs::SysfsTopology;
use hipobj_platform::fake::{FakeDeviceSpec, FakeVerbs, Faults};
use hipobj_platform::selection::{self, GpuLocation, NicHint, SelectionErrorKind};
use hipobj_platform::{Gid, GidKind, Mtu, NicTopology, PortState};

const V4: &str = "0000:0000:0000:0000:0000:ffff:c000:0201";
const V4_B: &str = "0000:0000:0000:0000:0000:ffff:c000:0202";
const LINK_LOCAL: &str = "fe80:0000:0000:0000:0202:c9ff:fe00:0001";
const GLOBAL: &str = "2001:0db8:0000:0000:0202:c9ff:fe00:0001";
const ZERO: &str = "0000:0000:0000:0000:0000:0000:0000:0000";

/// A fake `/sys` in a temporary folder.
struct Tree {
    dir: tempfile::TempDir,
}

/// One GID table entry: its text and its `gid_attrs/types` line (`None`: unreadable).
type Entry<'a> = (&'a str, Option<&'a str>);

impl Tree {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn write(&self, rel: impl AsRef<Path>, text: &str) {
        let p = self.root().join(rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(p, text).expect("write");
    }

    /// A PCI device at `path` (root port first) under `pci<domain>:<bus>`,
    /// with `bus/pci/devices/<addr>` linking to it. Returns its folder.
    fn pci(&self, path: &[&str], numa: Option<i32>, vendor: Option<&str>) -> PathBuf {
        let first = path.first().expect("non-empty path");
        let mut dir = self.root().join("devices").join(format!("pci{}", &first[..7]));
        for comp in path {
            dir.push(comp);
        }
        fs::create_dir_all(&dir).expect("mkdir");
        fs::write(dir.join("numa_node"), format!("{}\n", numa.unwrap_or(-1))).expect("numa");
        if let Some(v) = vendor {
            fs::write(dir.join("vendor"), format!("{v}\n")).expect("vendor");
        }
        let bus = self.root().join("bus/pci/devices");
        fs::create_dir_all(&bus).expect("mkdir");
        let link = bus.join(path.last().expect("addr"));
        if !link.exists() {
            symlink(&dir, link).expect("symlink");
        }
        dir
    }

    /// An RDMA device `name`, on the PCI device at `pci_dir` (or virtual).
    fn nic(&self, name: &str, pci_dir: Option<&Path>) {
        let dir = self.root().join("class/infiniband").join(name);
        fs::create_dir_all(&dir).expect("mkdir");
        if let Some(pci) = pci_dir {
            symlink(pci, dir.join("device")).expect("symlink");
        }
    }

    fn port(&self, nic: &str, port: u8, state: &str, gids: &[Entry<'_>]) {
        let base = format!("class/infiniband/{nic}/ports/{port}");
        self.write(format!("{base}/state"), &format!("{state}\n"));
        for (i, (gid, kind)) in gids.iter().enumerate() {
            self.write(format!("{base}/gids/{i}"), &format!("{gid}\n"));
            if let Some(k) = kind {
                self.write(format!("{base}/gid_attrs/types/{i}"), &format!("{k}\n"));
            }
        }
    }

    fn topology(&self) -> SysfsTopology {
        SysfsTopology::new(self.root())
    }
}

fn roce(gid: &str) -> Entry<'_> {
    (gid, Some("RoCE v2"))
}

fn v1(gid: &str) -> Entry<'_> {
    (gid, Some("IB/RoCE v1"))
}

const ACTIVE: &str = "4: ACTIVE";
const DOWN: &str = "1: DOWN";

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// A two-socket host: a GPU behind a switch under root port 00:01.0 (NUMA 0),
/// one NIC behind the same switch, one on the same root port's other
/// branch, and one under the other socket's root complex.
fn two_socket_host(t: &Tree) -> GpuLocation {
    t.pci(&["0000:00:01.0"], Some(0), None);
    t.pci(&["0000:00:01.0", "0000:01:00.0"], Some(0), None);
    t.pci(&["0000:00:01.0", "0000:01:00.0", "0000:02:08.0"], Some(0), None);
    t.pci(
        &["0000:00:01.0", "0000:01:00.0", "0000:02:08.0", "0000:03:00.0"],
        Some(0),
        Some("0x1002"),
    );
    let near = t.pci(
        &["0000:00:01.0", "0000:01:00.0", "0000:02:10.0", "0000:04:00.0"],
        Some(0),
        Some("0x14e4"),
    );
    let mid = t.pci(&["0000:00:01.0", "0000:05:00.0"], Some(0), Some("0x1dd8"));
    let far = t.pci(&["0000:80:01.0", "0000:81:00.0"], Some(1), Some("0x15b3"));
    t.nic("bnxt_re0", Some(&near));
    t.nic("ionic_0", Some(&mid));
    t.nic("mlx5_0", Some(&far));
    for nic in ["bnxt_re0", "ionic_0", "mlx5_0"] {
        t.port(nic, 1, ACTIVE, &[v1(LINK_LOCAL), roce(LINK_LOCAL), roce(V4)]);
    }
    GpuLocation::locate(&t.topology(), "0000:03:00.0")
}

#[test]
fn reads_nics_ports_gids_and_pci_paths() {
    let t = Tree::new();
    let gpu = two_socket_host(&t);
    assert_eq!(
        gpu.pci_path,
        strings(&["0000:00:01.0", "0000:01:00.0", "0000:02:08.0", "0000:03:00.0"])
    );
    assert_eq!(gpu.numa_node, Some(0));
    let nics = t.topology().nics().expect("nics");
    let names: Vec<_> = nics.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["bnxt_re0", "ionic_0", "mlx5_0"]);
    let b = &nics[0];
    assert_eq!(b.pci_addr.as_deref(), Some("0000:04:00.0"));
    assert_eq!(
        b.pci_path,
        strings(&["0000:00:01.0", "0000:01:00.0", "0000:02:10.0", "0000:04:00.0"])
    );
    assert_eq!((b.numa_node, b.vendor_id), (Some(0), Some(0x14e4)));
    assert_eq!(nics[2].numa_node, Some(1));
    let port = &b.ports[0];
    assert!(port.active);
    let kinds: Vec<_> = port.gids.iter().map(|g| (g.index, g.kind)).collect();
    assert_eq!(
        kinds,
        [(0, GidKind::RoceV1), (1, GidKind::RoceV2), (2, GidKind::RoceV2)]
    );
    assert_eq!(port.gids[2].gid.to_string(), "::ffff:192.0.2.1");
    // Other PCI devices (bridges, GPUs) are found through bus/pci/devices.
    assert_eq!(t.topology().pci_path("0000:00:01.0").len(), 1);
    assert_eq!(t.topology().numa_node("0000:81:00.0"), Some(1));
    assert!(t.topology().pci_path("0000:99:00.0").is_empty());
    assert!(t.topology().pci_path("../../etc").is_empty());
}

#[test]
fn a_missing_subsystem_is_no_nics() {
    let t = Tree::new();
    assert!(t.topology().nics().expect("nics").is_empty());
    assert!(
        SysfsTopology::new("/nonexistent/sys")
            .nics()
            .expect("nics")
            .is_empty()
    );
}

#[test]
fn virtual_devices_have_no_pci_path() {
    let t = Tree::new();
    t.nic("rxe0", None);
    t.port("rxe0", 1, ACTIVE, &[roce(LINK_LOCAL), roce(V4)]);
    let nics = t.topology().nics().expect("nics");
    assert_eq!(nics[0].pci_addr, None);
    assert!(nics[0].pci_path.is_empty());
    assert_eq!((nics[0].numa_node, nics[0].vendor_id), (None, None));
}

#[test]
fn rule_closest_on_the_pcie_tree() {
    let t = Tree::new();
    let gpu = two_socket_host(&t);
    let nics = t.topology().nics().expect("nics");
    let c = selection::choose_nic(&nics, Some(&gpu), &NicHint::default()).expect("a NIC");
    assert_eq!(c.device, "bnxt_re0", "{}", c.why);
    // Without the switch neighbour, the NIC on the same root port wins.
    let c = selection::choose_nic(&nics[1..], Some(&gpu), &NicHint::default()).expect("a NIC");
    assert_eq!(c.device, "ionic_0");
}

#[test]
fn rule_same_numa_then_name() {
    let t = Tree::new();
    t.pci(&["0000:00:01.0", "0000:01:00.0"], Some(1), None);
    let n0 = t.pci(&["0000:40:01.0", "0000:41:00.0"], Some(0), None);
    let n1 = t.pci(&["0000:80:01.0", "0000:81:00.0"], Some(1), None);
    let n2 = t.pci(&["0000:90:01.0", "0000:91:00.0"], Some(1), None);
    t.nic("a_numa0", Some(&n0));
    t.nic("c_numa1", Some(&n1));
    t.nic("b_numa1", Some(&n2));
    for n in ["a_numa0", "b_numa1", "c_numa1"] {
        t.port(n, 1, ACTIVE, &[roce(V4)]);
    }
    let topo = t.topology();
    let gpu = GpuLocation::locate(&topo, "0000:01:00.0");
    let nics = topo.nics().expect("nics");
    let c = selection::choose_nic(&nics, Some(&gpu), &NicHint::default()).expect("a NIC");
    assert_eq!(c.device, "b_numa1", "same NUMA node, then name");
}

#[test]
fn rule_hint_is_an_allow_list() {
    let t = Tree::new();
    let gpu = two_socket_host(&t);
    let nics = t.topology().nics().expect("nics");
    let hint = NicHint::parse(Some("mlx5_0, ionic_0"));
    let c = selection::choose_nic(&nics, Some(&gpu), &hint).expect("a NIC");
    assert_eq!(c.device, "ionic_0");
}

#[test]
fn rule_without_a_gpu_the_hint_is_the_device() {
    let t = Tree::new();
    two_socket_host(&t);
    let nics = t.topology().nics().expect("nics");
    let e = selection::choose_nic(&nics, None, &NicHint::default()).expect_err("nothing says which");
    assert_eq!(e.kind, SelectionErrorKind::NoGpuNoHint);
    let c = selection::choose_nic(&nics, None, &NicHint::parse(Some("mlx5_0"))).expect("mlx5_0");
    assert_eq!(c.device, "mlx5_0");
}

#[test]
fn rule_only_nics_with_an_active_port() {
    let t = Tree::new();
    let gpu = two_socket_host(&t);
    t.port("bnxt_re0", 1, DOWN, &[roce(V4)]);
    let nics = t.topology().nics().expect("nics");
    assert!(!nics[0].ports[0].active);
    let c = selection::choose_nic(&nics, Some(&gpu), &NicHint::default()).expect("a NIC");
    assert_eq!(c.device, "ionic_0");
}

#[test]
fn rule_lowest_active_port() {
    let t = Tree::new();
    t.nic("mlx5_0", None);
    t.port("mlx5_0", 1, DOWN, &[roce(V4)]);
    t.port("mlx5_0", 2, ACTIVE, &[roce(V4_B)]);
    t.port("mlx5_0", 3, ACTIVE, &[roce(V4)]);
    let nics = t.topology().nics().expect("nics");
    let c = selection::choose_nic(&nics, None, &NicHint::parse(Some("mlx5_0"))).expect("a NIC");
    assert_eq!(c.port, Some(2));
    assert_eq!(c.gid.map(|g| g.gid.to_string()), Some("::ffff:192.0.2.2".into()));
}

#[test]
fn rule_gid_preference_and_lowest_index() {
    let t = Tree::new();
    t.nic("n0", None);
    // Unused, unknown-version, v1 link-local, v1 global, v2 link-local, v2 global, v2 IPv4 twice.
    t.port(
        "n0",
        1,
        ACTIVE,
        &[
            (ZERO, None),
            (V4, None),
            v1(LINK_LOCAL),
            v1(GLOBAL),
            roce(LINK_LOCAL),
            roce(GLOBAL),
            roce(V4_B),
            roce(V4),
        ],
    );
    let nics = t.topology().nics().expect("nics");
    let gids = &nics[0].ports[0].gids;
    assert_eq!(gids.len(), 7, "the unused entry is left out");
    assert_eq!(gids[0].kind, GidKind::Unknown);
    let mut table = gids.clone();
    let mut order = Vec::new();
    while let Some(best) = selection::choose_gid(&table) {
        order.push(best.index);
        table.retain(|g| g.index != best.index);
    }
    assert_eq!(
        order,
        [6, 7, 5, 4, 3, 2],
        "v2 IPv4 (lowest index first), v2 global, v2 LL, v1 global, v1 LL"
    );
}

#[test]
fn rule_no_candidate_is_an_error() {
    let t = Tree::new();
    t.nic("n0", None);
    t.port("n0", 1, ACTIVE, &[(V4, None)]);
    t.nic("n1", None);
    t.port("n1", 1, DOWN, &[roce(V4)]);
    let nics = t.topology().nics().expect("nics");
    let gpu = GpuLocation::default();
    let e = selection::choose_nic(&nics, Some(&gpu), &NicHint::default()).expect_err("no candidate");
    assert_eq!(e.kind, SelectionErrorKind::NoCandidate);
    let e = selection::choose_nic(&nics, None, &NicHint::parse(Some("n0"))).expect_err("no usable gid");
    assert_eq!(e.kind, SelectionErrorKind::NoCandidate);
}

#[test]
fn select_takes_the_mtu_from_the_port() {
    let t = Tree::new();
    t.nic("fake0", None);
    t.port("fake0", 1, ACTIVE, &[roce(LINK_LOCAL), roce(V4)]);
    let verbs = FakeVerbs::new(
        vec![FakeDeviceSpec {
            active_mtu: Mtu::Mtu1024,
            ..FakeDeviceSpec::default()
        }],
        Faults::default(),
    );
    let (dev, sel) = selection::select(&verbs, &t.topology(), None, Some("fake0")).expect("selected");
    assert_eq!(dev.name(), "fake0");
    assert_eq!((sel.port, sel.gid_index, sel.mtu), (1, 1, Mtu::Mtu1024));
    assert_eq!(sel.gid, Gid::from_ipv4(std::net::Ipv4Addr::new(192, 0, 2, 1)));
    assert!(sel.to_string().contains("mtu 1024"), "{sel}");
}

#[test]
fn select_opens_an_unlisted_hint_by_name() {
    // The soft NIC has no sysfs entry: port and GID come from verbs.
    let t = Tree::new();
    let verbs = FakeVerbs::new(vec![FakeDeviceSpec::default()], Faults::default());
    let (_, sel) = selection::select(&verbs, &t.topology(), None, Some("fake0")).expect("selected");
    assert_eq!((sel.port, sel.gid_index, sel.gid_kind), (1, 0, GidKind::Unknown));
    assert_eq!(sel.mtu, Mtu::Mtu4096);
    let down = FakeVerbs::new(
        vec![FakeDeviceSpec {
            port_state: PortState::Down,
            ..FakeDeviceSpec::default()
        }],
        Faults::default(),
    );
    let e = selection::select(&down, &t.topology(), None, Some("fake0")).expect_err("down");
    assert_eq!(e.kind, SelectionErrorKind::NoCandidate);
    let e = selection::select(&verbs, &t.topology(), None, Some("nope0")).expect_err("no such device");
    assert_eq!(e.kind, SelectionErrorKind::Verbs);
}
