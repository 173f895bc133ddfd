#!/usr/bin/env bash
# Builds the Debian package hipobj_<version>-1_amd64.deb from the workspace:
# a release build and the library files staged by `cargo xtask install`
# (Debian's paths: /usr, /usr/lib/x86_64-linux-gnu), then cargo-deb with
# the metadata in crates/hipobj-server/Cargo.toml, without building again.
#
#   packaging/build-deb.sh        prints the .deb's path on its last line
#
# Needs cargo-deb 3.8.0 (`cargo install cargo-deb --version 3.8.0 --locked`; found on PATH, or in
# $CARGO_DEB_ROOT/bin, default /tmp/cargo-deb-root, where it is installed
# when missing).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
target=${CARGO_TARGET_DIR:-$root/target}
deb_root=${CARGO_DEB_ROOT:-/tmp/cargo-deb-root}
export PATH=$deb_root/bin:$PATH
if ! command -v cargo-deb >/dev/null; then
    # Pinned: it builds with this Rust, and it still packages the dev profile
    # (CI packages the test build; later releases may refuse that).
    cargo install cargo-deb --version 3.8.0 --locked --root "$deb_root" >&2
fi
# HIPOBJ_DEB_PROFILE=dev packages the debug build that the test lane made
# (scripts/package-test.sh, in CI); release (the default) is for shipping.
profile=${HIPOBJ_DEB_PROFILE:-release}
case $profile in
    release) dir=release xtask_flag= ;;
    dev) dir=debug xtask_flag=--debug ;;
    *) echo "build-deb: HIPOBJ_DEB_PROFILE is release or dev" >&2; exit 2 ;;
esac
stage=$target/$dir/deb-root
rm -rf "$stage"
cargo xtask install --prefix /usr --libdir /usr/lib/x86_64-linux-gnu --destdir "$stage" $xtask_flag >&2
version=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "hipobj-server"))')
[[ -e $stage/usr/lib/x86_64-linux-gnu/libhipobj.so.$version ]] ||
    { echo "build-deb: the assets in crates/hipobj-server/Cargo.toml name libhipobj.so.0.1.0; the version is now $version" >&2; exit 1; }
# Stripped: the release profile keeps line tables (330 MB of binaries).
cargo deb -p hipobj-server --no-build --strip --profile "$profile" --output "$target/debian/" >&2
ls "$target"/debian/hipobj_"$version"-*_amd64.deb
