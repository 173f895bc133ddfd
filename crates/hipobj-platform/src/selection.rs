//! NIC, port and GID selection: pure functions over what the seams report.
//!
//! Init (and the CLI's `devices` command) choose in three steps:
//!
//! 1. [`choose_nic`]: which device, from the [`NicInfo`] list of the
//!    topology, the GPU's place on the PCIe tree, and `nicHint`.
//! 2. [`choose_port`] and [`choose_gid`]: which port and which GID table
//!    entry on that device.
//! 3. [`Choice::with_port_attr`]: the MTU, from the chosen port's
//!    `ibv_query_port`, which sysfs does not report.
//!
//! [`select`] runs all three over the seams. Every rule is written down in
//! `docs/nic-selection.md`; the functions here are the rules, one each, so
//! that the tests can pin each of them.

use std::cmp::Ordering;
use std::fmt;

use crate::topology::{GidInfo, GidKind, NicInfo, NicPort, NicTopology};
use crate::verbs::{Device, Gid, Mtu, PortAttr, PortState, Verbs, VerbsError};

/// Where the GPU sits, as far as the topology knows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuLocation {
    /// The GPU's PCI address (`dddd:bb:dd.f`), as the GPU runtime reports it.
    pub pci_addr: String,
    /// PCI addresses from the root port down to the GPU (inclusive); empty when unknown.
    pub pci_path: Vec<String>,
    /// The GPU's NUMA node, when known.
    pub numa_node: Option<i32>,
}

impl GpuLocation {
    /// Looks the GPU at `pci_addr` up in the topology.
    pub fn locate(topology: &dyn NicTopology, pci_addr: &str) -> Self {
        let addr = pci_addr.trim().to_ascii_lowercase();
        Self {
            pci_path: topology.pci_path(&addr),
            numa_node: topology.numa_node(&addr),
            pci_addr: addr,
        }
    }
}

/// Why no NIC could be chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SelectionErrorKind {
    /// There is no GPU and no `nicHint`, so nothing says which NIC to use.
    NoGpuNoHint,
    /// No NIC (allowed by the hint) has an active port with a usable GID.
    NoCandidate,
    /// The topology could not be read.
    Topology,
    /// A verbs call on the way failed (opening the device, querying the port).
    Verbs,
}

/// No NIC, port or GID could be chosen. The core maps every kind to
/// `hipObjNicNotFound`; `detail` says why, for people.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no usable RDMA NIC: {detail}")]
pub struct SelectionError {
    /// The class of failure.
    pub kind: SelectionErrorKind,
    /// A sentence for people.
    pub detail: String,
    /// The verbs error behind a [`SelectionErrorKind::Verbs`] failure.
    pub verbs: Option<VerbsError>,
}

impl SelectionError {
    fn new(kind: SelectionErrorKind, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
            verbs: None,
        }
    }

    fn verbs(err: VerbsError) -> Self {
        Self {
            kind: SelectionErrorKind::Verbs,
            detail: err.to_string(),
            verbs: Some(err),
        }
    }
}

/// The parsed `nicHint`: a comma-separated list of device names. Blank
/// entries and surrounding spaces are ignored; an empty hint is no hint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NicHint(Vec<String>);

impl NicHint {
    /// Parses a hint. `None`, `""` and `" , "` all mean "no hint".
    pub fn parse(hint: Option<&str>) -> Self {
        Self(
            hint.unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }

    /// Whether the hint names nothing.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The names, in the order given.
    pub fn names(&self) -> &[String] {
        &self.0
    }

    /// Whether the hint allows the device `name` (everything is allowed without a hint).
    pub fn allows(&self, name: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|n| n == name)
    }
}

