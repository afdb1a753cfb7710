#!/usr/bin/env bash
# One device call's worth of GPU evidence: every GPU test file, then the GPU benchmarks, each under its own time
# limit so one slow file cannot starve the rest; logs under $OUT (or ./gpu-logs), a summary table last.
#   bash benchmarks/gpu_session.sh [SECONDS_PER_STEP]     (run from the repository root on the GPU host)
# Wheels the host lacks (gymnasium) are installed from .whl/ when it exists (../shared/tools/stage-wheels.sh).
set -u
limit=${1:-150}
out=${OUT:-gpu-logs}; mkdir -p "$out"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || echo "editable install failed"
export PYTHONUNBUFFERED=1 CUDAGYM_OFFLINE=1 CUDAGYM_CACHE_DIR=${CUDAGYM_CACHE_DIR:-/tmp/cudagym-cache}
summary=()
step() {  # step NAME PYTEST-ARGS...: one pytest run under the time limit, its log, one summary row
  local name=$1; shift
  local start rc passed failed
  start=$(date +%s)
  timeout "$limit" python3 -m pytest -p no:cacheprovider -v -s --tb=short "$@" > "$out/$name.log" 2>&1
  rc=$?
  passed=$(grep -c " PASSED" "$out/$name.log"); failed=$(grep -cE " FAILED| ERROR" "$out/$name.log")
  summary+=("$(printf '%-11s rc=%-4s passed=%-4s failed=%-4s %4ss' "$name" "$rc" "$passed" "$failed" \
    "$(( $(date +%s) - start ))")")
}
step env        tests/test_env_gpu.py -m "gpu and not slow"
step hacks      tests/test_guards_gpu.py -m gpu -k planted
step judge      tests/test_guards_gpu.py -m gpu -k "not planted"
step build      tests/test_build_extension.py tests/test_build_inline.py tests/test_runtime.py -m gpu
step local      tests/test_local_judge.py tests/test_worker_faults_gpu.py -m gpu
step bundled    tests/test_bundled_suite.py -m gpu
step bench_bld  benchmarks/bench_build.py --benchmark-only
step bench_eval benchmarks/bench_eval.py --benchmark-only
printf '%s\n' "${summary[@]}"
