#!/usr/bin/env bash
# Several benchmarks/gpu_session.sh lanes side by side in one device call, so one call does more of the work; lane i
# runs on GPU i mod (the host's GPU count) and logs under $OUT/laneI; every lane's summary is printed last.
#   bash benchmarks/gpu_lanes.sh SECONDS_PER_STEP TOTAL_SECONDS "LANE0 STEPS" ["LANE1 STEPS" ...]
# Lanes share the host's CPUs (and, on a one-GPU host, the GPU): put timing-sensitive steps (bench_eval, bench,
# raw_rt, tuning, vec) in a call of their own, or beside light ones only, never beside parallel builds (prebuild).
set -u
limit=$1; total=$2; shift 2
out=${OUT:-gpu-logs}; mkdir -p "$out"
here=$(dirname "$0")
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); (( gpus > 0 )) || gpus=1
i=0
for lane in "$@"; do
  CUDA_VISIBLE_DEVICES=$(( i % gpus )) OUT=$out/lane$i bash "$here/gpu_session.sh" "$limit" "$total" $lane \
    > "$out/lane$i.txt" 2>&1 &
  i=$(( i + 1 ))
done
wait
for (( j = 0; j < i; j++ )); do echo "== lane $j (GPU $(( j % gpus )))"; tail -n 20 "$out/lane$j.txt"; done