/// How preferable a GID is: lower is better; `None` is not usable.
///
/// The order is RoCE v2 IPv4-mapped (0), RoCE v2 global (1), RoCE v2
/// link-local (2), RoCE v1 global or IPv4-mapped (3), RoCE v1 link-local (4).
/// Unused (all-zero) entries and entries whose RoCE version is unknown are not
/// usable.
pub fn gid_rank(info: &GidInfo) -> Option<u8> {
    if info.gid.is_zero() {
        return None;
    }
    match info.kind {
        GidKind::RoceV2 if info.gid.to_ipv4().is_some() => Some(0),
        GidKind::RoceV2 if info.gid.is_link_local() => Some(2),
        GidKind::RoceV2 => Some(1),
        GidKind::RoceV1 if info.gid.is_link_local() => Some(4),
        GidKind::RoceV1 => Some(3),
        GidKind::Unknown => None,
    }
}

/// How preferable a GID is by its address alone, for a device whose RoCE
/// versions nobody reports (one the topology does not list, such as the soft
/// NIC): IPv4-mapped (0), global (1), link-local (2); unused entries `None`.
pub fn gid_rank_by_address(gid: &Gid) -> Option<u8> {
    if gid.is_zero() {
        None
    } else if gid.to_ipv4().is_some() {
        Some(0)
    } else if gid.is_link_local() {
        Some(2)
    } else {
        Some(1)
    }
}

/// The best GID of a table by `rank`, ties to the lowest index.
fn best_gid_by(gids: &[GidInfo], rank: impl Fn(&GidInfo) -> Option<u8>) -> Option<GidInfo> {
    gids.iter()
        .filter_map(|g| rank(g).map(|r| (r, g.index, *g)))
        .min_by_key(|&(r, index, _)| (r, index))
        .map(|(_, _, g)| g)
}

/// The best GID of a port's table by [`gid_rank`], ties to the lowest index;
/// `None` when no entry is usable.
pub fn choose_gid(gids: &[GidInfo]) -> Option<GidInfo> {
    best_gid_by(gids, gid_rank)
}

/// The lowest-numbered active port that has a usable GID, with that GID.
pub fn choose_port(ports: &[NicPort]) -> Option<(&NicPort, GidInfo)> {
    ports
        .iter()
        .filter(|p| p.active)
        .filter_map(|p| choose_gid(&p.gids).map(|g| (p, g)))
        .min_by_key(|(p, _)| p.port)
}

/// How many leading components two PCI paths share: the length of their
/// common upstream path. Two devices behind the same switch share the root
/// port and the switch's ports; a device shares nothing with one under
/// another root port.
pub fn common_upstream(a: &[String], b: &[String]) -> usize {
    a.iter()
        .zip(b)
        .take_while(|(x, y)| x.eq_ignore_ascii_case(y))
        .count()
}

/// What was chosen before the port was queried: everything but the MTU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// The verbs device name.
    pub device: String,
    /// What the topology knows of it; `None` when the hint named a device the
    /// topology does not list, so the port and GID have to come from verbs.
    pub nic: Option<NicInfo>,
    /// The port, when already known from the topology.
    pub port: Option<u8>,
    /// The GID entry, when already known from the topology.
    pub gid: Option<GidInfo>,
    /// Why this device was chosen, for people.
    pub why: String,
}

/// The outcome of NIC selection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// The verbs device name.
    pub device: String,
    /// The port, numbered from 1.
    pub port: u8,
    /// Index of the GID in the port's table.
    pub gid_index: u32,
    /// The GID.
    pub gid: Gid,
    /// Its RoCE version ([`GidKind::Unknown`] for a device the topology does not list).
    pub gid_kind: GidKind,
    /// The port's active MTU, to use as the path MTU.
    pub mtu: Mtu,
    /// The NIC's PCI vendor id, when known (for the vendor QP attributes).
    pub vendor_id: Option<u16>,
    /// Why these were chosen, for people (`hipobj devices`, debug output).
    pub why: String,
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} port {} gid[{}] {} ({:?}), mtu {}: {}",
            self.device,
            self.port,
            self.gid_index,
            self.gid,
            self.gid_kind,
            self.mtu.bytes(),
            self.why
        )
    }
}

