#!/usr/bin/env bash
# Runs a command inside a throw-away QEMU VM (TCG, no KVM) whose Debian 6.1
# kernel has rdma_rxe, so that the libibverbs backend meets a real verbs
# device (rxe0 on a dummy netdev in 192.0.2.0/24, TEST-NET-1).
#
#   scripts/rxe-vm.sh [--prepare] [--] COMMAND [ARGS...]
#
# The host's / is shared read-only over 9p and the command runs chrooted
# into it, so host-built test binaries and the host's libibverbs run as they
# are. COMMAND must be an absolute path (or on the host's PATH). Nothing
# leaves the VM: it has no network card (-nic none); rxe's loopback path
# carries the RDMA traffic.
#
# RXE_VM_DISK=FILE gives the VM a raw disk image as /dev/vda (ext4 loads;
# the job mounts it), and RXE_VM_HOSTFWD=tcp:127.0.0.1:PORT-:GUESTPORT a
# user-mode network card (eth0, 10.0.2.15) that reaches nothing but takes
# connections from the host's loopback PORT: the power-cut test
# (scripts/power-cut-test.sh) serves from the disk and kills the VM.
#
# --prepare only installs packages and builds the kernel/initramfs cache.
# Needs root for apt-get (packages: Debian's, plus qemu-system-x86 from
# bookworm-backports through a private apt configuration that leaves
# /etc/apt untouched). The cache lives in $RXE_VM_DIR (default
# /var/tmp/hipobj-rxe-vm). Exit status: the command's, or 125 when the VM
# never reported one (boot failure, timeout $RXE_VM_TIMEOUT seconds, default 900).
set -euo pipefail

WORK=${RXE_VM_DIR:-/var/tmp/hipobj-rxe-vm}
TIMEOUT=${RXE_VM_TIMEOUT:-900}
MODULES="crc32_generic virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci netfs
fscache 9pnet 9p 9pnet_virtio udp_tunnel ip6_udp_tunnel ib_core ib_uverbs rdma_rxe dummy veth sch_netem
crc32c_generic crc16 mbcache jbd2 ext4 virtio_blk failover net_failover virtio_net"

log() { printf 'rxe-vm: %s\n' "$*" >&2; }
die() { log "$*"; exit 125; }

prepare_only=0
while [[ $# -gt 0 ]]; do
    case $1 in
        --prepare) prepare_only=1; shift ;;
        --) shift; break ;;
        *) break ;;
    esac
