#!/bin/bash
# gpudoctor's VM rig: build a Debian kernel + initramfs that brings up Soft-RoCE (rdma_rxe) in
# QEMU, so verbs code runs against a real kernel RDMA stack on machines without RDMA hardware.
# Everything downloaded or built goes to $GPUDOCTOR_VM_CACHE (default /var/tmp/gpudoctor-vm).
# Idempotent: the kernel .deb is fetched once; the initramfs is rebuilt only when build.sh/init change.
set -euo pipefail
CACHE=${GPUDOCTOR_VM_CACHE:-/var/tmp/gpudoctor-vm}
HERE=$(cd "$(dirname "$0")" && pwd)
ARCH_LIB=/usr/lib/x86_64-linux-gnu

# 1. Host packages: QEMU, busybox, and the rdma-core userspace that is copied into the VM.
PKGS="qemu-system-x86 busybox-static kmod cpio zstd xz-utils libibverbs-dev ibverbs-providers ibverbs-utils perftest iproute2"
missing=$(for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
if [ -n "$missing" ]; then
  echo "vm/build.sh: installing" $missing >&2
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
fi

# 2. Debian kernel package (never installed on this machine: only unpacked in a scratch dir).
mkdir -p "$CACHE/debs"
# A minimal image may carry no package lists (its packages all present): fetch them once.
apt-cache show linux-image-amd64 >/dev/null 2>&1 || $SUDO apt-get update -q
KPKG=${GPUDOCTOR_VM_KPKG:-$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')}
KVER=${KPKG#linux-image-}
[ -n "$(ls "$CACHE"/debs/"${KPKG}"_*.deb 2>/dev/null)" ] ||
  (cd "$CACHE/debs" && apt-get download -q -o APT::Sandbox::User=root "$KPKG")
KDEB=$(ls "$CACHE"/debs/"${KPKG}"_*.deb | tail -1)
I="$CACHE/initrd-$KVER.img"   # up to date? (GPUDOCTOR_VM_REBUILD=1 forces, e.g. after host rdma-core upgrades)
if [ -z "${GPUDOCTOR_VM_REBUILD:-}" ] && [ -s "$CACHE/vmlinux-$KVER" ] && [ "$I" -nt "$HERE/init" ] && [ "$I" -nt "$0" ]; then
  ln -sfn "vmlinux-$KVER" "$CACHE/vmlinux"; ln -sfn "initrd-$KVER.img" "$CACHE/initrd.img"
  echo "up to date: $CACHE/vmlinux-$KVER $I"; exit 0
fi
KTMP=$(mktemp -d "$CACHE/kpkg.XXXXXX"); trap 'rm -rf "$KTMP" "$CACHE/root.tmp"' EXIT
dpkg -x "$KDEB" "$KTMP"
depmod -b "$KTMP" "$KVER"

# 3. Root filesystem for the initramfs (merged-/usr layout, like the host).
R="$CACHE/root.tmp"; rm -rf "$R"
mkdir -p "$R"/usr/{bin,sbin,lib64,lib/modules} "$R$ARCH_LIB" "$R"/{proc,sys,dev,tmp,run,root,etc,ctl}
for d in bin sbin lib lib64; do ln -s usr/$d "$R/$d"; done
# /dev/console is not made with mknod (root only): it is appended to the archive below as a
# cpio entry, which the kernel unpacks as a device node, so the image builds without root.

# Kernel modules and their dependencies (resolved against the unpacked kernel).
MODS="rdma_rxe ib_uverbs rdma_ucm ib_umad crc32_generic crc32-pclmul dummy veth virtio_pci 9pnet_virtio 9p"
for m in $MODS; do
  modprobe -d "$KTMP" -S "$KVER" --show-depends "$m" | awk '$1=="insmod" {print $2}'
done | sort -u | while read -r ko; do
  install -D -m644 "$ko" "$R/usr/lib/modules/$KVER/${ko#"$KTMP"/lib/modules/"$KVER"/}"
done
cp "$KTMP/lib/modules/$KVER"/modules.{builtin,builtin.modinfo,order} "$R/usr/lib/modules/$KVER/"
depmod -b "$R" "$KVER"
echo "$MODS" > "$R/etc/gpudoctor-vm-modules"
# The uncompressed ELF vmlinux (Debian: CONFIG_PVH=y) lets QEMU enter the kernel directly (PVH):
# no BIOS real mode, no decompression; ~2 s faster per boot under TCG than the bzImage.
if [ ! -s "$CACHE/vmlinux-$KVER" ]; then
  off=$(LC_ALL=C grep -obUaP -m1 '\xfd7zXZ\x00' "$KTMP/boot/vmlinuz-$KVER" | awk -F: 'NR==1 {print $1}')
  { tail -c +$((off + 1)) "$KTMP/boot/vmlinuz-$KVER" || true; } | xz -dc --single-stream > "$CACHE/vmlinux-$KVER.tmp"
  [ "$(head -c4 "$CACHE/vmlinux-$KVER.tmp" | od -An -c | tr -d ' ')" = '177ELF' ]   # an ELF image
  mv "$CACHE/vmlinux-$KVER.tmp" "$CACHE/vmlinux-$KVER"
fi

# Copy a file keeping its name, into the canonical (merged-/usr) directory.
put() { local d; d=$(readlink -f "$(dirname "$1")"); [ -e "$R$d/$(basename "$1")" ] || install -D -m755 "$1" "$R$d/$(basename "$1")"; }
# Copy binaries/libraries plus every shared library they need.
put_with_libs() {
  local f l
  for f; do
    put "$f"
    for l in $(ldd "$f" 2>/dev/null | awk '/=> \// {print $3} /^\t\// {print $1}'); do put "$l"; done
  done
}
BINS="ibv_devinfo ibv_devices ibv_rc_pingpong ibv_ud_pingpong ibv_srq_pingpong rdma ip
      ib_write_bw ib_write_lat ib_read_bw ib_read_lat ib_send_bw ib_send_lat ib_atomic_bw ib_atomic_lat"
put_with_libs $(for b in $BINS; do command -v "$b"; done)
# libibverbs loads providers with dlopen; rxe's is librxe-rdmav*.so. Also libs a Rust binary typically needs.
put_with_libs $ARCH_LIB/libibverbs/*.so $ARCH_LIB/libibverbs.so.1 $ARCH_LIB/librdmacm.so.1 \
  $ARCH_LIB/libgcc_s.so.1 $ARCH_LIB/libm.so.6 $ARCH_LIB/libdl.so.2 $ARCH_LIB/libpthread.so.0 $ARCH_LIB/librt.so.1
cp -r /etc/libibverbs.d "$R/etc/"
cp /etc/ld.so.conf "$R/etc/"; mkdir -p "$R/etc/ld.so.conf.d"; cp /etc/ld.so.conf.d/x86_64-linux-gnu.conf /etc/ld.so.conf.d/libc.conf "$R/etc/ld.so.conf.d/"
ldconfig -r "$R"
printf 'root:x:0:0:root:/root:/bin/sh\n' > "$R/etc/passwd"; printf 'root:x:0:\n' > "$R/etc/group"
printf '127.0.0.1 localhost\n::1 localhost\n' > "$R/etc/hosts"

# busybox for everything else (does not replace the real ip/rdma copied above).
install -m755 /bin/busybox "$R/usr/bin/busybox"
for a in $(busybox --list-full); do [ -e "$R/$a" ] || [ -L "$R/$a" ] || ln -s /usr/bin/busybox "$R/$a"; done
install -m755 "$HERE/init" "$R/init"

# 4. Pack: the tree (owned by root in the archive, whoever builds it), then a second archive
# with the console device node (newc: 110-byte header, name and data padded to 4 bytes; the
# kernel unpacks concatenated archives in turn).
newc() { # name mode rdevmajor rdevminor
  local name=$1 n=$((${#1} + 1))
  printf '070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X' \
    1 "$2" 0 0 1 0 0 0 0 "$3" "$4" "$n" 0
  printf '%s\0' "$name"
  head -c $(( (4 - (110 + n) % 4) % 4 )) /dev/zero
}
console_cpio() { newc dev/console $((0x2180)) 5 1; newc 'TRAILER!!!' 0 0 0; }
{ (cd "$R" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet); console_cpio; } |
  zstd -q -T0 -9 -f -o "$CACHE/initrd-$KVER.img.tmp"
mv "$CACHE/initrd-$KVER.img.tmp" "$CACHE/initrd-$KVER.img"
ln -sfn "vmlinux-$KVER" "$CACHE/vmlinux"; ln -sfn "initrd-$KVER.img" "$CACHE/initrd.img"
echo "kernel: $CACHE/vmlinux-$KVER  initramfs: $CACHE/initrd-$KVER.img ($(du -h "$CACHE/initrd-$KVER.img" | cut -f1))"