/// Orders two candidate NICs: the longer common upstream path with the GPU
/// first, then the GPU's NUMA node, then the name.
fn closer(gpu: &GpuLocation, a: &NicInfo, b: &NicInfo) -> Ordering {
    let shared = |n: &NicInfo| common_upstream(&gpu.pci_path, &n.pci_path);
    let same_numa = |n: &NicInfo| gpu.numa_node.is_some() && n.numa_node == gpu.numa_node;
    shared(b)
        .cmp(&shared(a))
        .then_with(|| same_numa(b).cmp(&same_numa(a)))
        .then_with(|| a.name.cmp(&b.name))
}

/// Chooses the NIC.
///
/// * Only NICs with an active port that has a usable GID are candidates, and
///   with a hint only those it names (the hint is an allow-list).
/// * With a GPU: the candidate closest to it on the PCIe tree (the longest
///   common upstream path), then one on the GPU's NUMA node, then by name.
/// * Without a GPU: the first hinted name that is a candidate.
/// * If no candidate is left and the hint names exactly one device that the
///   topology does not list, that device is opened by name (the soft NIC, or
///   a device without sysfs).
/// * Otherwise there is no NIC.
pub fn choose_nic(
    nics: &[NicInfo],
    gpu: Option<&GpuLocation>,
    hint: &NicHint,
) -> Result<Choice, SelectionError> {
    let mut candidates: Vec<&NicInfo> = nics
        .iter()
        .filter(|n| hint.allows(&n.name) && choose_port(&n.ports).is_some())
        .collect();
    let chosen = match gpu {
        Some(gpu) => {
            candidates.sort_by(|a, b| closer(gpu, a, b));
            candidates.first().map(|nic| {
                let shared = common_upstream(&gpu.pci_path, &nic.pci_path);
                let numa = match (gpu.numa_node, nic.numa_node) {
                    (Some(g), Some(n)) if g == n => format!(", same NUMA node {n}"),
                    _ => String::new(),
                };
                let why = format!(
                    "closest of {} candidate NIC(s) to GPU {}: {shared} shared PCIe upstream component(s){numa}",
                    candidates.len(),
                    gpu.pci_addr
                );
                (*nic, why)
            })
        }
        None if hint.is_empty() => {
            return Err(SelectionError::new(
                SelectionErrorKind::NoGpuNoHint,
                "there is no GPU to place a NIC near and no nicHint names one",
            ));
        }
        None => hint.names().iter().find_map(|name| {
            candidates
                .iter()
                .find(|n| &n.name == name)
                .map(|nic| (*nic, format!("named by nicHint ({name}); no GPU")))
        }),
    };
    if let Some((nic, why)) = chosen {
        let (port, gid) = choose_port(&nic.ports)
            .map(|(p, g)| (Some(p.port), Some(g)))
            .unwrap_or((None, None));
        return Ok(Choice {
            device: nic.name.clone(),
            nic: Some(nic.clone()),
            port,
            gid,
            why,
        });
    }
    if let [only] = hint.names()
        && !nics.iter().any(|n| &n.name == only)
    {
        return Ok(Choice {
            device: only.clone(),
            nic: None,
            port: None,
            gid: None,
            why: format!("named by nicHint ({only}), which the NIC topology does not list; opened by name"),
        });
    }
    let scope = if hint.is_empty() {
        String::from("no RDMA NIC")
    } else {
        format!("no NIC named in nicHint ({})", hint.names().join(","))
    };
    Err(SelectionError::new(
        SelectionErrorKind::NoCandidate,
        format!(
            "{scope} has an active port with a usable GID ({} NIC(s) listed)",
            nics.len()
        ),
    ))
}

