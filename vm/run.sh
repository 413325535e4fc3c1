#!/bin/bash
# Usage: run.sh CMD [ARG...]     run one command inside the rxe VM
#        run.sh -c 'SHELL SCRIPT' run a (busybox sh) script inside the rxe VM
# Boots the kernel/initramfs made by build.sh under QEMU (no network device: -nic none),
# with rxe0 bound to a VM-internal dummy netdev, and the directory $GPUDOCTOR_VM_SHARE (default: the
# current directory) shared read-write over 9p at the same absolute path; the command runs in the
# current directory. Prints the console output, exits with the command's exit status
# (124: timed out, 125: the VM did not report a status).
# Env: GPUDOCTOR_VM_ACCEL=auto|kvm|tcg  GPUDOCTOR_VM_TIMEOUT=600 (s)  GPUDOCTOR_VM_MEM=2G  GPUDOCTOR_VM_SMP=2
#      GPUDOCTOR_VM_RXE=1 (0: no rxe0)  GPUDOCTOR_VM_IPV4= (e.g. 169.254.0.1/16: an address on the VM-internal
#      netdev, for an IPv4 GID / rdma_cm)  GPUDOCTOR_VM_APPEND= (extra kernel args)  GPUDOCTOR_VM_CACHE=/var/tmp/gpudoctor-vm
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${GPUDOCTOR_VM_CACHE:-/var/tmp/gpudoctor-vm}
[ $# -gt 0 ] || { sed -n '2,/^set -e/p' "$0" | grep '^#'; exit 2; }
[ -e "$CACHE/initrd.img" ] && [ -e "$CACHE/vmlinux" ] || "$HERE/build.sh" >&2
SHARE=$(cd "${GPUDOCTOR_VM_SHARE:-$PWD}" && pwd)
case "$SHARE" in /|/usr|/usr/*|/etc|/proc|/sys|/dev|/ctl) echo "run.sh: cannot share $SHARE" >&2; exit 2;; esac
CTL=$(mktemp -d /tmp/gpudoctor-vm-ctl.XXXXXX); trap 'rm -rf "$CTL"' EXIT
printf 'SHARE=%q\nCWD=%q\nRXE_NET=%q\nRXE_IPV4=%q\n' "$SHARE" "$PWD" "${GPUDOCTOR_VM_RXE:-1}" "${GPUDOCTOR_VM_IPV4:-}" > "$CTL/env"
if [ "$1" = -c ]; then printf '%s\n' "$2" > "$CTL/cmd"; else printf '%q ' "$@" > "$CTL/cmd"; echo >> "$CTL/cmd"; fi

ACCEL=${GPUDOCTOR_VM_ACCEL:-auto}
# auto: KVM only with the usual kvm_intel/kvm_amd. Under kvm_pvm (a PVM host, as on these dev
# machines) a stock kernel fails to boot (emulation failures) and runs ~20x slower than TCG.
if [ "$ACCEL" = auto ]; then
  ACCEL=tcg
  if [ -w /dev/kvm ] && { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; }; then ACCEL=kvm; fi
fi
CPU=max; [ "$ACCEL" = kvm ] && CPU=host
set +e
timeout -k 10 "${GPUDOCTOR_VM_TIMEOUT:-600}" qemu-system-x86_64 -accel "$ACCEL" -cpu "$CPU" \
  -m "${GPUDOCTOR_VM_MEM:-2G}" -smp "${GPUDOCTOR_VM_SMP:-2}" -nodefaults -no-user-config -display none \
  -serial stdio -no-reboot -nic none \
  -kernel "$CACHE/vmlinux" -initrd "$CACHE/initrd.img" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1 ${GPUDOCTOR_VM_APPEND:-}" \
  -virtfs "local,path=$CTL,mount_tag=ctl,security_model=none" \
  -virtfs "local,path=$SHARE,mount_tag=host0,security_model=none" \
  </dev/null 2>&1 | sed -u 's/\r$//'
qrc=${PIPESTATUS[0]}
set -e
[ "$qrc" = 124 ] || [ "$qrc" = 137 ] && { echo "[gpudoctor-vm] timed out after ${GPUDOCTOR_VM_TIMEOUT:-600}s (accel $ACCEL)" >&2; exit 124; }
[ -s "$CTL/rc" ] || { echo "[gpudoctor-vm] the VM gave no exit status (qemu status $qrc, accel $ACCEL)" >&2; exit 125; }
exit "$(cat "$CTL/rc")"
