//! [`SysfsTopology`]: the NIC topology as the kernel publishes it under
//! `/sys/class/infiniband`.
//!
//! For each device `<dev>` it reads:
//!
//! * `class/infiniband/<dev>/device`: a link to the PCI device. Resolved, it
//!   is a folder under `devices/pci<domain>:<bus>/…`, and every component of
//!   that path that looks like a PCI address (`dddd:bb:dd.f`) is a bridge (a
//!   root port, a switch port) or, last, the NIC itself: that list is the
//!   NIC's PCI path. Virtual devices (rxe, siw) have no such link.
//! * `device/numa_node` (`-1` means unknown) and `device/vendor` (`0x14e4`).
//! * `ports/<n>/state` (`4: ACTIVE`), `ports/<n>/gids/<i>` (eight groups of
//!   four hex digits) and `ports/<n>/gid_attrs/types/<i>` (`RoCE v2`,
//!   `IB/RoCE v1`; reading an unused entry fails, which means unknown).
//!
//! The root (`/sys`) is a constructor parameter so that tests build fake
//! trees in a temporary folder.

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use hipobj_platform::{Gid, GidInfo, GidKind, NicInfo, NicPort, NicTopology, TopologyError};

/// The NIC topology read from sysfs.
#[derive(Clone, Debug)]
pub struct SysfsTopology {
    root: PathBuf,
}

impl Default for SysfsTopology {
    fn default() -> Self {
        Self::system()
    }
}

impl SysfsTopology {
    /// The running system's topology (`/sys`).
    pub fn system() -> Self {
        Self::new("/sys")
    }

