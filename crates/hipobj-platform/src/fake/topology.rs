//! A topology double: NICs and PCI paths as the test lists them.

use std::collections::HashMap;

use super::faults::{Fault, Faults};
use crate::topology::{NicInfo, NicTopology, TopologyError};

/// A topology double.
#[derive(Debug, Default)]
pub struct FakeTopology {
    nics: Vec<NicInfo>,
    paths: HashMap<String, (Vec<String>, Option<i32>)>,
    faults: Faults,
}

impl FakeTopology {
    /// A topology with these NICs, consulting `faults` at every call.
    pub fn new(nics: Vec<NicInfo>, faults: Faults) -> Self {
        let mut paths = HashMap::new();
        for nic in &nics {
            if let Some(addr) = &nic.pci_addr {
                paths.insert(addr.clone(), (nic.pci_path.clone(), nic.numa_node));
            }
        }
        Self { nics, paths, faults }
    }

    /// Places another PCI device (a GPU) in the tree.
    pub fn add_device(&mut self, pci_addr: &str, path: Vec<String>, numa: Option<i32>) {
        self.paths.insert(pci_addr.to_owned(), (path, numa));
    }
}

impl NicTopology for FakeTopology {
    fn nics(&self) -> Result<Vec<NicInfo>, TopologyError> {
        match self.faults.hit("topology_nics") {
            Some(Fault::Fail) => Err(TopologyError("injected failure".into())),
            _ => Ok(self.nics.clone()),
        }
    }

    fn pci_path(&self, pci_addr: &str) -> Vec<String> {
        self.paths
            .get(pci_addr)
            .map(|(p, _)| p.clone())
            .unwrap_or_default()
    }

    fn numa_node(&self, pci_addr: &str) -> Option<i32> {
        self.paths.get(pci_addr).and_then(|(_, n)| *n)
    }
}
