#!/bin/bash
# vmrun.sh SCRIPT [KVER]: boots Debian's linux-image-amd64 under qemu's software emulation
# (TCG: /dev/kvm here only runs PVM guests) with the host's / shared read-only over 9p, runs
# SCRIPT (absolute path, executable, no spaces) as root in the guest, prints its console
# output and exits with its exit code (255: no result, i.e. timeout or guest crash; 254: no
# kernel with ip_vs modules).
set -euo pipefail
SCRIPT=$1
KVER=${2:-$(for k in $(ls /boot/vmlinuz-* 2>/dev/null | sed 's|/boot/vmlinuz-||' | sort -V); do
  ls /lib/modules/$k/kernel/net/netfilter/ipvs/ip_vs.ko* >/dev/null 2>&1 && echo "$k"; done | tail -1)}
[ -n "$KVER" ] || { echo "vmrun: no /boot/vmlinuz-* with ip_vs modules (apt-get install linux-image-amd64)" >&2; exit 254; }
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${VM_CACHE:-/var/tmp/vipd-vm}
mkdir -p "$CACHE"
INITRD=$CACHE/initrd-$KVER-$(sha256sum "$HERE/mkinitrd.sh" | cut -c1-12).cpio.gz
[ -s "$INITRD" ] || "$HERE/mkinitrd.sh" "$KVER" "$INITRD"
LOG=$(mktemp); trap 'rm -f "$LOG"' EXIT
timeout "${VM_TIMEOUT:-280}" qemu-system-x86_64 -accel tcg,thread=multi -cpu "${VM_CPU:-max}" -smp "${VM_CPUS:-2}" -m "${VM_MEM:-1G}" \
  -nodefaults -no-user-config -display none -no-reboot \
  -chardev stdio,id=con,signal=off -serial chardev:con \
  -fsdev local,id=root,path=/,security_model=none,readonly=on,multidevs=remap \
  -device virtio-9p-pci,fsdev=root,mount_tag=hostroot \
  -kernel "/boot/vmlinuz-$KVER" -initrd "$INITRD" \
  -append "console=ttyS0 quiet loglevel=0 panic=-1 vmscript=$SCRIPT" </dev/null | tr -d '\r' | tee "$LOG" | grep -avE '^VM_RC=|^\[ *[0-9]+\.[0-9]+\] ' || true
rc=$(grep -a '^VM_RC=' "$LOG" | tail -1 | cut -d= -f2)
exit "${rc:-255}"