    /// A topology read from the sysfs tree mounted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The sysfs root this topology reads.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn class_dir(&self) -> PathBuf {
        self.root.join("class").join("infiniband")
    }

    /// The PCI addresses on the resolved path of a device link, root port first.
    fn path_of_link(&self, link: &Path) -> Vec<String> {
        let Ok(real) = fs::canonicalize(link) else {
            return Vec::new();
        };
        // Strip the root so that a temporary folder's own name can never be
        // mistaken for a PCI address.
        let root = fs::canonicalize(&self.root).unwrap_or_else(|_| self.root.clone());
        let rel = real.strip_prefix(&root).unwrap_or(&real);
        rel.components()
            .filter_map(|c| match c {
                Component::Normal(s) => s.to_str(),
                _ => None,
            })
            .filter(|s| is_pci_addr(s))
            .map(str::to_ascii_lowercase)
            .collect()
    }

    fn read_nic(&self, name: &str) -> Result<NicInfo, TopologyError> {
        let dir = self.class_dir().join(name);
        let device = dir.join("device");
        let pci_path = self.path_of_link(&device);
        let pci_addr = pci_path.last().cloned();
        let numa_node = read_trimmed(&device.join("numa_node"))
            .ok()
            .and_then(|s| parse_numa(&s));
        let vendor_id = read_trimmed(&device.join("vendor"))
            .ok()
            .and_then(|s| parse_hex_u16(&s));
        let mut ports = Vec::new();
        match fs::read_dir(dir.join("ports")) {
            Ok(entries) => {
                for entry in entries.flatten() {
                    let Some(port) = entry.file_name().to_str().and_then(|s| s.parse::<u8>().ok()) else {
                        continue;
                    };
                    ports.push(read_port(&entry.path(), port));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(TopologyError(format!("{}: {e}", dir.join("ports").display()))),
        }
        ports.sort_by_key(|p| p.port);
        Ok(NicInfo {
            name: name.to_owned(),
            pci_addr,
            pci_path,
            numa_node,
            vendor_id,
            ports,
        })
    }
}

impl NicTopology for SysfsTopology {
    fn nics(&self) -> Result<Vec<NicInfo>, TopologyError> {
        let class = self.class_dir();
        let entries = match fs::read_dir(&class) {
            Ok(entries) => entries,
            // No RDMA subsystem at all: no NICs.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(TopologyError(format!("{}: {e}", class.display()))),
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect();
        names.sort();
        names.iter().map(|n| self.read_nic(n)).collect()
    }

    fn pci_path(&self, pci_addr: &str) -> Vec<String> {
        let addr = pci_addr.trim().to_ascii_lowercase();
        if !is_pci_addr(&addr) {
            return Vec::new();
        }
        self.path_of_link(&self.root.join("bus").join("pci").join("devices").join(addr))
    }

    fn numa_node(&self, pci_addr: &str) -> Option<i32> {
        let addr = pci_addr.trim().to_ascii_lowercase();
        if !is_pci_addr(&addr) {
            return None;
        }
        let file = self.root.join("bus/pci/devices").join(addr).join("numa_node");
        read_trimmed(&file).ok().and_then(|s| parse_numa(&s))
    }
}

fn read_port(dir: &Path, port: u8) -> NicPort {
    let active = read_trimmed(&dir.join("state"))
        .map(|s| parse_port_state_active(&s))
        .unwrap_or(false);
    let mut gids = Vec::new();
    if let Ok(entries) = fs::read_dir(dir.join("gids")) {
        for entry in entries.flatten() {
            let Some(index) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Some(gid) = read_trimmed(&entry.path()).ok().and_then(|s| parse_gid(&s)) else {
                continue;
            };
            if gid.is_zero() {
                continue;
            }
            let kind = read_trimmed(&dir.join("gid_attrs/types").join(index.to_string()))
                .map(|s| parse_gid_kind(&s))
                .unwrap_or(GidKind::Unknown);
            gids.push(GidInfo { index, gid, kind });
        }
    }
    gids.sort_by_key(|g| g.index);
    NicPort { port, active, gids }
}

fn read_trimmed(path: &Path) -> io::Result<String> {
    fs::read_to_string(path).map(|s| s.trim().to_owned())
}

/// Whether `s` has the form of a PCI address, `dddd:bb:dd.f` in hex.
pub fn is_pci_addr(s: &str) -> bool {
    let b = s.as_bytes();
    let hex = |r: std::ops::Range<usize>| b.get(r).is_some_and(|x| x.iter().all(u8::is_ascii_hexdigit));
    b.len() == 12
        && hex(0..4)
        && b[4] == b':'
        && hex(5..7)
        && b[7] == b':'
        && hex(8..10)
        && b[10] == b'.'
        && {
            // The function number is 0..7.
            matches!(b[11], b'0'..=b'7')
        }
}

/// Parses a sysfs GID (`fe80:0000:…`, eight groups of four hex digits).
pub fn parse_gid(s: &str) -> Option<Gid> {
    let mut raw = [0u8; 16];
    let mut groups = s.trim().split(':');
    for pair in raw.chunks_exact_mut(2) {
        let g = groups.next()?;
        if g.len() != 4 {
            return None;
        }
        let v = u16::from_str_radix(g, 16).ok()?;
        pair.copy_from_slice(&v.to_be_bytes());
    }
    groups.next().is_none().then_some(Gid(raw))
}

/// Parses `gid_attrs/types/<i>`.
pub fn parse_gid_kind(s: &str) -> GidKind {
    match s.trim() {
        "RoCE v2" => GidKind::RoceV2,
        "IB/RoCE v1" | "RoCE v1" | "IB" => GidKind::RoceV1,
        _ => GidKind::Unknown,
    }
}

/// Whether `ports/<n>/state` (`"4: ACTIVE"`) says the port is active.
pub fn parse_port_state_active(s: &str) -> bool {
    let s = s.trim();
    let (num, name) = s.split_once(':').unwrap_or((s, ""));
    num.trim() == "4" || name.trim().eq_ignore_ascii_case("ACTIVE")
}

fn parse_numa(s: &str) -> Option<i32> {
    s.trim().parse::<i32>().ok().filter(|&n| n >= 0)
}

fn parse_hex_u16(s: &str) -> Option<u16> {
    let s = s.trim();
    let digits = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")).unwrap_or(s);
    u16::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addresses() {
        assert!(is_pci_addr("0000:c3:00.0"));
        assert!(is_pci_addr("0001:0A:1f.7"));
        assert!(!is_pci_addr("pci0000:00"));
        assert!(!is_pci_addr("0000:c3:00.8"));
        assert!(!is_pci_addr("0000:c3:00"));
        assert!(!is_pci_addr("0000:c3:00.0x"));
        assert!(!is_pci_addr("000g:c3:00.0"));
        assert!(!is_pci_addr("infiniband"));
    }

    #[test]
    fn gids_parse() {
        let g = parse_gid("0000:0000:0000:0000:0000:ffff:c000:0201\n").expect("gid");
        assert_eq!(g.to_string(), "::ffff:192.0.2.1");
        assert!(parse_gid("fe80:0000:0000:0000:0000:0000:0000:0001").is_some_and(|g| g.is_link_local()));
        assert_eq!(parse_gid("fe80::1"), None);
        assert_eq!(parse_gid("0000:0000:0000:0000:0000:ffff:c000:0201:0000"), None);
        assert_eq!(parse_gid("zzzz:0000:0000:0000:0000:ffff:c000:0201"), None);
        assert_eq!(parse_gid(""), None);
    }

    #[test]
    fn small_files_parse() {
        assert_eq!(parse_gid_kind("RoCE v2\n"), GidKind::RoceV2);
        assert_eq!(parse_gid_kind("IB/RoCE v1"), GidKind::RoceV1);
        assert_eq!(parse_gid_kind("v3"), GidKind::Unknown);
        assert!(parse_port_state_active("4: ACTIVE\n"));
        assert!(!parse_port_state_active("1: DOWN"));
        assert!(!parse_port_state_active(""));
        assert_eq!(parse_numa("-1"), None);
        assert_eq!(parse_numa("1\n"), Some(1));
        assert_eq!(parse_numa("x"), None);
        assert_eq!(parse_hex_u16("0x14e4\n"), Some(0x14e4));
        assert_eq!(parse_hex_u16("0x1DD8"), Some(0x1dd8));
        assert_eq!(parse_hex_u16("0x123456"), None);
    }
}
