"""The package installs as one `cudagym` namespace, with its data, and imports cheaply."""

from __future__ import annotations

import configparser
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAPPED = {"cudagym": "cudagym", "cudagym.envs": "envs", "cudagym.baselines": "baselines"}


def _declared_packages() -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return {p.strip() for p in cfg["options"]["packages"].split() if p.strip()}


def _packages_on_disk() -> set[str]:
    found = set()
    for prefix, folder in MAPPED.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base).parts
            found.add(".".join((prefix, *rel)))
    return found


def test_every_package_on_disk_is_declared_in_setup_cfg():
    missing = _packages_on_disk() - _declared_packages()
    assert not missing, f"add to setup.cfg [options] packages: {sorted(missing)}"
    stale = _declared_packages() - _packages_on_disk()
    assert not stale, f"setup.cfg lists packages with no __init__.py: {sorted(stale)}"


def test_import_is_cheap_and_registers_nothing_heavy():
    code = (
        "import sys, cudagym, cudagym.judge, cudagym.solution;"
        "heavy = [m for m in ('torch', 'cupy', 'pyarrow', 'huggingface_hub', 'datasets', 'ray') if m in sys.modules];"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    return next(out.glob("cudagym-*.whl"))


def test_wheel_has_one_namespace_and_its_data(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"cudagym"}, f"only `cudagym` may land in site-packages, got {sorted(top)}"
    assert "cudagym/envs/__init__.py" in names and "cudagym/baselines/__init__.py" in names
    assert "cudagym/templates/extension/binding_registry.h" in names
    assert "cudagym/py.typed" in names
    bundled_tasks = [n for n in names if n.startswith("cudagym/envs/bundled/tasks/") and n.endswith(".py")]
    bundled_on_disk = list((ROOT / "envs" / "bundled" / "tasks").rglob("*.py"))
    assert len(bundled_tasks) == len(bundled_on_disk)


def test_wheel_installs_and_imports_outside_the_checkout(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    code = "import cudagym, cudagym.envs, cudagym.baselines; print(cudagym.envs.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
    ).stdout
    assert out.strip().startswith(str(target))
