//! Test seams stay out of production builds (issue 40): each crate's hooks
//! for its tests live behind a cargo feature that is not a default and
//! that only dev-dependencies enable, so `cargo build` of any program of
//! the workspace (the server, the CLI, `libhipobj.so`, the Python
//! extension) compiles none of it. Checked against `cargo metadata`.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// (crate, feature): the features that carry a crate's test hooks.
const SEAMS: [(&str, &str); 2] = [
    // src/testing.rs: a platform in place of the system's, panic injection.
    ("hipobj-capi", "testing"),
    // src/double.rs: the in-process S3 server and its cheating GETs.
    ("hipobj-target", "testing"),
];

fn packages() -> Vec<Value> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    meta["packages"].as_array().expect("packages").clone()
}

/// Whether `list` (a JSON array of strings) holds `s`.
fn holds(list: &Value, s: &str) -> bool {
    list.as_array()
        .is_some_and(|a| a.iter().any(|v| v.as_str() == Some(s)))
}

#[test]
fn test_hooks_are_features_only_tests_enable() {
    let packages = packages();
    for (krate, feature) in SEAMS {
        let p = packages
            .iter()
            .find(|p| p["name"] == krate)
            .unwrap_or_else(|| panic!("no package {krate}"));
        let features = &p["features"];
        assert!(
            features.get(feature).is_some(),
            "{krate} has no feature {feature:?}: its test hooks are built into every build"
        );
        let default = features.get("default").cloned().unwrap_or(Value::Null);
        assert!(
            !holds(&default, feature),
            "{krate}'s default features enable {feature:?}"
        );
        for user in &packages {
            for d in user["dependencies"].as_array().expect("dependencies") {
                let dev = d["kind"].as_str() == Some("dev");
                if d["name"] == krate && !dev {
                    assert!(
                        !holds(&d["features"], feature),
                        "{} enables {krate}'s {feature:?} in a normal or build dependency",
                        user["name"]
                    );
                }
            }
        }
    }
}
