"""Copying a built artifact out of the build cache into one job's folder, for a confined GPU worker.

The worker's sandbox sees no cache (other solutions' objects and logs live there), so before each job the
judge copies just that job's artifact (the extension's ``.so`` and manifest, the raw format's cubins and
manifest, the inline format's modules and a manifest pointing at the copies) into the job's folder, and the
job names the copy. The copy is checked against the cache entry's listing (sizes and sha256) first, so a
cache file changed on disk is never loaded.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from cudagym.judge.build.cache import verify_entry
from cudagym.judge.records import BuildResult

MANIFEST = "manifest.json"


def export_artifact(build: BuildResult, dest: Path) -> BuildResult:
    """``build`` with its artifact copied under ``dest`` (created; replaced if present).

    Returns:
        ``build`` unchanged when it has no artifact, else a copy whose ``artifact_path`` is under ``dest``.

    Raises:
        OSError: The artifact is missing or differs from its cache listing (the message says which).
    """
    if not build.ok or not build.artifact_path:
        return build
    source = Path(build.artifact_path)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    if build.format == "inline":
        copied = _export_inline(source, dest)
    else:
        copied = _copy_entry(source.parent, dest / "artifact") / source.name
    return dataclasses.replace(build, artifact_path=str(copied))


def _copy_entry(entry: Path, dest: Path) -> Path:
    problem = verify_entry(entry)
    if problem:
        raise OSError(f"the build cache entry {entry.name} failed its check ({problem})")
    shutil.copytree(entry, dest)
    return dest


def _export_inline(manifest_path: Path, dest: Path) -> Path:
    manifest = json.loads(manifest_path.read_text())
    calls = []
    for i, call in enumerate(manifest["calls"]):
        so = (manifest_path.parent / call["so"]).resolve()
        copy = _copy_entry(so.parent, dest / f"call{i}")
        calls.append({**call, "so": str((copy / so.name).relative_to(dest))})
    out = dest / MANIFEST
    out.write_text(json.dumps({**manifest, "calls": calls}, indent=1))
    return out
