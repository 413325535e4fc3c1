#!/bin/sh
# Runs inside the VM (one boot): every verbs case of tests/it/vm.rs. Usage: verbs-suite.sh BIN OUTDIR
# Each case writes OUTDIR/NAME.out (stdout), NAME.err (stderr) and NAME.rc; the Rust test judges them.
# Iteration counts are small: soft-RoCE under TCG moves about 50 MB/s.
OUT=$2
mkdir -p "$OUT"
# Run from the VM's tmpfs: the 9p share has no page cache, so every exec of a binary there
# pages it in again over 9p (seconds per start under TCG).
cp "$1" /tmp/gpudoctor; BIN=/tmp/gpudoctor
up() { cut -d' ' -f1 /proc/uptime; }
case_() { name=$1; shift; t0=$(up); "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"; echo $? > "$OUT/$name.rc"; echo "$name $t0 $(up)" >> "$OUT/times"; }
bg_case() { name=$1; shift; ( "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"; echo $? > "$OUT/$name.rc" ) & }
G="$BIN probe write-bw"

# Facts the test compares with: sysfs as the kernel shows it.
cat /sys/class/infiniband/rxe0/ports/1/gids/0 > "$OUT/sysfs-rxe0-gid0"

# Loopback on rxe0: the default sweep, validated; JSON and table.
case_ loopback      $G -d rxe0 --iters 64 --reps 3 --validate --json
case_ loopback-tbl  $G -d rxe0 --sizes 4096 --iters 32 --validate
case_ loopback-qps  $G -d rxe0 --sizes 65536 --iters 64 --qps 4 --tx-depth 16 --cq-mod 4 --validate --json
# check --level 2 inside a machine with a real kernel RDMA stack: the write-bw loopback on rxe0's
# active port (and level-0 RDMA discovery through sysfs).
case_ check-l2      $BIN check --level 2 --json
# Level 3 on host memory (the VM has no GPU): the level-3 path with the host provider gives
# level 2's results for the same plan, and the NIC half of the registration decision comes from a
# real ibv_reg_dmabuf_mr call: NCCL's fd=-1 probe (this Debian 6.1 kernel has CONFIG_UDMABUF unset,
# so no dma-buf can be made from a memfd here).
case_ l2-ref        $G -d rxe0 --sizes 4096,65536 --iters 32 --validate --json
case_ l3-host       $G -d rxe0 --gdr auto --sizes 4096,65536 --iters 32 --validate --json
case_ l3-host-tbl   $G -d rxe0 --gdr auto --sizes 4096 --iters 16 --validate
case_ l3-dmabuf     $G -d rxe0 --gdr dmabuf --sizes 4096 --iters 8 --json
case_ l3-peermem    $G -d rxe0 --gdr peermem --sizes 4096 --iters 16 --validate --json
case_ l3-gpu-auto   $G --gpu auto --json
case_ l3-gpu-0      $G --gpu 0
case_ check-l3      $BIN check --level 3 --json
# Level 4 (GPU-initiated writes on mlx5): rxe is no mlx5 device and the VM has no GPU, so each is
# a skip that says which; bad arguments are refused before anything runs.
L4="$BIN probe gpu-write-bw"
case_ l4-rxe        $L4 -d rxe0 --json
case_ l4-rxe-gate   $L4 -d rxe0 --fail-on-skip
case_ l4-gpu-auto   $L4 --gpu auto --json
case_ l4-bad        $L4 -d rxe0 --writes-per-iter 3
case_ check-l4      $BIN check --level 4 --json
# Ctrl-C during a level-3 run (4 KiB x 400000 takes minutes here): it stops between polls and
# leaves through the same drops as any error (regions deregistered before memory is freed).
C0=/sys/class/infiniband/rxe0/ports/1/hw_counters/rcvd_pkts; base0=$(cat $C0 2>/dev/null || echo 0)
$G -d rxe0 --gdr auto --sizes 4096 --iters 400000 --cq-mod 16 > "$OUT/l3-sigint.out" 2> "$OUT/l3-sigint.err" &
ipid=$!
i=0
until [ "$(cat $C0 2>/dev/null || echo 0)" -gt $((base0 + 300)) ] || [ $i -ge 300 ]; do sleep 0.1; i=$((i+1)); done
kill -INT $ipid; wait $ipid; echo $? > "$OUT/l3-sigint.rc"; echo "sent SIGINT after $i polls at $(up)" >> "$OUT/times"
# SIGTERM during a level-2 run (as a scheduler's timeout sends it): exit 2 naming the signal, within
# a second or two; a rerun on the same device right after works (QPs and MRs were released).
base0=$(cat $C0 2>/dev/null || echo 0)
$G -d rxe0 --sizes 4096 --iters 400000 --cq-mod 16 > "$OUT/l2-sigterm.out" 2> "$OUT/l2-sigterm.err" &
ipid=$!
i=0
until [ "$(cat $C0 2>/dev/null || echo 0)" -gt $((base0 + 300)) ] || [ $i -ge 300 ]; do sleep 0.1; i=$((i+1)); done
t0=$(up); kill -TERM $ipid; wait $ipid; echo $? > "$OUT/l2-sigterm.rc"; echo "$t0 $(up)" > "$OUT/l2-sigterm.stop"
case_ l2-after-term $G -d rxe0 --sizes 4096 --iters 32 --validate --json
# Error paths on one device.
case_ bad-device    $G -d nosuch0 --iters 8
case_ bad-gid       $G -d rxe0 --gid-index 77 --iters 8
case_ bad-port      $G -d rxe0 --port 2 --iters 8

