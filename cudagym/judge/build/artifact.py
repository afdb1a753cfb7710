"""Copying a built artifact out of the build cache into one job's folder, for a confined GPU worker.

The worker's sandbox sees no cache (other solutions' objects and logs live there), so before each job the
judge copies just that job's artifact (the extension's ``.so`` and manifest, the raw format's cubins and
manifest, the inline format's modules and a manifest pointing at the copies) into the job's folder, and the
job names the copy. Only the files the cache entry's listing names are copied, links not followed, and each
copy is checked against the listing (size and sha256) as it is made, so a cache file changed on disk, or
anything added to an entry, is never loaded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

from cudagym.judge.build.cache import CONTENTS, verify_entry
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
    """Copy the files ``entry``'s listing names, and nothing else, to ``dest``; each copy checked as it is made."""
    problem = verify_entry(entry, hash_limit=-1)  # what it holds and their sizes; the bytes are checked as copied
    if problem:
        raise OSError(f"the build cache entry {entry.name} failed its check ({problem})")
    listing = json.loads((entry / CONTENTS).read_text())
    dest.mkdir(parents=True)
    for rel, (size, digest) in sorted(listing.items()):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        problem = _copy_checked(entry / rel, target, size, digest)
        if problem:
            raise OSError(f"the build cache entry {entry.name} failed its check ({rel} {problem})")
    (dest / CONTENTS).write_text(json.dumps(listing, sort_keys=True))
    return dest


def _copy_checked(source: Path, target: Path, size: int, digest: str) -> str:
    """Copy one regular file without following a link; what differs from the listing, or ``""``."""
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "is not a regular file"
        mode = 0o755 if info.st_mode & 0o111 else 0o644
        hasher = hashlib.sha256()
        copied = 0
        with os.fdopen(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as out:
            while chunk := os.read(fd, 1 << 20):
                copied += len(chunk)
                if copied > size:
                    return "grew"
                hasher.update(chunk)
                out.write(chunk)
    finally:
        os.close(fd)
    if copied != size or hasher.hexdigest() != digest:
        return "changed content"
    return ""


def _export_inline(manifest_path: Path, dest: Path) -> Path:
    problem = verify_entry(manifest_path.parent)  # the manifest names the entries copied below
    if problem:
        raise OSError(f"the build cache entry {manifest_path.parent.name} failed its check ({problem})")
    manifest = json.loads(manifest_path.read_text())
    calls = []
    for i, call in enumerate(manifest["calls"]):
        so = (manifest_path.parent / call["so"]).resolve()
        copy = _copy_entry(so.parent, dest / f"call{i}")
        calls.append({**call, "so": str((copy / so.name).relative_to(dest))})
    out = dest / MANIFEST
    out.write_text(json.dumps({**manifest, "calls": calls}, indent=1))
    return out
