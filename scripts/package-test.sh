#!/usr/bin/env bash
# The Debian package on a clean Debian 12 with systemd as PID 1: builds the
# package (packaging/build-deb.sh), boots a QEMU VM (TCG, no network card)
# on a fresh copy of a minimal Debian 12 made by debootstrap (cached), and
# runs scripts/package-guest.sh there as a service: dpkg -i,
# systemd-analyze verify, the service started by systemd through its notify
# protocol, a signed PUT and GET with curl --aws-sigv4, stop, dpkg -r and
# --purge. The kernel is the one scripts/rxe-vm.sh caches.
#
#   scripts/package-test.sh      (exit status: the guest's; 125: no verdict)
#
# Cache: $HIPOBJ_PACKAGE_VM_DIR (default /var/tmp/hipobj-package-vm); the
# Debian root is made once (about 2 minutes, from the machine's Debian
# mirror), each run copies it. Needs root (debootstrap, apt).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
work=${HIPOBJ_PACKAGE_VM_DIR:-/var/tmp/hipobj-package-vm}
rxe_dir=${RXE_VM_DIR:-/var/tmp/hipobj-rxe-vm}
log() { printf 'package-test: %s\n' "$*" >&2; }
mkdir -p "$work"

deb=$(packaging/build-deb.sh | tail -1)
log "package: $deb"
# qemu, busybox and the Debian 6.1 kernel with its modules.
scripts/rxe-vm.sh --prepare >&2
command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >&2

# The clean Debian 12: minbase, systemd as init, and what the test itself
# runs (curl; adduser is the package's own dependency).
if [[ ! -f $work/rootfs/.ready ]]; then
    mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    log "debootstrap bookworm from $mirror"
    rm -rf "$work/rootfs"
    debootstrap --variant=minbase --include=systemd,systemd-sysv,adduser,curl,ca-certificates,dbus \
        bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
        { tail -20 "$work/debootstrap.log" >&2; exit 1; }
    echo pkgtest >"$work/rootfs/etc/hostname"
    rm -f "$work/rootfs/var/cache/apt/archives/"*.deb
    touch "$work/rootfs/.ready"
fi

# The initramfs: the modules a virtio disk with ext4 needs, then systemd.
ver=$(cat "$rxe_dir/kernel/ready")
moddir=$rxe_dir/kernel/root/lib/modules/$ver
modules="crc32c_generic crc16 mbcache jbd2 ext4 virtio virtio_ring virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_blk"
if [[ ! -f $work/initrd.gz || $work/initrd.gz -ot $0 ]]; then
    ir=$work/initrd
    rm -rf "$ir" && mkdir -p "$ir"/{bin,dev,proc,sys,newroot,mods}
    cp "$(command -v busybox || echo /bin/busybox)" "$ir/bin/busybox"
    for a in sh mount umount insmod switch_root echo; do ln -s busybox "$ir/bin/$a"; done
    for m in $modules; do
        f=$(find "$moddir" -name "$m.ko*" | head -1)
        [[ -n $f ]] || { log "module $m not found"; exit 1; }
        case $f in
            *.xz) xz -dc "$f" >"$ir/mods/$m.ko" ;;
            *.zst) zstd -qdc "$f" >"$ir/mods/$m.ko" ;;
            *) cp "$f" "$ir/mods/$m.ko" ;;
        esac
    done
    cat >"$ir/init" <<INIT
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $modules; do insmod /mods/\$m.ko; done
mount -t ext4 /dev/vda /newroot || echo "package-test: cannot mount the root disk"
umount /sys /proc /dev
exec switch_root /newroot /lib/systemd/systemd
INIT
    chmod +x "$ir/init"
    (cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initrd.gz"
fi

# This run's disk: the clean root, the package, the guest script, and the
# unit that runs it once the system is up and then powers off.
stage=$work/stage
rm -rf "$stage" && cp -a "$work/rootfs" "$stage"
cp "$deb" "$stage/root/hipobj.deb"
install -m 755 scripts/package-guest.sh "$stage/root/package-guest.sh"
cat >"$stage/etc/systemd/system/hipobj-package-test.service" <<'UNIT'
[Unit]
Description=hipobj package test
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/root/package-guest.sh
ExecStopPost=/bin/systemctl --no-block poweroff
StandardOutput=journal+console
StandardError=journal+console
[Install]
WantedBy=multi-user.target
UNIT
# No udev in the minimal system: the serial console's getty would wait 90 s
# for a device unit that never comes.
ln -sf /dev/null "$stage/etc/systemd/system/serial-getty@ttyS0.service"
mkdir -p "$stage/etc/systemd/system/multi-user.target.wants"
ln -sf ../hipobj-package-test.service "$stage/etc/systemd/system/multi-user.target.wants/hipobj-package-test.service"
rm -f "$work/disk.img"
truncate -s 2G "$work/disk.img"
mkfs.ext4 -q -F -d "$stage" "$work/disk.img"
rm -rf "$stage"

log "booting Debian 12 under TCG with systemd as PID 1"
start=$SECONDS
set +e
timeout "${HIPOBJ_PACKAGE_VM_TIMEOUT:-600}" qemu-system-x86_64 -accel tcg -m 1024 -smp 2 \
    -kernel "$(ls "$rxe_dir"/kernel/root/boot/vmlinuz-*)" -initrd "$work/initrd.gz" \
    -append "console=ttyS0 quiet panic=-1 systemd.unit=multi-user.target" \
    -nographic -nic none -no-reboot \
    -drive "file=$work/disk.img,format=raw,if=virtio,cache=unsafe" \
    </dev/null >"$work/console.log" 2>&1
set -e
grep -a 'package-test:' "$work/console.log" | sed 's/^.*package-test:/package-test:/' >&2 || true
log "VM ran $((SECONDS - start)) s"
rc=$(grep -ao 'PKG-TEST-EXIT=[0-9]*' "$work/console.log" | tail -1 | cut -d= -f2)
[[ -n $rc ]] || { tail -40 "$work/console.log" >&2; log "the VM gave no verdict (see $work/console.log)"; exit 125; }
exit "$rc"
