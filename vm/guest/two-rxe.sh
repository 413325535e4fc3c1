#!/bin/sh
# Run inside the VM: two Soft-RoCE devices, rxe_a on va (10.77.0.1) and rxe_b on vb (10.77.0.2),
# the two ends of one veth pair, so that traffic between them really crosses a link.
# Both addresses are local to the one kernel, which would normally deliver between them over
# lo, where rdma_rxe (6.1) has no device and drops the packets. Policy routing sends locally
# generated traffic for each address out of the other end of the pair instead, and
# accept_local lets the receiving end take packets whose source address is local.
# (busybox's ip applet cannot do veth peers or rule prefs: call iproute2 by path.)
set -e
IP=/usr/sbin/ip
$IP link add va type veth peer name vb
$IP addr add 10.77.0.1/24 dev va
$IP addr add 10.77.0.2/24 dev vb
$IP link set va up
$IP link set vb up
for k in all.accept_local va.accept_local vb.accept_local; do sysctl -qw "net.ipv4.conf.$k=1"; done
for k in all.rp_filter va.rp_filter vb.rp_filter; do sysctl -qw "net.ipv4.conf.$k=0"; done
$IP rule add pref 10 to 10.77.0.2 iif lo table 100
$IP rule add pref 11 to 10.77.0.1 iif lo table 101
$IP route add 10.77.0.2 dev va src 10.77.0.1 table 100
$IP route add 10.77.0.1 dev vb src 10.77.0.2 table 101
$IP rule del pref 0 lookup local
$IP rule add pref 100 lookup local
rdma link add rxe_a type rxe netdev va
rdma link add rxe_b type rxe netdev vb
# Wait for both ports to be ACTIVE and to carry their IPv4-mapped GIDs.
i=0
while [ $i -lt 50 ]; do
  if [ "$(cat /sys/class/infiniband/rxe_a/ports/1/state 2>/dev/null)" = "4: ACTIVE" ] &&
     [ "$(cat /sys/class/infiniband/rxe_b/ports/1/state 2>/dev/null)" = "4: ACTIVE" ] &&
     grep -q ffff /sys/class/infiniband/rxe_a/ports/1/gids/1 2>/dev/null &&
     grep -q ffff /sys/class/infiniband/rxe_b/ports/1/gids/1 2>/dev/null; then exit 0; fi
  sleep 0.1; i=$((i + 1))
done
echo "two-rxe.sh: rxe_a/rxe_b did not become ACTIVE with IPv4 GIDs" >&2
exit 1
