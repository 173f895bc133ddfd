#!/bin/bash
# The package test's guest half (scripts/package-test.sh): runs as a
# systemd service in a clean Debian 12 VM booted with systemd as PID 1.
# Installs the hipobj package, verifies the unit, checks that systemd
# started the service through its notify protocol, makes a signed PUT and
# GET with curl, stops the service, removes the package (data kept), then
# purges it. Prints `package-test:` lines and PKG-TEST-EXIT=<status>.
set -uo pipefail
say() { echo "package-test: $*"; }
fail() { say "FAIL: $*"; echo "PKG-TEST-EXIT=1"; exit 1; }
unit=hipobj-server.service
lib=/usr/lib/x86_64-linux-gnu

dpkg -i /root/hipobj.deb || fail "dpkg -i"
say "installed $(dpkg-query -W -f '${Package} ${Version}' hipobj)"
for f in /usr/bin/hipobj-server /usr/bin/hipobj $lib/libhipobj.so.0 $lib/libhipobj.so $lib/libhipobj.a \
    $lib/pkgconfig/hipobj.pc $lib/cmake/hipobj/hipobj-config.cmake $lib/cmake/hipobj/hipobj-config-version.cmake \
    /usr/include/hipobj.h /etc/hipobj/server.toml /lib/systemd/system/$unit; do
    [ -e "$f" ] || fail "$f is not installed"
done
grep -qx /etc/hipobj/server.toml /var/lib/dpkg/info/hipobj.conffiles || fail "server.toml is not a conffile"
getent passwd hipobj >/dev/null || fail "no user hipobj"

# The unit as systemd reads it; any warning is a failure.
systemd-analyze verify "$unit" >/tmp/verify 2>&1 || { cat /tmp/verify; fail "systemd-analyze verify"; }
grep -i hipobj /tmp/verify && fail "systemd-analyze verify warned about the unit"
say "systemd-analyze verify $unit: clean"
say "$(systemd-analyze security --no-pager "$unit" | tail -1)"

# postinst started it; a Type=notify unit is active only after READY=1,
# and StatusText is what the server sent with it.
[ "$(systemctl is-active $unit)" = active ] || { journalctl -u $unit --no-pager | tail -20; fail "not active after install"; }
[ "$(systemctl show -P Type $unit)" = notify ] || fail "not Type=notify"
status=$(systemctl show -P StatusText $unit)
[ "$status" = serving ] || fail "StatusText is '$status', not the server's READY message"
say "active: Type=notify, StatusText=$status, user $(stat -c %U "/proc/$(systemctl show -P MainPID $unit)")"

# A signed PUT and GET with the key made at install.
. /etc/hipobj/credentials.env
sig=(--aws-sigv4 "aws:amz:us-east-1:s3" --user "$HIPOBJ_ACCESS_KEY:$HIPOBJ_SECRET_KEY" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD')
ep=http://127.0.0.1:9000
curl -sSf "${sig[@]}" -X PUT "$ep/pkgtest" || fail "create bucket"
echo "hello from the package test" >/tmp/obj
curl -sSf "${sig[@]}" -T /tmp/obj "$ep/pkgtest/hello.txt" || fail "PUT"
[ "$(curl -sSf "${sig[@]}" "$ep/pkgtest/hello.txt")" = "hello from the package test" ] || fail "GET"
code=$(curl -s -o /dev/null -w '%{http_code}' "$ep/pkgtest/hello.txt")
[ "$code" = 403 ] || fail "an unsigned GET got $code"
say "signed PUT and GET: ok; unsigned GET: 403"
[ "$(cat /var/lib/hipobj/.format)" = 1 ] || fail "no data-directory format marker"
[ "$(stat -c %U /var/lib/hipobj/pkgtest)" = hipobj ] || fail "the bucket is not the service user's"

# Stop: STOPPING=1 then a clean exit.
systemctl stop $unit || fail "systemctl stop"
result=$(systemctl show -P Result $unit)
[ "$result" = success ] || fail "stopped with Result=$result"
journalctl -u $unit --no-pager -o cat | grep -q SIGTERM || fail "the server did not log SIGTERM"
say "stopped: Result=$result"

# Remove: binaries gone, configuration and data kept.
dpkg -r hipobj || fail "dpkg -r"
[ ! -e /usr/bin/hipobj-server ] || fail "dpkg -r left the binary"
[ -e /etc/hipobj/server.toml ] || fail "dpkg -r removed the conffile"
[ -s /var/lib/hipobj/pkgtest/o-68656c6c6f2e747874 ] || fail "dpkg -r removed the data"
say "removed: configuration and data kept"
dpkg --purge hipobj || fail "dpkg --purge"
[ ! -e /etc/hipobj/server.toml ] || fail "purge left server.toml"
[ ! -e /etc/hipobj/credentials.env ] || fail "purge left the generated key"
[ -s /var/lib/hipobj/pkgtest/o-68656c6c6f2e747874 ] || fail "purge removed the data"
say "purged: configuration and key gone, data kept in /var/lib/hipobj"
echo "PKG-TEST-EXIT=0"