impl Choice {
    /// Completes the choice with the chosen port's attributes: the port must
    /// still be active, and its active MTU becomes the path MTU.
    pub fn with_port_attr(self, attr: &PortAttr) -> Result<Selection, SelectionError> {
        let (Some(port), Some(gid)) = (self.port, self.gid) else {
            return Err(SelectionError::new(
                SelectionErrorKind::NoCandidate,
                format!("{}: no port and GID chosen yet", self.device),
            ));
        };
        if attr.state != PortState::Active {
            return Err(SelectionError::new(
                SelectionErrorKind::NoCandidate,
                format!("{} port {port} is {:?}, not active", self.device, attr.state),
            ));
        }
        Ok(Selection {
            device: self.device,
            port,
            gid_index: gid.index,
            gid: gid.gid,
            gid_kind: gid.kind,
            mtu: attr.active_mtu,
            vendor_id: self.nic.as_ref().and_then(|n| n.vendor_id),
            why: self.why,
        })
    }
}

/// Reads the ports and GID tables of an open device through verbs, for a
/// device the topology does not list. RoCE versions are unknown there.
pub fn ports_from_verbs(device: &dyn Device) -> Result<Vec<NicPort>, VerbsError> {
    let attr = device.attr()?;
    let mut ports = Vec::new();
    for port in 1..=attr.phys_port_cnt {
        let pa = device.query_port(port)?;
        let mut gids = Vec::new();
        if pa.state == PortState::Active {
            for index in 0..pa.gid_tbl_len {
                // Entries past the configured ones may fail to read; they are unused.
                if let Ok(gid) = device.query_gid(port, index)
                    && !gid.is_zero()
                {
                    gids.push(GidInfo {
                        index,
                        gid,
                        kind: GidKind::Unknown,
                    });
                }
            }
        }
        ports.push(NicPort {
            port,
            active: pa.state == PortState::Active,
            gids,
        });
    }
    Ok(ports)
}

/// The lowest-numbered active port with a GID, ranking GIDs by address alone
/// ([`gid_rank_by_address`]): the rule for devices the topology does not list.
pub fn choose_port_by_address(ports: &[NicPort]) -> Option<(&NicPort, GidInfo)> {
    ports
        .iter()
        .filter(|p| p.active)
        .filter_map(|p| best_gid_by(&p.gids, |g| gid_rank_by_address(&g.gid)).map(|g| (p, g)))
        .min_by_key(|(p, _)| p.port)
}

