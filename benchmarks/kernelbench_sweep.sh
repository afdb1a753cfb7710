#!/usr/bin/env bash
# Every KernelBench task through the judge, reference as candidate, guards off (`cudagym baselines check`): per
# level and protocol a table (markdown + CSV) of status, eager / torch.compile / candidate times, compile time,
# peak device memory and time per phase. Resumable across device calls: journals, tables and the baseline cache
# are packed into $OUT/sweep.tgz after every level; put that file in $STATE (default benchmarks/results/kernelbench/) before the next
# It stops submitting tasks TAIL seconds
# before its budget (default 150: jobs in flight finish), starts no task that a job as long as the longest so far
# would not finish 45 s before it (`--deadline-s`, counted from the judge's start), and is killed 10 s before it,
# so results are never lost.
#   bash benchmarks/kernelbench_sweep.sh [TOTAL_SECONDS [STEP ...]]      (repository root, GPU host)
# TOTAL_SECONDS defaults to 570 (a 10-minute call). A STEP is a protocol (kernelbench, cudagym, cuda-agent: its
# sweep) or "throughput": the first $FIRST (default 20) L1 tasks under cudagym twice, the second time with a fresh
# journal and the builds and baselines the first pass cached, for evaluations per GPU-hour and the time per phase
# (throughput-cudagym-L1.md: its "This run" line); or "largest": the $LARGEST (default 10) tasks with the largest
# input + output sets in the committed kernelbench-v0.4 tables, and those more than 0.9 GiB over their bound
# there, under the kernelbench preset with a fresh journal
# (the memory bound on the biggest tasks, on this tree: largest-L<level>.md); or "recheck": the tasks the committed
# cudagym-v4 tables flag (more than $OVER, default 0.3, GiB over their memory bound, or a profiled/timed ratio outside
# 0.8-1.2) under cudagym with a fresh journal (recheck-L<level>.md: their reserved and allocated peaks and busy-time
# ratios on this tree; $RECHECK_TASKS, "LEVEL ID ...;LEVEL ID ...", names the tasks instead; $RECHECK_PROTOCOLS,
# default "cudagym", judges them under each of these, e.g. 'cudagym cudagym[arm_wait_ms=200]'; on cached baselines a
# recheck takes the cached yardstick too, 'cudagym[yardstick=retimed]' times it again). Steps default to "kernelbench
# cudagym". Levels 1-3, and 4 when `transformers` imports and a model cache is there (its tasks load Hugging Face
# weights from the judge's model cache, CUDAGYM_MODEL_CACHE or .data/models; L4=1 runs it without one: then its
# tasks fail at load, naming the models). The baseline cache travels in the same file.
# Needs a KernelBench checkout: CUDAGYM_KERNELBENCH_DIR (default .data/kb). Uses every GPU (DEVICES=auto).
# RETRY=1 runs once more the tasks whose journaled result is not OK (`baselines check --retry-failed`).
# TRACE=1 writes each step's trace (CUDAGYM_TRACE) as $OUT/NAME.trace: for a recheck of a few tasks (a device call
# returns at most 8 files); benchmarks/trace_summary.py reads it.
set -u
total=${1:-570}; shift 2>/dev/null || true
steps=${*:-kernelbench cudagym}
deadline=$(( $(date +%s) + total ))
tail_s=${TAIL:-150}
# everything is written under $work and packed after every task level into $OUT/sweep.tgz (a device call returns
# at most 8 files): copy that file to $STATE/sweep.tgz (default benchmarks/results/kernelbench/) for the next
ret=${OUT:-kernelbench-logs}; mkdir -p "$ret"
out=${WORK:-/tmp/kernelbench-sweep}; mkdir -p "$out"
state=${STATE:-benchmarks/results/kernelbench}
[ -f "$state/sweep.tgz" ] && tar xzf "$state/sweep.tgz" -C "$out"
export CUDAGYM_KERNELBENCH_DIR=${CUDAGYM_KERNELBENCH_DIR:-.data/kb}
if [ ! -d "$CUDAGYM_KERNELBENCH_DIR" ]; then
  echo "no KernelBench checkout at $CUDAGYM_KERNELBENCH_DIR (set CUDAGYM_KERNELBENCH_DIR)" | tee "$out/summary.txt"
  exit 2
fi
source benchmarks/gpu_setup.sh
levels="1 2 3"
# level 4's models: a hub cache carried as .data/models (`cudagym tasks fetch-models --dest .data/models` on a host
# that reaches the hub), which the judge's confined processes read offline; without it those tasks fail at load
[ -z "${CUDAGYM_MODEL_CACHE:-}" ] && [ -d .data/models ] && export CUDAGYM_MODEL_CACHE=$PWD/.data/models
# without a cache every level-4 task fails at load (session 24: about 115 s of a device call for 3-6 such rows), so
# the level runs only with one (L4=1 runs it anyway, to see those failures)
l4_skip=""
if ! python3 -c "import transformers" 2>/dev/null; then
  l4_skip="transformers does not import"
elif [ -z "${CUDAGYM_MODEL_CACHE:-}" ] && [ "${L4:-0}" != 1 ]; then
  l4_skip="no model cache (CUDAGYM_MODEL_CACHE or .data/models; L4=1 runs it anyway)"
else
  levels="$levels 4"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$out/gpus.txt" 2>&1
mkdir -p "$CUDAGYM_CACHE_DIR/baselines"
if [ -d "$out/baselines" ]; then  # the carried cache, without overwriting what this host has (cp -n warns on coreutils 9)
  (cd "$out/baselines" && find . -type f) | while read -r f; do
    [ -e "$CUDAGYM_CACHE_DIR/baselines/$f" ] || { mkdir -p "$(dirname "$CUDAGYM_CACHE_DIR/baselines/$f")"
      cp -p "$out/baselines/$f" "$CUDAGYM_CACHE_DIR/baselines/$f"; }
  done