done
[[ $prepare_only == 1 || $# -gt 0 ]] || die "usage: $0 [--prepare] [--] COMMAND [ARGS...]"

mkdir -p "$WORK"

# --- packages ---------------------------------------------------------------
apt_private() {
    # A private apt configuration: the system's Debian sources plus
    # bookworm-backports, with its own lists folder.
    local dir=$WORK/apt
    mkdir -p "$dir/sources.list.d" "$dir/lists/partial"
    local uri
    uri=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    if [[ -z $uri ]]; then
        uri=$(awk '/^deb / && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    fi
    [[ -n $uri ]] || die "cannot find the Debian mirror in /etc/apt to derive bookworm-backports from"
    cat >"$dir/sources.list.d/hipobj-backports.sources" <<EOF
Types: deb
URIs: $uri
Suites: bookworm bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    APT_OPTS=(-o "Dir::Etc::sourcelist=/dev/null" -o "Dir::Etc::sourceparts=$dir/sources.list.d"
        -o "Dir::State::Lists=$dir/lists")
}

install_packages() {
    local need=()
    command -v qemu-system-x86_64 >/dev/null || need+=(qemu)
    command -v busybox >/dev/null || [[ -x /bin/busybox ]] || need+=(busybox-static)
    command -v depmod >/dev/null || need+=(kmod)
    command -v cpio >/dev/null || need+=(cpio)
    command -v rdma >/dev/null || need+=(iproute2)
    [[ -e /usr/lib/x86_64-linux-gnu/libibverbs.so.1 ]] || need+=(libibverbs1)
    [[ -e /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so ]] || need+=(ibverbs-providers)
    # The TLS relay in front of elbencho's server (scripts/rxe-rc-v2-client-test.sh).
    command -v stunnel4 >/dev/null || need+=(stunnel4)
    [[ ${#need[@]} -eq 0 ]] && return 0
    [[ $(id -u) == 0 ]] || die "missing ${need[*]}; run as root to install them"
    apt_private
    log "installing ${need[*]}"
    apt-get "${APT_OPTS[@]}" update -qq
    local plain=()
    for p in "${need[@]}"; do [[ $p == qemu ]] || plain+=("$p"); done
    if [[ ${#plain[@]} -gt 0 ]]; then
        DEBIAN_FRONTEND=noninteractive apt-get "${APT_OPTS[@]}" install -y -qq --no-install-recommends "${plain[@]}"
    fi
    if [[ " ${need[*]} " == *" qemu "* ]]; then
        # bookworm's qemu-system-x86 (7.2) would remove the image's qemu-utils
        # from backports; the backports build installs beside it.
        DEBIAN_FRONTEND=noninteractive apt-get "${APT_OPTS[@]}" install -y -qq --no-install-recommends \
            -t bookworm-backports qemu-system-x86
    fi
}

# --- kernel -----------------------------------------------------------------
fetch_kernel() {
    [[ -f $WORK/kernel/ready ]] && return 0
    apt_private
    [[ -d $WORK/apt/lists ]] && ls "$WORK/apt/lists"/*Packages* >/dev/null 2>&1 || apt-get "${APT_OPTS[@]}" update -qq
    # The image package linux-image-amd64 depends on, in bookworm (6.1).
    local pkg
    pkg=$(apt-cache "${APT_OPTS[@]}" depends -t bookworm linux-image-amd64 2>/dev/null |
        awk '/Depends: linux-image-6\.1\.[0-9.-]+-amd64$/ {print $2; exit}')
    [[ -n $pkg ]] || pkg=$(apt-cache "${APT_OPTS[@]}" pkgnames linux-image-6.1 | grep -E '^linux-image-6\.1\.[0-9.-]+-amd64$' | sort -V | tail -1)
    [[ -n $pkg ]] || die "no linux-image-6.1.*-amd64 package found"
    log "fetching $pkg"
    rm -rf "$WORK/kernel" && mkdir -p "$WORK/kernel"
    (cd "$WORK/kernel" && apt-get "${APT_OPTS[@]}" download "$pkg" >/dev/null)
    dpkg -x "$WORK"/kernel/*.deb "$WORK/kernel/root"
    local ver
    ver=$(ls "$WORK/kernel/root/lib/modules")
    depmod -b "$WORK/kernel/root" "$ver"
    echo "$ver" >"$WORK/kernel/ready"
}

# --- initramfs --------------------------------------------------------------
build_initrd() {
    local ver
    ver=$(cat "$WORK/kernel/ready")
    # Rebuilt when this script changed or the module list differs from the
    # one the cached initrd was built with (another checkout may share the cache).
    [[ -f $WORK/initrd.gz && $WORK/initrd.gz -nt $0 && "$(cat "$WORK/initrd.modules" 2>/dev/null)" == "$MODULES" ]] && return 0
    local root=$WORK/initrd
    rm -rf "$root" && mkdir -p "$root"/{bin,dev,proc,sys,host,mods}
    cp "$(command -v busybox || echo /bin/busybox)" "$root/bin/busybox"
    for a in sh mount umount insmod mkdir chroot poweroff echo cat sleep; do ln -s busybox "$root/bin/$a"; done
    local moddir=$WORK/kernel/root/lib/modules/$ver m f
    for m in $MODULES; do
        f=$(find "$moddir" -name "$m.ko*" | head -1)
        [[ -n $f ]] || die "module $m not found in $ver"
        case $f in
            *.xz) xz -dc "$f" >"$root/mods/$m.ko" ;;
            *.zst) zstd -qdc "$f" >"$root/mods/$m.ko" ;;
            *) cp "$f" "$root/mods/$m.ko" ;;
        esac
    done
    # The guest's init: load the modules, mount the host read-only, run the job.
    cat >"$root/init" <<EOF
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(echo $MODULES); do insmod /mods/\$m.ko || echo "rxe-vm: insmod \$m failed"; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro host /host || echo "rxe-vm: 9p mount failed"
mount -t proc proc /host/proc
mount -t sysfs sys /host/sys
mount -t devtmpfs dev /host/dev
mount -t tmpfs run /host/run
chroot /host /bin/sh $WORK/job/run.sh
rc=\$?
echo
echo "RXE-VM-EXIT=\$rc"
poweroff -f
EOF
    chmod +x "$root/init"
    (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$WORK/initrd.gz"
    printf '%s' "$MODULES" >"$WORK/initrd.modules"
}

install_packages
fetch_kernel
build_initrd
[[ $prepare_only == 1 ]] && { log "prepared in $WORK"; exit 0; }

# --- the job ----------------------------------------------------------------
mkdir -p "$WORK/job"
{
    echo 'set -u'
    # The host's /tmp stays visible (read-only, like all of /), since the
    # checkout and its binaries may live there; scratch files go to a tmpfs.
    echo 'mkdir -p /run/scratch'
    echo 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/run/scratch TMPDIR=/run/scratch'
    # Carry selected variables of the caller into the guest.
    for v in RUST_BACKTRACE RUST_TEST_THREADS HIPOBJ_RXE_DEVICE; do
        [[ -n ${!v:-} ]] && printf 'export %s=%q\n' "$v" "${!v}"
    done
    echo 'ip link set lo up'
    echo 'ip link show dummy0 >/dev/null 2>&1 || ip link add dummy0 type dummy'
    echo 'ip addr add 192.0.2.1/24 dev dummy0'
    echo 'ip link set dummy0 up'
    echo 'rdma link add rxe0 type rxe netdev dummy0 || echo "rxe-vm: rdma link add failed"'
    printf 'cd %q\n' "$PWD"
    printf '%q ' "$@"
    echo
} >"$WORK/job/run.sh"

vmlinuz=$(ls "$WORK"/kernel/root/boot/vmlinuz-*)
log "booting $(basename "$vmlinuz") under TCG; running: $*"
start=$(date +%s)
set +e
extra=(-nic none)
if [[ -n ${RXE_VM_HOSTFWD:-} ]]; then
    extra=(-nic "user,model=virtio-net-pci,restrict=on,hostfwd=$RXE_VM_HOSTFWD")
fi
if [[ -n ${RXE_VM_DISK:-} ]]; then
    extra+=(-drive "file=$RXE_VM_DISK,format=raw,if=virtio,cache=writeback")
fi
timeout "$TIMEOUT" qemu-system-x86_64 -accel tcg -m 2048 -smp 2 \
    -kernel "$vmlinuz" -initrd "$WORK/initrd.gz" \
    -append "console=ttyS0 quiet panic=-1" \
    -nographic "${extra[@]}" -no-reboot \
    -virtfs local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap \
    </dev/null | tee "$WORK/console.log"
set -e
log "VM ran $(($(date +%s) - start)) s"
rc=$(grep -ao 'RXE-VM-EXIT=[0-9]*' "$WORK/console.log" | tail -1 | cut -d= -f2)
[[ -n $rc ]] || die "the VM did not report an exit status (see $WORK/console.log)"
exit "$rc"
