# Sourced by the GPU session scripts (repository root, GPU host): the installs an offline GPU host needs, once per
# host at a time (two lanes side by side share them). Wheels the host lacks (gymnasium) come from .whl/
# (../shared/tools/stage-wheels.sh); bubblewrap from .debs/ (apt-get download bubblewrap). Carry both.
{
  flock 9
  if [ -d .whl ] && [ ! -e /tmp/site/.cudagym-staged ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      && touch /tmp/site/.cudagym-staged
  fi
  python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || echo "editable install failed"
  if ! command -v bwrap >/dev/null 2>&1 && [ ! -x /tmp/bwrap-pkg/usr/bin/bwrap ] && ls .debs/bubblewrap_*.deb >/dev/null 2>&1; then
    mkdir -p /tmp/bwrap-pkg && dpkg -x .debs/bubblewrap_*.deb /tmp/bwrap-pkg
  fi
} 9>/tmp/cudagym-setup.lock
[ -d .whl ] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
if ! command -v bwrap >/dev/null 2>&1 && [ -z "${CUDAGYM_BWRAP:-}" ] && [ -x /tmp/bwrap-pkg/usr/bin/bwrap ]; then
  export CUDAGYM_BWRAP=/tmp/bwrap-pkg/usr/bin/bwrap
fi
# the commit the tree was copied from, written beside it before the call (the host's .git may be stale)
[ -s .commit ] && [ -z "${CUDAGYM_COMMIT:-}" ] && export CUDAGYM_COMMIT=$(head -c 80 .commit)
export PYTHONUNBUFFERED=1 CUDAGYM_OFFLINE=1 HF_HUB_OFFLINE=1 CUDAGYM_CACHE_DIR=${CUDAGYM_CACHE_DIR:-/tmp/cudagym-cache}
