#!/bin/sh
# Runs inside the VM (scripts/bench-write-bw boots it): alternates perftest's ib_write_bw
# (loopback: server and client processes on rxe0) and `gpudoctor probe write-bw` (loopback: two
# QPs in one process) on the same device with the same sizes, iteration counts, TX depth and CQ
# moderation, ROUNDS times, and appends "tool size round MB/s(decimal)" lines to OUT/samples.
# The order flips every round so that neither tool always runs first.
# Usage: write-bw-guest.sh BIN OUTDIR ROUNDS "SIZE:ITERS ..." TX_DEPTH CQ_MOD
OUT=$2; ROUNDS=$3; PLAN=$4; TXD=$5; CQM=$6
mkdir -p "$OUT"; : > "$OUT/samples"
cp "$1" /tmp/gpudoctor   # 9p has no page cache: run from tmpfs
ib() {  # size iters round
  timeout 120 ib_write_bw -d rxe0 -x 0 -F -s "$1" -n "$2" -t "$TXD" -Q "$CQM" > /tmp/srv.log 2>&1 &
  srv=$!; sleep 1
  line=$(timeout 120 ib_write_bw -d rxe0 -x 0 -F -s "$1" -n "$2" -t "$TXD" -Q "$CQM" 127.0.0.1 2>&1 |
         awk -v s="$1" '$1 == s && NF >= 5 {print $4}')
  wait $srv
  # perftest 6.06 prints MB as 2^20 bytes (its MsgRate x size shows it): convert to 10^6.
  case "$line" in ""|0|0.0|0.00) line=;; esac   # no result line, or a 0.00 report: a failed run
  [ -n "$line" ] && echo "ib_write_bw $1 $3 $(awk -v m="$line" 'BEGIN {printf "%.4f", m * 1.048576}')" >> "$OUT/samples" ||
    echo "ib_write_bw $1 $3 failed" >> "$OUT/errors"
}
# One timed repetition (--reps 1), as one ib_write_bw run is: its median is that run's average,
# and the rounds supply the medians on both sides, as before.
gd() {
  v=$(/tmp/gpudoctor probe write-bw -d rxe0 -x 0 --sizes "$1" --iters "$2" --reps 1 --tx-depth "$TXD" --cq-mod "$CQM" --json |
      awk -F: '/"median_mb_per_s"/ {gsub(/[ ,]/, "", $2); print $2}')
  case "$v" in ""|0|0.0) v=;; esac
  [ -n "$v" ] && echo "gpudoctor $1 $3 $v" >> "$OUT/samples" || echo "gpudoctor $1 $3 failed" >> "$OUT/errors"
}
r=1
while [ $r -le "$ROUNDS" ]; do
  for p in $PLAN; do
    s=${p%%:*}; n=${p##*:}
    if [ $((r % 2)) = 1 ]; then ib "$s" "$n" "$r"; gd "$s" "$n" "$r"; else gd "$s" "$n" "$r"; ib "$s" "$n" "$r"; fi
  done
  echo "round $r done at $(cut -d' ' -f1 /proc/uptime)s"
  r=$((r + 1))
done