fi
summary=()
check() {  # check NAME PROTOCOL LEVEL JOURNAL [ARG...]: one `cudagym baselines check` in the time left, a summary row
  local name=$1 p=$2 level=$3 journal=$4 left start rc
  shift 4
  left=$(( deadline - $(date +%s) ))
  if (( left < tail_s + 30 )); then  # a call too short for its tail runs nothing: say what it would need
    summary+=("$name: skipped (budget spent: ${left} s left, a level needs its ${tail_s} s tail + 30; TAIL=N lowers it)")
    return
  fi
  start=$(date +%s)
  # TRACE=1: the trusted workers' trace (cudagym.judge.split.trace) beside the returned files, not in sweep.tgz
  ${TRACE:+env CUDAGYM_TRACE="$ret/$name.trace"} \
  timeout $(( left - 10 )) python3 -c "from cudagym.cli import main; raise SystemExit(main())" baselines check \
    --suite kernelbench --level "$level" --protocol "$p" --devices "${DEVICES:-auto}" \
    --journal "$journal" --table "$out/$name.md" --stop-after-s $(( left - tail_s )) --deadline-s $(( left - 45 )) \
    ${RETRY:+--retry-failed} "$@" \
    > "$out/$name.log" 2>&1 < /dev/null  # stdin: check_listed reads its task list from it
  rc=$?
  rm -rf "$out/baselines"; cp -r "$CUDAGYM_CACHE_DIR/baselines" "$out/baselines"  # *.lock files included: harmless
  summary+=("$name: rc=$rc $(( $(date +%s) - start ))s; $(sed -n 3p "$out/$name.md" 2>/dev/null)")
  printf '%s\n' "${summary[@]}" > "$out/summary.txt"
  cp "$out/summary.txt" "$ret/summary.txt"; tar czf "$ret/sweep.tgz" -C "$out" .
}
check_listed() {  # check_listed NAME PROTOCOL [LIST]: each level's tasks of LIST (default $out/NAME.txt: "LEVEL ID
  local journal="$out/$1-$(date +%s).jsonl" level ids  # ..."), one fresh journal
  while read -r level ids; do
    check "$1-L$level" "$2" "$level" "$journal" --tasks $ids
  done < "${3:-$out/$1.txt}"
}
for step in $steps; do
  if [ "$step" = largest ]; then
    python3 - "${LARGEST:-10}" benchmarks/results/kernelbench/kernelbench-v0.4-L*.csv > "$out/largest.txt" <<'PY'
import csv, sys
rows = [r for path in sys.argv[2:] for r in csv.DictReader(open(path))]
rows.sort(key=lambda r: -float(r["input_output_gib"] or 0))
by_level = {}
over = [r for r in rows[int(sys.argv[1]):] if float(r["over_bound_gib"] or 0) > 0.9]  # and those over the bound
for r in rows[: int(sys.argv[1])] + over:
    by_level.setdefault(r["level"], []).append(r["task_id"])
for level, ids in sorted(by_level.items()):
    print(level, *ids)
PY
    check_listed largest kernelbench
    continue
  fi
  if [ "$step" = recheck ]; then  # the tasks the committed cudagym-v4 tables flagged, again on this tree
    if [ -n "${RECHECK_TASKS:-}" ]; then  # "LEVEL ID ...;LEVEL ID ...": these tasks instead of the flagged ones
      printf '%s\n' "$RECHECK_TASKS" | tr ';' '\n' > "$out/recheck.txt"
    else
    python3 - "${OVER:-0.3}" benchmarks/results/kernelbench/kernelbench-cudagym-v4-L*.csv > "$out/recheck.txt" <<'PY'
import csv, sys
by_level = {}
for path in sys.argv[2:]:
    for r in csv.DictReader(open(path)):
        fit = float(r["profiled_over_timed"] or 0)
        if r["status"] == "ok" and (float(r["over_bound_gib"] or 0) > float(sys.argv[1]) or fit > 1.2 or 0 < fit < 0.8):
            by_level.setdefault(r["level"], []).append(r["task_id"])
for level, ids in sorted(by_level.items()):
    print(level, *ids)
PY
    fi
    for p in ${RECHECK_PROTOCOLS:-cudagym}; do  # e.g. "cudagym cudagym[arm_wait_ms=200]": one table set each
      tag=$(printf '%s' "$p" | tr -c 'A-Za-z0-9_.-' '_')
      if [ "$p" = cudagym ]; then check_listed recheck cudagym; else check_listed "recheck-$tag" "$p" "$out/recheck.txt"; fi
    done
    continue
  fi
  if [ "$step" = throughput ]; then
    check "throughput-warm-L1" cudagym 1 "$out/throughput-warm.jsonl" --first "${FIRST:-20}"
    check "throughput-cudagym-L1" cudagym 1 "$out/throughput-$(date +%s).jsonl" --first "${FIRST:-20}"
    continue
  fi
  for level in $levels; do check "kernelbench-$step-L$level" "$step" "$level" "$out/journal-$step.jsonl"; done
  [ -n "$l4_skip" ] && summary+=("kernelbench-$step-L4: skipped ($l4_skip)")
  python3 benchmarks/kernelbench_compare.py --kernelbench-dir "$CUDAGYM_KERNELBENCH_DIR" \
    --out "$out/compare-$step.md" "$out"/kernelbench-"$step"-L*.csv > "$out/compare-$step.log" 2>&1 || true
  tar czf "$ret/sweep.tgz" -C "$out" .  # the comparison too (packed otherwise only after a level's check)
done
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
