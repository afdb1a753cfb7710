#!/usr/bin/env bash
# Two benchmarks/gpu_session.sh lanes side by side on a two-GPU host, one GPU each, so one device call does twice
# the work; each lane logs under $OUT/lane0 and $OUT/lane1, both summaries are printed last.
#   bash benchmarks/gpu_lanes.sh SECONDS_PER_STEP TOTAL_SECONDS "LANE0 STEPS" "LANE1 STEPS"
# The lanes share the host's CPUs: put the timing-sensitive steps (bench_eval) beside light ones (formats, local),
# not beside parallel builds (prebuild).
set -u
limit=$1; total=$2; lane0=$3; lane1=$4
out=${OUT:-gpu-logs}
here=$(dirname "$0")
CUDA_VISIBLE_DEVICES=0 OUT=$out/lane0 bash "$here/gpu_session.sh" "$limit" "$total" $lane0 > "$out/lane0.txt" 2>&1 &
CUDA_VISIBLE_DEVICES=1 OUT=$out/lane1 bash "$here/gpu_session.sh" "$limit" "$total" $lane1 > "$out/lane1.txt" 2>&1 &
wait
for lane in 0 1; do echo "== lane $lane (GPU $lane)"; tail -n 20 "$out/lane$lane.txt"; done
