#!/bin/bash
# Builds the initramfs for tests/vm/vmrun.sh: static busybox, the 9p/virtio/overlay modules of
# kernel KVER, and an /init that mounts the host's / read-only over 9p (tmpfs overlays on /tmp,
# /var/tmp and /root, tmpfs /run), switch_roots into it (the kernel runs /sbin/modprobe in PID
# 1's root to autoload ip_vs), runs the script named by vmscript= as root and powers off,
# printing VM_RC=<exit code> on the console.
set -euo pipefail
KVER=$1; OUT=$2
D=$(mktemp -d); trap 'rm -rf "$D"' EXIT
mkdir -p "$D"/{bin,proc,sys,dev,newroot,mods}
cp /bin/busybox "$D"/bin/busybox
for a in sh mount umount insmod switch_root poweroff cat mkdir echo sleep; do ln -s busybox "$D/bin/$a"; done
i=0
for m in virtio_pci 9pnet_virtio 9p overlay; do modprobe -S "$KVER" --show-depends "$m"; done \
  | awk '$1=="insmod"{print $2}' | awk '!seen[$0]++' | while read -r ko; do
    i=$((i+1)); name=$(printf %02d $i)-$(basename "$ko")
    case $ko in
      *.ko.xz) xz -dc "$ko" > "$D/mods/${name%.xz}";;
      *.ko.zst) zstd -qdc "$ko" > "$D/mods/${name%.zst}";;
      *) cp "$ko" "$D/mods/$name";;
    esac
  done
cat > "$D/init" <<'INIT'
#!/bin/sh
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in /mods/*.ko; do insmod "$m"; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /newroot || { echo "VM_RC=250"; poweroff -f; }
mount -t proc proc /newroot/proc; mount -t sysfs sys /newroot/sys; mount -t devtmpfs dev /newroot/dev
mkdir -p /dev/pts /dev/shm 2>/dev/null; mount -t devpts devpts /newroot/dev/pts; mount -t tmpfs shm /newroot/dev/shm
mount -t tmpfs run /newroot/run
mkdir -p /ov; mount -t tmpfs ov /ov
for d in tmp var/tmp root; do
  mkdir -p /ov/$d/u /ov/$d/w
  mount -t overlay overlay -o lowerdir=/newroot/$d,upperdir=/ov/$d/u,workdir=/ov/$d/w /newroot/$d
done
CMD=""; for a in $(cat /proc/cmdline); do case $a in vmscript=*) CMD=${a#vmscript=};; esac; done
exec switch_root /newroot /bin/sh -c "cd /tmp; /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb $CMD </dev/console >/dev/console 2>&1; echo VM_RC=\$? >/dev/console; echo o >/proc/sysrq-trigger; sleep 5 2>/dev/null"
INIT
chmod +x "$D/init"
(cd "$D" && find . | cpio -o -H newc 2>/dev/null | gzip -1) > "$OUT.tmp.$$"
mv -f "$OUT.tmp.$$" "$OUT"
