#!/bin/sh
# The guest's half of the power-cut test (scripts/power-cut-test.sh), run
# by scripts/rxe-vm.sh inside the VM: mounts the virtual disk, scrubs the
# data directory left by the last boot (SCRUB-EXIT=<status> on the
# console), then serves it with hipobj-server on port 9000 until the host
# kills the VM.
#
#   power-cut-guest.sh BIN_DIR
set -u
bin=$1
mkdir -p /run/disk
mount -t ext4 /dev/vda /run/disk || { echo "power-cut-guest: cannot mount /dev/vda"; exit 3; }
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
mkdir -p /run/disk/data
cat >/run/scratch/server.toml <<T
address = "0.0.0.0:9000"
metrics_log_secs = 0
[[credentials]]
access_key = "power-owner"
secret_key = "power-owner-secret"
[[credentials]]
access_key = "power-other"
secret_key = "power-other-secret"
[storage]
kind = "fs"
data_dir = "/run/disk/data"
[limits]
fsync = true
min_part_size = 1048576
T
"$bin/hipobj-server" --config /run/scratch/server.toml scrub
echo "SCRUB-EXIT=$?"
exec "$bin/hipobj-server" --config /run/scratch/server.toml
