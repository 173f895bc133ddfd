//! The crate graph as docs/architecture.md draws it, checked against
//! `cargo metadata`, so neither the layering nor the document can drift:
//!
//! - the client core depends on the seams and the wire formats only; no
//!   Verbs or GPU backend is compiled into it;
//! - no backend crate depends on the core, not even for its tests;
//! - the server does not depend on the client core;
//! - the store depends on no workspace crate: nothing of RDMA, the wire
//!   formats or the seams;
//! - the core's modules are private (its API is what lib.rs re-exports);
//! - the table of workspace dependencies in docs/architecture.md is exactly
//!   the normal dependencies each workspace crate declares.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The crates that implement a seam, or choose among those that do.
const BACKENDS: [&str; 4] = ["hipobj-ibverbs", "hipobj-softroce", "hipobj-gpu", "hipobj-system"];
/// The client core.
const CORE: &str = "hipobj";
/// The server.
const SERVER: &str = "hipobj-server";
/// The server's stores.
const STORE: &str = "hipobj-store";

/// Each workspace crate's dependencies on workspace crates: (normal, any kind).
type Graph = BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)>;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn graph() -> Graph {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(root())
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let members: BTreeSet<String> = packages
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    packages
        .iter()
        .map(|p| {
            let name = p["name"].as_str().expect("a package name").to_owned();
            let mut normal = BTreeSet::new();
            let mut any = BTreeSet::new();
            for d in p["dependencies"].as_array().expect("dependencies") {
                let dep = d["name"].as_str().expect("a dependency name");
                if !members.contains(dep) {
                    continue;
                }
                any.insert(dep.to_owned());
                if d["kind"].is_null() {
                    normal.insert(dep.to_owned());
                }
            }
            (name, (normal, any))
        })
        .collect()
}

/// Every workspace crate `name` depends on through normal dependencies,
/// directly or not.
fn normal_closure(g: &Graph, name: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![name.to_owned()];
    while let Some(n) = todo.pop() {
        for d in g.get(&n).map(|e| &e.0).into_iter().flatten() {
            if seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    seen
}

#[test]
fn the_core_compiles_no_backend() {
    let g = graph();
    let deps = normal_closure(&g, CORE);
    assert!(
        deps.contains("hipobj-platform"),
        "{CORE} lost its seams: {deps:?}"
    );
    for b in BACKENDS {
        assert!(
            !deps.contains(b),
            "{CORE} depends on {b} (through {deps:?}): the core sees the seams only; \
             programs take the platform from hipobj-system"
        );
    }
}

#[test]
fn no_backend_depends_on_the_core() {
    let g = graph();
    for b in BACKENDS.iter().filter(|b| **b != "hipobj-system") {
        let (_, any) = g
            .get(*b)
            .unwrap_or_else(|| panic!("{b} is not a workspace crate"));
        assert!(!any.contains(CORE), "{b} depends on {CORE}: {any:?}");
    }
    // The composition root joins the core to the backends in programs, so
    // it must not need the core itself (the server uses it too).
    let deps = normal_closure(&g, "hipobj-system");
    assert!(!deps.contains(CORE), "hipobj-system depends on {CORE}: {deps:?}");
}

#[test]
fn the_server_does_not_depend_on_the_client_core() {
    let g = graph();
    let deps = normal_closure(&g, SERVER);
    assert!(
        !deps.contains(CORE),
        "{SERVER} depends on {CORE} through {deps:?}"
    );
    assert!(
        deps.contains("hipobj-system"),
        "{SERVER} no longer takes its platform from hipobj-system: {deps:?}"
    );
}

#[test]
fn the_store_depends_on_no_workspace_crate() {
    let g = graph();
    let (normal, any) = g
        .get(STORE)
        .unwrap_or_else(|| panic!("{STORE} is not a workspace crate"));
    assert!(normal.is_empty(), "{STORE} depends on {normal:?}");
    assert!(
        any.is_empty(),
        "{STORE} depends on {any:?}, even if only for tests"
    );
    assert!(
        normal_closure(&g, SERVER).contains(STORE),
        "{SERVER} no longer opens its store from {STORE}"
    );
}

/// The rows of the table under the line that starts with `| crate | depends on`.
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(root().join("docs/architecture.md")).expect("docs/architecture.md");
    let mut lines = text
        .lines()
        .skip_while(|l| !l.starts_with("| crate | depends on"));
    assert!(
        lines.next().is_some(),
        "docs/architecture.md has no `| crate | depends on` table"
    );
    let mut rows = BTreeMap::new();
    for line in lines.skip(1).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let name = cells[0].trim_matches('`').to_owned();
        let deps = cells
            .get(1)
            .copied()
            .unwrap_or_default()
            .split(',')
            .map(|d| d.trim().trim_matches('`').to_owned())
            .filter(|d| !d.is_empty() && d != "none")
            .collect();
        assert!(
            rows.insert(name.clone(), deps).is_none(),
            "{name} is listed twice"
        );
    }
    rows
}

#[test]
fn the_architecture_table_is_the_real_graph() {
    let actual: BTreeMap<String, BTreeSet<String>> =
        graph().into_iter().map(|(n, (normal, _))| (n, normal)).collect();
    let doc = documented();
    let mut wrong = Vec::new();
    for (name, deps) in &actual {
        match doc.get(name) {
            None => wrong.push(format!(
                "{name} is missing; its row: | `{name}` | {} |",
                list(deps)
            )),
            Some(d) if d != deps => {
                wrong.push(format!("{name}: the table says {d:?}, Cargo.toml says {deps:?}"))
            }
            Some(_) => {}
        }
    }
    for name in doc.keys().filter(|n| !actual.contains_key(*n)) {
        wrong.push(format!("{name} is in the table but not in the workspace"));
    }
    assert!(
        wrong.is_empty(),
        "docs/architecture.md's dependency table differs from Cargo.toml:\n{}",
        wrong.join("\n")
    );
}

fn list(deps: &BTreeSet<String>) -> String {
    if deps.is_empty() {
        "none".into()
    } else {
        deps.iter()
            .map(|d| format!("`{d}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The core's public API is the names its root re-exports (docs/architecture.md);
/// its modules stay private, so programs cannot come to depend on internals.
#[test]
fn the_core_exposes_no_modules() {
    let lib =
        std::fs::read_to_string(root().join("crates/hipobj/src/lib.rs")).expect("crates/hipobj/src/lib.rs");
    let public: Vec<&str> = lib
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("pub mod "))
        .collect();
    assert!(
        public.is_empty(),
        "the core exposes modules; re-export the names programs need instead: {public:?}"
    );
}
