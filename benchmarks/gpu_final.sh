#!/usr/bin/env bash
# One device call: the trust split's GPU tests, the bundled suite under it, the white-box corpus, the templates.
# Each step under its own limit; a summary line per step at the end (and in $OUT/summary.txt as it goes).
source benchmarks/gpu_setup.sh
out=${OUT:-gpu-logs}; mkdir -p "$out"
pyt="python3 -m pytest -p no:cacheprovider -v -s --tb=short -rxX"
python3 -c "import pytest_timeout" 2>/dev/null && pyt="$pyt --timeout=150"
step() {  # step NAME LIMIT ARGS...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout "$limit" $pyt "$@" > "$out/$name.log" 2>&1; local rc=$?
  local last; last=$(grep -E "^=+ .* in [0-9.]+s" "$out/$name.log" | tail -1)
  echo "$name rc=$rc $(( $(date +%s) - t0 ))s ${last:-$(grep -c PASSED "$out/$name.log") passed so far}" | tee -a "$out/summary.txt"
}
step split 100 tests/test_split_gpu.py
step bundled 190 tests/test_guards_gpu.py -m gpu -k bundled
step whitebox 110 tests/test_whitebox_gpu.py
step templates 90 -m gpu tests/test_templates.py
grep -hE "^tests.*bundled.*: [0-9.]+ us|timing claims" "$out/bundled.log" | head -60 > "$out/bundled_rows.txt"
cat "$out/summary.txt"
