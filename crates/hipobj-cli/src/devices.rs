//! `hipobj devices`: every RDMA NIC the library sees, and which one init
//! would choose.

use hipobj_platform::selection::{self, NicHint};
use hipobj_platform::{GidKind, NicInfo, NicPort, Platform};
use serde_json::{Value, json};

use crate::error::CliResult;

fn kind_name(k: GidKind) -> &'static str {
    match k {
        GidKind::RoceV1 => "RoCE v1",
        GidKind::RoceV2 => "RoCE v2",
        GidKind::Unknown => "unknown",
    }
}

/// One device as the CLI shows it.
struct Shown {
    name: String,
    backend_lists_it: bool,
    info: Option<NicInfo>,
    ports: Vec<NicPort>,
    mtus: Vec<(u8, Option<usize>)>,
    /// How transfers on it are fenced (memory windows or the fallback).
    fence: Option<hipobj::FenceMode>,
    note: Option<String>,
}

fn gather(platform: &Platform) -> (Vec<Shown>, Option<String>) {
    let names = platform.verbs.device_names().unwrap_or_default();
    let (nics, topo_err) = match platform.topology.nics() {
        Ok(n) => (n, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let mut all: Vec<String> = names.clone();
    for n in &nics {
        if !all.contains(&n.name) {
            all.push(n.name.clone());
        }
    }
    let shown = all
        .into_iter()
        .map(|name| {
            let info = nics.iter().find(|n| n.name == name).cloned();
            let listed = names.contains(&name);
            let mut note = None;
            let mut ports = info.as_ref().map(|i| i.ports.clone()).unwrap_or_default();
            let mut mtus = Vec::new();
            let mut fence = None;
            if listed {
                match platform.verbs.open_device(&name) {
                    Ok(dev) => {
                        fence = dev.attr().ok().map(|a| hipobj::FenceMode::of(&a));
                        if info.is_none() {
                            match selection::ports_from_verbs(dev.as_ref()) {
                                Ok(p) => ports = p,
                                Err(e) => note = Some(format!("reading its ports failed: {e}")),
                            }
                        }
                        for p in &ports {
                            let mtu = dev.query_port(p.port).ok().map(|a| a.active_mtu.bytes());
                            mtus.push((p.port, mtu));
                        }
                    }
                    Err(e) => note = Some(format!("cannot be opened: {e}")),
                }
            } else {
                note = Some("listed by sysfs but by no loaded verbs backend".into());
            }
            Shown {
                name,
                backend_lists_it: listed,
                info,
                ports,
                mtus,
                fence,
                note,
            }
        })
        .collect();
    (shown, topo_err)
}

/// `hipobj devices`.
pub(crate) fn run(platform: &Platform, gpu: i32, nic_hint: Option<&str>, as_json: bool) -> CliResult<String> {
    let (shown, topo_err) = gather(platform);
    let config = hipobj::Config {
        flags: 0,
        gpu_device: gpu,
        nic_hint: nic_hint.map(str::to_owned),
    };
    let choice = hipobj::choose_nic(platform, &config).map(|(_, c)| c);
    let hint = NicHint::parse(nic_hint);
    if as_json {
        return Ok(json_report(platform, &shown, topo_err, &choice, &hint));
    }
    Ok(text_report(&shown, topo_err, choice, &hint))
}

/// The `--json` report.
fn json_report(
    platform: &Platform,
    shown: &[Shown],
    topo_err: Option<String>,
    choice: &Result<hipobj::Chosen, hipobj::Error>,
    hint: &NicHint,
) -> String {
    let devices: Vec<Value> = shown
        .iter()
        .map(|d| {
            json!({
                "name": d.name,
                "opened_by_verbs": d.backend_lists_it,
                "pci": d.info.as_ref().and_then(|i| i.pci_addr.clone()),
                "pci_path": d.info.as_ref().map(|i| i.pci_path.clone()).unwrap_or_default(),
                "numa_node": d.info.as_ref().and_then(|i| i.numa_node),
                "vendor_id": d.info.as_ref().and_then(|i| i.vendor_id).map(|v| format!("{v:#06x}")),
                "allowed_by_hint": hint.allows(&d.name),
                "fence": d.fence.map(|f| match f {
                    hipobj::FenceMode::Windows => "memory_windows",
                    hipobj::FenceMode::AccessFlags => "access_flags_fallback",
                }),
                "note": d.note,
                "ports": d.ports.iter().map(|p| json!({
                    "port": p.port,
                    "active": p.active,
                    "active_mtu": d.mtus.iter().find(|(n, _)| *n == p.port).and_then(|(_, m)| *m),
                    "gids": p.gids.iter().map(|g| json!({
                        "index": g.index,
                        "gid": g.gid.to_string(),
                        "ipv4": g.gid.to_ipv4().map(|ip| ip.to_string()),
                        "type": kind_name(g.kind),
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let chosen = match &choice {
        Ok(c) => json!({
            "device": c.selection.device,
            "port": c.selection.port,
            "gid_index": c.selection.gid_index,
            "gid": c.selection.gid.to_string(),
            "gid_type": kind_name(c.selection.gid_kind),
            "mtu": c.selection.mtu.bytes(),
            "gpu": c.gpu,
            "gpu_pci": c.gpu_pci,
            "why": c.selection.why,
        }),
        Err(e) => json!({ "error": e.to_string(), "code": crate::error::code_name(e.kind()) }),
    };
    format!(
        "{:#}\n",
        json!({
            "devices": devices,
            "topology_error": topo_err,
            "gpu_runtime": platform.gpu.name(),
            "choice": chosen,
        })
    )
}

/// The report for a person.
fn text_report(
    shown: &[Shown],
    topo_err: Option<String>,
    choice: Result<hipobj::Chosen, hipobj::Error>,
    hint: &NicHint,
) -> String {
    let mut out = String::new();
    if shown.is_empty() {
        out.push_str("no RDMA devices\n");
    }
    for d in shown {
        out.push_str(&d.name);
        if let Some(i) = &d.info {
            if let Some(pci) = &i.pci_addr {
                out.push_str(&format!("  pci {pci}"));
            }
            if let Some(n) = i.numa_node {
                out.push_str(&format!("  numa {n}"));
            }
        } else {
            out.push_str("  (not in sysfs)");
        }
        if !hint.allows(&d.name) {
            out.push_str("  [excluded by --nic-hint]");
        }
        out.push('\n');
        if let Some(f) = d.fence {
            out.push_str(&format!("  fence: {}\n", f.describe()));
        }
        if let Some(n) = &d.note {
            out.push_str(&format!("  {n}\n"));
        }
        for p in &d.ports {
            let mtu = d
                .mtus
                .iter()
                .find(|(n, _)| *n == p.port)
                .and_then(|(_, m)| *m)
                .map_or_else(String::new, |m| format!(", mtu {m}"));
            let state = if p.active { "active" } else { "down" };
            out.push_str(&format!("  port {}: {state}{mtu}\n", p.port));
            for g in &p.gids {
                let v4 = g.gid.to_ipv4().map_or_else(String::new, |ip| format!(" ({ip})"));
                out.push_str(&format!(
                    "    gid[{}] {}{v4}  {}\n",
                    g.index,
                    g.gid,
                    kind_name(g.kind)
                ));
            }
        }
    }
    if let Some(e) = topo_err {
        out.push_str(&format!("sysfs topology: {e}\n"));
    }
    match choice {
        Ok(c) => {
            let gpu = match (&c.gpu, &c.gpu_pci) {
                (Some(g), Some(p)) => format!("GPU {g} ({p})"),
                _ => "no GPU".into(),
            };
            out.push_str(&format!("init would choose, for {gpu}: {}\n", c.selection));
        }
        Err(e) => out.push_str(&format!(
            "init would fail: {} ({})\n",
            e,
            crate::error::code_name(e.kind())
        )),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hipobj_platform::fake::FakePlatform;

    #[test]
    fn lists_the_fake_nic_and_the_choice() -> CliResult {
        let p = FakePlatform::host_only();
        let text = run(&p.platform(), -1, Some("fake0"), false)?;
        assert!(text.contains("fake0  (not in sysfs)"), "{text}");
        assert!(text.contains("::ffff:127.0.0.1 (127.0.0.1)"), "{text}");
        assert!(
            text.contains("fence: fallback: per-lease QP access flags"),
            "the fake NIC has no windows: {text}"
        );
        assert!(
            text.contains("init would choose, for no GPU: fake0 port 1"),
            "{text}"
        );
        let text = run(&p.platform(), -1, None, false)?;
        assert!(
            text.contains("init would fail") && text.contains("hipObjNicNotFound"),
            "{text}"
        );
        let j: Value = serde_json::from_str(&run(&p.platform(), -1, Some("fake0"), true)?)
            .map_err(|e| crate::error::CliError::plain(e.to_string()))?;
        assert_eq!(j["choice"]["device"], "fake0");
        assert_eq!(j["devices"][0]["ports"][0]["gids"][0]["ipv4"], "127.0.0.1");
        assert_eq!(j["devices"][0]["fence"], "access_flags_fallback");
        Ok(())
    }
}