# Two nodes: rxe_a (10.77.0.1) and rxe_b (10.77.0.2) on a veth pair.
sh "$(dirname "$0")/../../vm/guest/two-rxe.sh" > "$OUT/two-rxe.log" 2>&1; echo $? > "$OUT/two-rxe.rc"
bg_case serve       $G -d rxe_b --serve --listen 10.77.0.2:18516 --token s3cret --timeout 60 --json
case_ client        $G -d rxe_a --peer 10.77.0.2 --token s3cret --sizes 64,4096,65536 --iters 64 --validate --json
wait
bg_case serve-tok   $G -d rxe_b --serve --listen 10.77.0.2:18517 --token right --timeout 60
case_ client-tok    $G -d rxe_a --peer 10.77.0.2:18517 --token wrong --iters 8
wait
case_ unreachable   $G -d rxe_a --peer 10.77.0.2:18599 --token x --iters 8 --timeout 2
case_ no-client     $G -d rxe_b --serve --listen 10.77.0.2:18518 --token x --timeout 2
# Peer gone: the server is killed while the client is writing (4 KiB x 400000 takes over a minute here).
C=/sys/class/infiniband/rxe_b/ports/1/hw_counters/rcvd_pkts; base=$(cat $C 2>/dev/null || echo 0)
$G -d rxe_b --serve --listen 10.77.0.2:18519 --token t --timeout 60 > "$OUT/gone-serve.out" 2>&1 &
spid=$!
bg_case gone        $G -d rxe_a --peer 10.77.0.2:18519 --token t --sizes 4096 --iters 400000 --cq-mod 16 --timeout 10
# Kill it once the writes flow (rxe_b has received a few hundred packets).
i=0
until [ "$(cat $C 2>/dev/null || echo 0)" -gt $((base + 300)) ] || [ $i -ge 300 ]; do sleep 0.1; i=$((i+1)); done
kill -9 $spid; echo "killed the server after $i polls ($(cat $C) packets) at $(up)" >> "$OUT/times"
wait
# Port down: take rxe0's netdev down.
/usr/sbin/ip link set rxenet0 down; sleep 0.5
case_ port-down     $G -d rxe0 --iters 8
echo done > "$OUT/done"