/// Runs the whole selection over the seams and opens the chosen device.
///
/// `gpu_pci_addr` is the GPU's PCI address from the GPU runtime, or `None`
/// without a GPU; `nic_hint` is `hipObjConfig_t::nicHint`.
pub fn select(
    verbs: &dyn Verbs,
    topology: &dyn NicTopology,
    gpu_pci_addr: Option<&str>,
    nic_hint: Option<&str>,
) -> Result<(std::sync::Arc<dyn Device>, Selection), SelectionError> {
    let nics = topology
        .nics()
        .map_err(|e| SelectionError::new(SelectionErrorKind::Topology, e.to_string()))?;
    let gpu = gpu_pci_addr.map(|addr| GpuLocation::locate(topology, addr));
    let hint = NicHint::parse(nic_hint);
    let mut choice = choose_nic(&nics, gpu.as_ref(), &hint)?;
    let device = verbs.open_device(&choice.device).map_err(SelectionError::verbs)?;
    if choice.port.is_none() {
        let ports = ports_from_verbs(device.as_ref()).map_err(SelectionError::verbs)?;
        let Some((port, gid)) = choose_port_by_address(&ports) else {
            return Err(SelectionError::new(
                SelectionErrorKind::NoCandidate,
                format!("{} has no active port with a configured GID", choice.device),
            ));
        };
        choice.port = Some(port.port);
        choice.gid = Some(gid);
    }
    let port = choice.port.unwrap_or(1);
    let attr = device.query_port(port).map_err(SelectionError::verbs)?;
    let selection = choice.with_port_attr(&attr)?;
    Ok((device, selection))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::LinkLayer;
    use std::net::Ipv4Addr;

    fn gid(index: u32, g: Gid, kind: GidKind) -> GidInfo {
        GidInfo { index, gid: g, kind }
    }

    fn link_local() -> Gid {
        let mut g = Gid::ZERO;
        g.0[0] = 0xfe;
        g.0[1] = 0x80;
        g.0[15] = 1;
        g
    }

    fn global() -> Gid {
        let mut g = Gid::ZERO;
        g.0[0] = 0x20;
        g.0[1] = 0x01;
        g.0[2] = 0x0d;
        g.0[3] = 0xb8;
        g.0[15] = 7;
        g
    }

    fn v4() -> Gid {
        Gid::from_ipv4(Ipv4Addr::new(192, 0, 2, 1))
    }

    fn port(n: u8, active: bool) -> NicPort {
        NicPort {
            port: n,
            active,
            gids: vec![
                gid(0, link_local(), GidKind::RoceV1),
                gid(1, v4(), GidKind::RoceV2),
            ],
        }
    }

    fn nic(name: &str, path: &[&str], numa: Option<i32>) -> NicInfo {
        NicInfo {
            name: name.into(),
            pci_addr: path.last().map(|s| (*s).to_owned()),
            pci_path: path.iter().map(|s| (*s).to_owned()).collect(),
            numa_node: numa,
            vendor_id: Some(0x14e4),
            ports: vec![port(1, true)],
        }
    }

    fn gpu(path: &[&str], numa: Option<i32>) -> GpuLocation {
        GpuLocation {
            pci_addr: path.last().map(|s| (*s).to_owned()).unwrap_or_default(),
            pci_path: path.iter().map(|s| (*s).to_owned()).collect(),
            numa_node: numa,
        }
    }

    fn port_attr(state: PortState, mtu: Mtu) -> PortAttr {
        PortAttr {
            state,
            max_mtu: Mtu::Mtu4096,
            active_mtu: mtu,
            gid_tbl_len: 4,
            lid: 0,
            link_layer: LinkLayer::Ethernet,
        }
    }

    #[test]
    fn gid_preference_order() {
        let table = [
            gid(0, link_local(), GidKind::RoceV1),
            gid(1, global(), GidKind::RoceV1),
            gid(2, link_local(), GidKind::RoceV2),
            gid(3, global(), GidKind::RoceV2),
            gid(4, v4(), GidKind::RoceV2),
        ];
        let ranks: Vec<_> = table.iter().map(gid_rank).collect();
        assert_eq!(ranks, [Some(4), Some(3), Some(2), Some(1), Some(0)]);
        // Removing the best each time walks down the order.
        for expect in (0..5).rev() {
            assert_eq!(
                choose_gid(&table[..=expect]).map(|g| g.index),
                Some(expect as u32)
            );
        }
    }

    #[test]
    fn gid_skips_unused_and_unknown() {
        let table = [
            gid(0, Gid::ZERO, GidKind::RoceV2),
            gid(1, v4(), GidKind::Unknown),
            gid(2, link_local(), GidKind::RoceV1),
        ];
        assert_eq!(choose_gid(&table).map(|g| g.index), Some(2));
        assert_eq!(choose_gid(&table[..2]), None);
        assert_eq!(choose_gid(&[]), None);
    }

    #[test]
    fn gid_ties_go_to_the_lowest_index() {
        let table = [
            gid(5, v4(), GidKind::RoceV2),
            gid(3, Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 1)), GidKind::RoceV2),
            gid(9, v4(), GidKind::RoceV2),
        ];
        assert_eq!(choose_gid(&table).map(|g| g.index), Some(3));
    }

    #[test]
    fn port_is_lowest_active_with_a_gid() {
        let mut p3 = port(3, true);
        let p2 = port(2, true);
        let p1 = port(1, false);
        let mut p0 = port(4, true);
        p0.gids.clear();
        p3.gids.truncate(1);
        let ports = [p3.clone(), p1, p0, p2];
        assert_eq!(choose_port(&ports).map(|(p, g)| (p.port, g.index)), Some((2, 1)));
        assert_eq!(
            choose_port(&ports[..1]).map(|(p, g)| (p.port, g.index)),
            Some((3, 0))
        );
        assert_eq!(choose_port(&[port(1, false)]), None);
    }

    #[test]
    fn common_upstream_counts_shared_components() {
        let a: Vec<String> = ["0000:00:01.0", "0000:01:00.0", "0000:02:08.0", "0000:03:00.0"]
            .map(String::from)
            .into();
        let b: Vec<String> = ["0000:00:01.0", "0000:01:00.0", "0000:02:10.0", "0000:05:00.0"]
            .map(String::from)
            .into();
        assert_eq!(common_upstream(&a, &b), 2);
        assert_eq!(common_upstream(&a, &a), 4);
        assert_eq!(common_upstream(&a, &[]), 0);
    }

    #[test]
    fn hint_parsing() {
        assert!(NicHint::parse(None).is_empty());
        assert!(NicHint::parse(Some(" , ,")).is_empty());
        let h = NicHint::parse(Some(" bnxt_re1, ,mlx5_0 "));
        assert_eq!(h.names(), ["bnxt_re1", "mlx5_0"]);
        assert!(h.allows("mlx5_0") && !h.allows("mlx5_1"));
        assert!(NicHint::default().allows("anything"));
    }

    #[test]
    fn nic_closest_on_the_pcie_tree_wins_over_string_distance() {
        // The bus-id string heuristic would pick 0000:c1 (shares "0000:c") for a
        // GPU at 0000:c3; the tree says the NIC behind the GPU's own switch.
        let g = gpu(
            &["0000:c0:01.0", "0000:c1:00.0", "0000:c2:00.0", "0000:c3:00.0"],
            Some(1),
        );
        let nics = [
            nic("near_by_string", &["0000:80:01.0", "0000:c1:00.0"], Some(1)),
            nic(
                "same_switch",
                &["0000:c0:01.0", "0000:c1:00.0", "0000:c2:04.0", "0000:44:00.0"],
                Some(1),
            ),
            nic("same_root", &["0000:c0:01.0", "0000:d0:00.0"], Some(1)),
        ];
        let c = choose_nic(&nics, Some(&g), &NicHint::default()).expect("a NIC");
        assert_eq!(c.device, "same_switch");
        assert!(c.why.contains("2 shared"), "{}", c.why);
    }

    #[test]
    fn nic_numa_breaks_distance_ties_then_name() {
        let g = gpu(&["0000:00:01.0", "0000:01:00.0"], Some(1));
        let nics = [
            nic("b_far_numa", &["0000:40:01.0", "0000:41:00.0"], Some(0)),
            nic("c_same_numa", &["0000:80:01.0", "0000:81:00.0"], Some(1)),
            nic("a_same_numa", &["0000:90:01.0", "0000:91:00.0"], Some(1)),
        ];
        let c = choose_nic(&nics, Some(&g), &NicHint::default()).expect("a NIC");
        assert_eq!(c.device, "a_same_numa");
        let c = choose_nic(&nics[..2], Some(&g), &NicHint::default()).expect("a NIC");
        assert_eq!(c.device, "c_same_numa");
        let mut no_numa = gpu(&["0000:00:01.0", "0000:01:00.0"], None);
        no_numa.numa_node = None;
        let c = choose_nic(&nics, Some(&no_numa), &NicHint::default()).expect("a NIC");
        assert_eq!(c.device, "a_same_numa", "name order without NUMA");
    }

    #[test]
    fn nic_hint_is_an_allow_list_with_a_gpu() {
        let g = gpu(&["0000:00:01.0", "0000:01:00.0"], None);
        let nics = [
            nic("near", &["0000:00:01.0", "0000:02:00.0"], None),
            nic("far", &["0000:80:01.0", "0000:81:00.0"], None),
        ];
        let c = choose_nic(&nics, Some(&g), &NicHint::parse(Some("far,other"))).expect("a NIC");
        assert_eq!(c.device, "far");
        let e = choose_nic(&nics, Some(&g), &NicHint::parse(Some("x,y"))).expect_err("none allowed");
        assert_eq!(e.kind, SelectionErrorKind::NoCandidate);
    }

    #[test]
    fn only_nics_with_an_active_port_count() {
        let g = gpu(&["0000:00:01.0", "0000:01:00.0"], None);
        let mut near = nic("near", &["0000:00:01.0", "0000:02:00.0"], None);
        near.ports = vec![port(1, false), port(2, false)];
        let far = nic("far", &["0000:80:01.0", "0000:81:00.0"], None);
        let c = choose_nic(&[near.clone(), far], Some(&g), &NicHint::default()).expect("a NIC");
        assert_eq!(c.device, "far");
        let e = choose_nic(&[near], Some(&g), &NicHint::default()).expect_err("none active");
        assert_eq!(e.kind, SelectionErrorKind::NoCandidate);
    }

    #[test]
    fn without_a_gpu_the_hint_names_the_device() {
        let nics = [nic("a", &[], None), nic("b", &[], None)];
        let e = choose_nic(&nics, None, &NicHint::default()).expect_err("no hint");
        assert_eq!(e.kind, SelectionErrorKind::NoGpuNoHint);
        let c = choose_nic(&nics, None, &NicHint::parse(Some("b"))).expect("b");
        assert_eq!((c.device.as_str(), c.port, c.nic.is_some()), ("b", Some(1), true));
        let c = choose_nic(&nics, None, &NicHint::parse(Some("zz,b,a"))).expect("first listed candidate");
        assert_eq!(c.device, "b");
        // A name the topology does not list is opened by name.
        let c = choose_nic(&nics, None, &NicHint::parse(Some("softroce0"))).expect("by name");
        assert_eq!(
            (c.device.as_str(), c.nic.is_none(), c.port),
            ("softroce0", true, None)
        );
        // A listed NIC without an active port is not opened anyway.
        let mut down = nic("down0", &[], None);
        down.ports[0].active = false;
        let e = choose_nic(&[down], None, &NicHint::parse(Some("down0"))).expect_err("inactive");
        assert_eq!(e.kind, SelectionErrorKind::NoCandidate);
        // Two unknown names: nothing says which.
        let e = choose_nic(&nics, None, &NicHint::parse(Some("x,y"))).expect_err("ambiguous");
        assert_eq!(e.kind, SelectionErrorKind::NoCandidate);
    }

    #[test]
    fn a_gpu_host_falls_back_to_a_single_unlisted_hint() {
        let g = gpu(&["0000:00:01.0"], None);
        let c = choose_nic(&[], Some(&g), &NicHint::parse(Some("softroce0"))).expect("by name");
        assert_eq!(c.device, "softroce0");
        let e = choose_nic(&[], Some(&g), &NicHint::default()).expect_err("nothing");
        assert_eq!(e.kind, SelectionErrorKind::NoCandidate);
    }

    #[test]
    fn mtu_comes_from_the_active_port() {
        let c = choose_nic(&[nic("a", &[], None)], None, &NicHint::parse(Some("a"))).expect("a");
        let s = c
            .clone()
            .with_port_attr(&port_attr(PortState::Active, Mtu::Mtu1024))
            .expect("active");
        assert_eq!((s.port, s.gid_index, s.gid, s.mtu), (1, 1, v4(), Mtu::Mtu1024));
        assert_eq!(s.vendor_id, Some(0x14e4));
        let e = c
            .with_port_attr(&port_attr(PortState::Down, Mtu::Mtu1024))
            .expect_err("down");
        assert_eq!(e.kind, SelectionErrorKind::NoCandidate);
    }

    #[test]
    fn address_ranking_for_unlisted_devices() {
        assert_eq!(gid_rank_by_address(&Gid::ZERO), None);
        assert_eq!(gid_rank_by_address(&v4()), Some(0));
        assert_eq!(gid_rank_by_address(&global()), Some(1));
        assert_eq!(gid_rank_by_address(&link_local()), Some(2));
        let p = NicPort {
            port: 1,
            active: true,
            gids: vec![
                gid(0, link_local(), GidKind::Unknown),
                gid(1, v4(), GidKind::Unknown),
            ],
        };
        assert_eq!(choose_port_by_address(&[p]).map(|(_, g)| g.index), Some(1));
    }
}
