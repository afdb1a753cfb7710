#!/usr/bin/env bash
# GPU evidence in device calls: every GPU test file, then the GPU benchmarks, each under its own time limit so one
# slow file cannot starve the rest, and all of them under a total budget; logs under $OUT (or ./gpu-logs), a
# summary table last (also written to $OUT/summary.txt after every step, so a call cut short keeps its rows; the
# logs themselves in $GPU_LOGS, packed into $OUT/logs.tgz after every step).
#   bash benchmarks/gpu_session.sh [SECONDS_PER_STEP [TOTAL_SECONDS [STEP ...]]]    (repository root, GPU host)
# Steps: prebuild (prebuild1: bundled only) build formats local sandbox split split_gpu heap (the shared heap in one
# process; wb_36 is its attack through the worker) heapcmp (benchmarks/heap_probe.py: the bundled solutions' medians
# with the heap and with the copy delivery; $HEAP_TASKS: some bundled ids, $HEAP_ROUNDS) whitebox templates env hacks gate (the audited forward's gate: the covers, the forwards' own side-stream
# check, the bundled Swish's gates on time, the side-stream hacks through the worker) own_gate (the judge's own process's gate: the
# planted hacks there, the own checks, then the bundled suite under SUBMIT) judge
# bundled bundled_split (the bundled suite through LocalJudge and its runners; bundled_copy: under the copy delivery; bundled_attrib: under the attribution gate) bench_bld bench_eval bench_cmp (bench_eval on the split and on the judge before it, the candidate in the worker, side by side: issue 13's before and after; $BENCH_COMPARE: another protocol instead, e.g. 'cudagym[yardstick_beside_eager=true]'; each split job's claims in $OUT/bench_cmp.claims, benchmarks/trace_summary.py --claims) soak, and the later issues' runs: cupy sb3 ppo ray bench_gpu chat tuning bench
# bench_rs (the bench resumed from $BENCH_DIR, carried) yardstick (the runner's reference time) spares (bench_vec's
# LocalJudge rate by spare runners, $SPARES, default 8,12) memprobe (memory_probe.py on $PROBE_TASK, default L1/87,
# under $PROBE_PROTOCOL, default cudagym, in the split) sync (benchmarks/sync_probe.py on $SYNC_TASK, default L1/71,
# and its GPU test: does the forward wait for the GPU inside, how many launches, how its time moves) watched
# (benchmarks/watched_timing_probe.py on two bundled tasks and $WATCH_TASKS, default L1/57 and L3/10: what profiling every timed call costs) placement (benchmarks/placement_probe.py on $REPEAT_TASK,
# default allocator and expandable segments, each with inputs from the allocator, from an arena, and beside 8 idle contexts) retake (the baselines' retaken rounds) batch (bench_vec's LocalJudge rate under each of $PROTOCOLS, ';'-separated,
# default the yardstick timed in every job against taken from the baseline cache: issue 15) spy_batch (that rate under py-spy,
# --nonblocking: each process kind's inclusive and self time, benchmarks/spy_summary.py, in spy_batch.summary) attrib (benchmarks/attribution_probe.py: does
# ncu name a forward's kernels from outside its Python, plain and sandboxed, and at what cost: issue 13; $ATTRIB_ARGS: its options) staging
# (benchmarks/staging_probe.py: which op or size of L2/19's forward slows the judge's staging; $STAGING_VARIANTS: some of them) launch (benchmarks/launch_probe.py: the same question with the forward in a second process, then in one process with the profiler; both under the default protocol's precision, $LAUNCH_PROTOCOL for another) launch_order (launch_probe.py in two processes, the usual order, then --stage-first: the staging done before the other process queues) launch_conn (the usual order with the second process's streams on 8 hardware queues, CUDA's default, then on 1) raw_rt raw_full (its full evaluation alone) vec (LocalJudge then RayJudge, $VEC_SECONDS each, default 60: give it vec:300) scaling (two GPUs) memory repeat (benchmarks/repeat_probe.py on
# $REPEAT_TASK, a KernelBench task: carry .data/kb) sanit (default: the first list but soak; sanit_gpu: tests/test_sanitizer_gpu.py alone) hostbound (a host-bound forward under the default
# arm wait and a long one). A step may carry its own limit: NAME:SECONDS. A step that runs out its limit leaves
# NAME.stacks beside NAME.log: py-spy's dump of every Python process then (stage py-spy into .whl to get it).
# Wheels the host lacks (gymnasium) are installed from .whl/ when it exists (../shared/tools/stage-wheels.sh);
# bubblewrap from .debs/ (carry both).
# The caches live in /tmp/cudagym-cache (outside the synced tree), so a later call on a still-warm host reuses them.
set -u
default_limit=${1:-150}; total=${2:-570}; shift 2 2>/dev/null || shift $#
steps=${*:-prebuild build formats local env hacks judge bundled bench_bld bench_eval}
deadline=$(( $(date +%s) + total ))
ret=${OUT:-gpu-logs}; mkdir -p "$ret"; ret=$(cd "$ret" && pwd)
# the steps' logs, traces and stacks lie outside $OUT (a device call brings back at most 8 files: session 34 lost its
# summary that way) and are packed into $OUT/logs.tgz after every step; $GPU_LOGS names the folder (absolute: the
# trace is written from a worker's folder), emptied first (a warm host keeps an earlier call's)
out=${GPU_LOGS:-/tmp/cudagym-gpu-logs/$(basename "$ret")}; rm -rf "$out"; mkdir -p "$out"; out=$(cd "$out" && pwd)
source benchmarks/gpu_setup.sh
summary=()
dump_stacks() {  # every Python process's stack, by py-spy where staged (stage-wheels.sh .whl py-spy), else a note
  local spy; spy=$(command -v py-spy || echo /tmp/site/bin/py-spy)
  if [ ! -x "$spy" ]; then echo "no py-spy: stage it (../shared/tools/stage-wheels.sh .whl filelock py-spy)"; return; fi
  local p
  for p in $(pgrep -f 'python|cudagym'); do
    [[ $(readlink "/proc/$p/exe" 2>/dev/null) == *python* ]] || continue  # not timeout, bash or bwrap
    echo "=== $p: $(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-200)"
    # native frames too: a hang inside the CUDA driver or the heap's allocator shows below the Python ones
    { timeout 20 "$spy" dump --native --pid "$p" 2>&1 || timeout 15 "$spy" dump --pid "$p" 2>&1; } | head -150
  done
}
run_step() {  # run_step NAME COMMAND...: one command under min(limit, time left), its log, one summary row
  local name=$1; shift
  local start rc passed failed left budget
  start=$(date +%s); left=$(( deadline - start ))
  if (( left < 20 )); then summary+=("$(printf '%-11s skipped: total budget spent' "$name")"); return; fi
  budget=$(( left < limit ? left : limit ))
  # a step about to run out its limit leaves its processes' stacks (worker, runners, sandboxed ones included):
  # slow and hung read alike in a log that just stops
  # (before pytest-timeout's own cut of a test, which ends the judge and its workers before a later dump)
  local at=$(( budget > 36 ? budget - 12 : budget * 2 / 3 ))
  (( test_limit - 10 < at )) && at=$(( test_limit - 10 ))
  ( sleep "$at"; dump_stacks > "$out/$name.stacks" 2>&1 ) &
  local watcher=$!
  # CUDAGYM_TRACE: the trusted workers' line per phase and runner request (cudagym.judge.split.trace), kept
  # as they go: a step cut short shows how far each job got and whether its calls were late
  CUDAGYM_TRACE="$out/$name.trace" timeout "$budget" "$@" > "$out/$name.log" 2>&1
  rc=$?
  kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null
  # from pytest's closing line when it finished; else the per-test words so far (-s output can split them off)
  local last; last=$(grep -E "^=+ .*(passed|failed|error|skipped|deselected).* in [0-9.]+s" "$out/$name.log" | tail -1)
  if [ -n "$last" ]; then
    passed=$(echo "$last" | grep -oE "[0-9]+ passed" | awk '{s+=$1} END {print s+0}')
    failed=$(echo "$last" | grep -oE "[0-9]+ (failed|errors?)" | awk '{s+=$1} END {print s+0}')
  else
    passed=$(grep -cE "PASSED" "$out/$name.log"); failed=$(grep -cE "(^| )(FAILED|ERROR)( |$)" "$out/$name.log")
  fi
  summary+=("$(printf '%-11s rc=%-4s passed=%-4s failed=%-4s %4ss (limit %ss)' "$name" "$rc" "$passed" "$failed" \
    "$(( $(date +%s) - start ))" "$budget")")
  printf '%s\n' "${summary[@]}" > "$ret/summary.txt"
  tar czf "$ret/logs.tgz.part" -C "$out" . 2>/dev/null && mv "$ret/logs.tgz.part" "$ret/logs.tgz"
}
base="python3 -m pytest -p no:cacheprovider -v -s --tb=short --durations=15"
pyt=$base
# one hung test fails, not the step (benchmarks run long on purpose: only the step's limit applies to them): 200 s
# a test, or, in a step given a longer limit, that limit less 20 s (a test of several judgements may need it all)
has_timeout=0; python3 -c "import pytest_timeout" 2>/dev/null && has_timeout=1
noproxy="env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u ALL_PROXY"  # the stand-in is on loopback
for s in $steps; do
  if [[ $s == *:* ]]; then limit=${s#*:}; s=${s%%:*}; else limit=$default_limit; fi
  test_limit=$(( limit > 220 ? limit - 20 : 200 ))  # one test's limit (pytest-timeout, where installed)
  (( has_timeout )) && pyt="$base --timeout=$test_limit"
  case $s in
    prebuild)   run_step prebuild   python3 benchmarks/prebuild.py ;;
    prebuild1)  run_step prebuild1  python3 benchmarks/prebuild.py --no-hacks ;;
    env)        run_step env        $pyt tests/test_env_gpu.py -m "gpu and not slow" ;;
    hacks)      run_step hacks      $pyt tests/test_guards_gpu.py -m gpu -k 'planted or degenerate_hack or still_written' ;;
    gate)       run_step gate       $pyt tests/test_harness_timing.py tests/test_guards_gpu.py -m gpu \
                                      -k 'cover or still_written or audited_forwards' ;;  # the audited forward's gate
    own_gate)   run_step own_gate   $pyt tests/test_guards_gpu.py -m gpu \
                                      -k 'with_its_guard_named or still_written or passes_every_guard' ;;  # the judge's own process's gate: the planted hacks there, the own checks, then the bundled suite under SUBMIT
    judge)      run_step judge      $pyt tests/test_guards_gpu.py tests/test_harness_timing.py tests/test_baseline_retake_gpu.py \
                                      tests/test_runner_reference_gpu.py -m gpu -k "not planted and not bundled" ;;
    yardstick)  run_step yardstick  $pyt tests/test_runner_reference_gpu.py -m gpu ;;  # the runner's own reference time
    bundled)    run_step bundled    $pyt tests/test_guards_gpu.py tests/test_bundled_suite.py -m gpu -k bundled ;;
    bundled_split) run_step bundled_split $pyt tests/test_bundled_split_gpu.py ;;  # through LocalJudge and the split: series
    bundled_copy) CUDAGYM_BUNDLED_PROTOCOL='cudagym[delivery=copy]' run_step bundled_copy $pyt tests/test_bundled_split_gpu.py ;;  # the same under the copy delivery
    bundled_attrib) CUDAGYM_BUNDLED_PROTOCOL='cudagym[attribution=ncu]' run_step bundled_attrib $pyt tests/test_bundled_split_gpu.py ;;  # under the attribution gate (issue 13)
    formats)    run_step formats    $pyt tests/test_formats_gpu.py -m gpu ;;
    build)      run_step build      $pyt tests/test_build_extension.py tests/test_build_inline.py tests/test_runtime.py -m gpu ;;
    local)      run_step local      $pyt tests/test_local_judge.py tests/test_worker_faults_gpu.py -m gpu ;;
    split)      run_step split      $pyt tests/test_split_gpu.py tests/test_split.py ;;
    split_gpu)  run_step split_gpu  $pyt tests/test_split_gpu.py ;;  # the split's GPU tests alone (test_split.py is CPU)
    heap)       run_step heap       $pyt -m gpu tests/test_heap_gpu.py ;;  # the shared heap in one process (wb_36: through the worker)
    heapcmp)    run_step heapcmp    python3 benchmarks/heap_probe.py --out "$out/heap" --rounds "${HEAP_ROUNDS:-2}" \
                                      ${HEAP_TASKS:+--tasks $HEAP_TASKS} ;;  # heap vs copy; HEAP_TASKS: some bundled ids
    templates)  run_step templates  $pyt tests/test_templates.py -m gpu ;;
    tmpl_*)     run_step "$s"       $pyt tests/test_templates.py -m gpu -k "${s#tmpl_}" ;;  # one format: tmpl_raw
    whitebox)   run_step whitebox   $pyt tests/test_whitebox_gpu.py ;;
    wb_*)       run_step "$s"       $pyt tests/test_whitebox_gpu.py -k "${s#wb_}" ;;  # one white-box test: wb_20b
    hostbound)  run_step hostbound  $pyt tests/test_host_bound_gpu.py -m gpu ;;  # the split's wait for a queued call
    cupy)       run_step cupy       $pyt -m gpu tests/test_runtime.py tests/test_runtime_cupy.py tests/test_cuda_driver.py ;;
    sb3)        run_step sb3        $pyt -m gpu tests/test_sb3_gpu.py ;;
    memory)     run_step memory     $pyt -m gpu tests/test_harness_memory_gpu.py ;;
    repeat)     run_step repeat     env CUDAGYM_KERNELBENCH_DIR="${CUDAGYM_KERNELBENCH_DIR:-.data/kb}" python3 \
                                      benchmarks/repeat_probe.py --task "${REPEAT_TASK:-L2/77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool}" \
                                      --protocol "${REPEAT_PROTOCOL:-kernelbench}" --rounds "${REPEAT_ROUNDS:-4}" --out "$out/repeat" ${REPEAT_ARGS:-} ;;  # e.g. REPEAT_ARGS="--env CUDNN_LOGLEVEL_DBG=2"
    placement)  run_step placement  bash -c "for conf in '' expandable_segments:True; do for how in '--inputs allocator' '--inputs arena' \
                                      '--inputs allocator --idle-contexts 8'; do env PYTORCH_CUDA_ALLOC_CONF=\$conf \
                                      CUDAGYM_KERNELBENCH_DIR=\${CUDAGYM_KERNELBENCH_DIR:-.data/kb} python3 benchmarks/placement_probe.py \
                                      --task '${REPEAT_TASK:-L2/77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool}' \
                                      --protocol '${REPEAT_PROTOCOL:-kernelbench}' --trials 8 \$how --out '$out/placement' || exit 1; done; done" ;;
    sync)       run_step sync       bash -c "env CUDAGYM_KERNELBENCH_DIR=\${CUDAGYM_KERNELBENCH_DIR:-.data/kb} python3 \
                                      benchmarks/sync_probe.py --task '${SYNC_TASK:-L1/71_conv_transposed_2D__asymmetric_input__square_kernel}' \
                                      --protocol '${PROBE_PROTOCOL:-cudagym}' --out '$out/sync' && $pyt -m gpu tests/test_sync_probe.py" ;;
    watched)    rm -rf /tmp/watched-out
                run_step watched    bash -c "for t in bundled/L1/01_Swish bundled/L3/02_CausalAttentionHead ${WATCH_TASKS:-L1/57_conv_transposed_2D__square_input__square_kernel L3/10_ResNet101}; do \
                                      env CUDAGYM_KERNELBENCH_DIR=\${CUDAGYM_KERNELBENCH_DIR:-.data/kb} python3 benchmarks/watched_timing_probe.py \
                                      --task \$t --protocol '${PROBE_PROTOCOL:-cudagym}' --out /tmp/watched-out || exit 1; done; \
                                      $pyt -m gpu tests/test_watched_timing_probe.py"  # the cost of profiling every timed call
                tar czf "$out/watched.tgz" -C /tmp watched-out 2>/dev/null ;;  # a device call brings back at most 8 files
    memprobe)   rm -rf /tmp/memprobe-out; mkdir -p /tmp/memprobe-out  # packed into one file: a device call brings back at most 8
                run_step memprobe   env CUDAGYM_KERNELBENCH_DIR="${CUDAGYM_KERNELBENCH_DIR:-.data/kb}" \
                                      bash -c 'python3 benchmarks/memory_probe.py --task "$1" --protocol "$2" --mode split \
                                      --out /tmp/memprobe-out; rc=$?; tar czf "$3/memprobe.tgz" -C /tmp/memprobe-out .; \
                                      exit $rc' _ "${PROBE_TASK:-L1/87_conv_pointwise_2D}" "${PROBE_PROTOCOL:-cudagym}" \
                                      "$out" ;;  # what the interleaved timing phase holds beyond the bound
    retake)     run_step retake     $pyt tests/test_baseline_retake_gpu.py -m gpu ;;
    sanit_gpu)  run_step sanit_gpu  $pyt tests/test_sanitizer_gpu.py ;;  # the sanitizer gates' GPU tests alone (no benchmark)
    sanit)      run_step sanit      $base tests/test_sanitizer_gpu.py benchmarks/bench_sanitizer.py \
                                      --benchmark-json "$out/bench_sanitizer.json" ;;
    ppo)        run_step ppo        $pyt -m gpu tests/test_ppo_gpu.py ;;
    ray)        run_step ray        $pyt -m gpu tests/test_ray_judge.py ;;
    bench_gpu)  run_step bench_gpu  $pyt -m gpu tests/test_bench_gpu.py ;;
    chat)       run_step chat       $noproxy python3 examples/chat_episode.py --task bundled/L1/01_Swish \
                                      --tokenizer cudagym:code-bpe-16k --out "$out/chat" ;;
    tuning)     run_step tuning     python3 examples/sb3_launch_tuning.py --task bundled/L1/05_Softmax --budget 24 \
                                      --seeds 3 --time-budget-s 100 --confirm 3 --out "$out/tuning" ;;
    bench)      run_step bench      python3 -m cudagym.cli bench --agent scripted --env CudaKernel-Bundled-v0 \
                                      --parallel 4 --no-progress --out "$out/bench-scripted" ;;
    bench_rs)   bdir=${BENCH_DIR:-.runs/bench-scripted}; flag=; [ -f "$bdir/manifest.json" ] && flag=--resume
                run_step bench_rs   python3 -m cudagym.cli bench --agent scripted --env CudaKernel-Bundled-v0 \
                                      --parallel 4 --no-progress --out "$bdir" $flag
                mkdir -p "$out/bench-scripted" && cp -r "$bdir/." "$out/bench-scripted/" ;;  # resumable across calls
    raw_rt)     run_step raw_rt     $base benchmarks/bench_raw_runtime.py --benchmark-only \
                                      --benchmark-json "$out/bench_raw_runtime.json" ;;
    scaling)    run_step scaling    env CUDAGYM_BENCH_GPU=1 $base benchmarks/bench_scaling.py \
                                      --benchmark-json "$out/bench_scaling.json" ;;  # issue 16: two GPUs
    raw_full)   run_step raw_full   $base benchmarks/bench_raw_runtime.py --benchmark-only -k full_evaluation \
                                      --benchmark-json "$out/bench_raw_full.json" ;;  # 8 rounds, 6 s apart
    vec)        run_step vec        env CUDAGYM_BENCH_GPU=1 CUDAGYM_BENCH_SECONDS=${VEC_SECONDS:-60} $base benchmarks/bench_vec.py \
                                      -k local_vs_ray --benchmark-json "$out/bench_vec.json" ;;
    staging)    run_step staging    python3 benchmarks/staging_probe.py --out "$out/staging" ${STAGING_VARIANTS:+--variants $STAGING_VARIANTS} ;;  # L2/19's staging excess, by variant (issue 13)
    launch)     run_step launch     bash -c 'python3 benchmarks/launch_probe.py --split --protocol "$2" --json "$1/launch_split.json"
                                      python3 benchmarks/launch_probe.py --protocol "$2" --json "$1/launch.json"' \
                                      _ "$out" "${LAUNCH_PROTOCOL:-cudagym}" ;;  # GPU work beside a queued forward? two processes (its late path first: a forward that blocks its host cannot stall it), then one (issue 13, L2/19)
    launch_order) run_step launch_order bash -c 'python3 benchmarks/launch_probe.py --split --protocol "$2" --json "$1/launch_split.json"
                                      python3 benchmarks/launch_probe.py --split --stage-first --protocol "$2" --json "$1/launch_first.json"' \
                                      _ "$out" "${LAUNCH_PROTOCOL:-cudagym}" ;;  # L2/19's excess: the usual order (the other process queued, then the staging), then the staging first (issue 13)
    launch_conn) run_step launch_conn bash -c 'for c in 8 1; do python3 benchmarks/launch_probe.py --split --protocol "$2" --rounds 6 \
                                      --variants none gelu_b128 gelu_b128_side_stream conv_transpose_b128 --child-env CUDA_DEVICE_MAX_CONNECTIONS=$c \
                                      --json "$1/launch_conn$c.json" || exit 1; done' _ "$out" "${LAUNCH_PROTOCOL:-cudagym}" ;;  # L2/19: does one hardware queue for the runner's streams remove the excess? (8: CUDA's default)
    attrib)     run_step attrib     python3 benchmarks/attribution_probe.py --out "$out/attrib" ${ATTRIB_ARGS:-} ;;  # issue 13: ncu's kernel list
    batch)      run_step batch      env CUDAGYM_BENCH_GPU=1 CUDAGYM_BENCH_SECONDS=${VEC_SECONDS:-60} \
                                      CUDAGYM_BENCH_PROTOCOLS="${PROTOCOLS:-cudagym[yardstick=retimed];cudagym}" \
                                      $base benchmarks/bench_vec.py -k by_protocol --benchmark-json "$out/bench_batch.json" ;;
    spy_batch)  # the batch's rate under py-spy (not pausing them): where each process kind's wall goes; read in one go
                # py-spy writes its file when interrupted (SIGINT), not when killed: its own limit comes first
                export SPY_BIN=$(command -v py-spy || echo /tmp/site/bin/py-spy) SPY_OUT=$out SPY_BASE=$base \
                       SPY_SECONDS=${VEC_SECONDS:-60} SPY_LIMIT=$(( limit > 60 ? limit - 30 : limit / 2 ))
                run_step spy_batch bash -c 'env CUDAGYM_BENCH_GPU=1 CUDAGYM_BENCH_SECONDS=$SPY_SECONDS \
                  CUDAGYM_BENCH_PROTOCOLS=cudagym timeout -s INT $SPY_LIMIT "$SPY_BIN" record --subprocesses --idle --nonblocking --threads \
                  --format raw --rate 250 -o "$SPY_OUT/spy_batch.txt" -- $SPY_BASE benchmarks/bench_vec.py -k by_protocol
                  rc=$?; python3 benchmarks/spy_summary.py "$SPY_OUT/spy_batch.txt" --top 30 > "$SPY_OUT/spy_batch.summary" 2>&1
                  exit $rc' ;;
    spares)     run_step spares     env CUDAGYM_BENCH_GPU=1 CUDAGYM_BENCH_SECONDS=60 CUDAGYM_BENCH_SPARES=${SPARES:-8,12} \
                                      $base benchmarks/bench_vec.py -k spare_runners --benchmark-json "$out/bench_spares.json" ;;
    sandbox)    run_step sandbox    $pyt tests/test_sandbox_gpu.py tests/test_sandbox_escapes.py ;;
    bench_bld)  run_step bench_bld  $base benchmarks/bench_build.py --benchmark-only --benchmark-json "$out/bench_bld.json" ;;  # one load_inline: 25-60 s
    bench_eval) run_step bench_eval $base benchmarks/bench_eval.py --benchmark-only --benchmark-json "$out/bench_eval.json" ;;  # 10 SUBMITs per test
    bench_cmp)  run_step bench_cmp  env CUDAGYM_BENCH_COMPARE="${BENCH_COMPARE:-in-process}" $base benchmarks/bench_eval.py --benchmark-only \
                                      --benchmark-json "$out/bench_cmp.json" ${BENCH_K:+-k "$BENCH_K"}  # the split and the judge before it: 20 SUBMITs per test ($BENCH_K: pytest -k, e.g. repeatability)
                # each split job's reference and candidate claims, and how far they moved (beside summary.txt in $OUT)
                python3 benchmarks/trace_summary.py --claims "$out/bench_cmp.trace" > "$ret/bench_cmp.claims" 2>&1 ;;
    soak)       run_step soak       $base -m slow benchmarks/soak_judge.py ;;  # one long test: no per-test limit
    *)          summary+=("$s: unknown step") ;;
  esac
done
printf '%s\n' "${summary[@]}"
