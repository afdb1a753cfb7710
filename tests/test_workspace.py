"""The workspace: layout, read-only files, path safety, caps, text-only writes, edits, snapshot, cleanup."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from cudagym.solution import get_format
from cudagym.workspace import INSTRUCTIONS, REFERENCE, FileRefused, Workspace, WorkspaceLimits

REFERENCE_SRC = "import torch\n\nclass Model: ...\n"


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    space = Workspace.create(instructions="# do it\n", reference=REFERENCE_SRC, parent=tmp_path)
    yield space
    space.close()


def test_layout_of_the_extension_format(ws: Workspace) -> None:
    names = {e.path: e for e in ws.listing()}
    assert set(names) == {INSTRUCTIONS, REFERENCE, "binding.cpp", "binding_registry.h", "kernels"}
    assert names["kernels"].is_dir
    assert not any(e.writable for e in names.values())
    assert ws.read_text(REFERENCE) == REFERENCE_SRC
    assert ws.read_text("binding.cpp") == get_format("extension").template_files()["binding.cpp"]
    assert not os.access(ws.root / REFERENCE, os.W_OK) or os.geteuid() == 0  # chmod 444 (root ignores it)
    assert (ws.root / REFERENCE).stat().st_mode & 0o222 == 0


def test_inline_format_has_no_kernels_folder(tmp_path: Path) -> None:
    space = Workspace.create(instructions="i", reference="r", fmt="inline", parent=tmp_path)
    try:
        assert {e.path for e in space.listing()} == {INSTRUCTIONS, REFERENCE}
        with pytest.raises(FileRefused, match="not writable in the inline format"):
            space.write_text("kernels/a.cu", "x")
    finally:
        space.close()


def test_write_read_and_normalised_paths(ws: Workspace) -> None:
    size, created = ws.write_text("model_new.py", "print('é')\n")
    assert (size, created) == (len("print('é')\n".encode()), True)
    assert ws.write_text("./kernels//relu.cu", "__global__ void k() {}\n")[1] is True
    assert ws.write_text("kernels/relu.cu", "// v2\n") == (6, False)
    assert ws.read_text("kernels/./relu.cu") == "// v2\n"
    assert ws.normalize(" ./kernels/relu.cu ") == "kernels/relu.cu"


@pytest.mark.parametrize("path", [INSTRUCTIONS, REFERENCE, "binding.cpp", "binding_registry.h"])
def test_read_only_files_cannot_be_written_or_edited(ws: Workspace, path: str) -> None:
    before = ws.read_text(path)
    with pytest.raises(FileRefused, match="read-only"):
        ws.write_text(path, "hacked")
    with pytest.raises(FileRefused, match="read-only"):
        ws.edit(path, before[:5], "hacked")
    assert ws.read_text(path) == before


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("../escape.py", "'..' is not allowed"),
        ("kernels/../../escape.cu", "'..' is not allowed"),
        ("/etc/passwd", "absolute paths are not allowed"),
        ("~/x.py", "absolute paths are not allowed"),
        ("C:/x.py", "absolute paths are not allowed"),
        ("kernels\\a.cu", "backslashes"),
        ("model_new.py\x00.txt", "control characters"),
        ("a\nb", "control characters"),
        ("notes.txt", "not writable"),
        ("kernels/a.py", "not writable"),
        ("kernels/sub/a.cu", "not writable"),
        ("kernels", "not writable"),
        ("", "workspace root"),
        ("x" * 300, "at most 200 characters"),
        ("a/b/c/d/e/f.cu", "nested folders"),
        ("kernels/\udcff.cu", "not valid Unicode"),
    ],
)
def test_unsafe_or_unwritable_paths_are_refused(ws: Workspace, path: str, fragment: str, tmp_path: Path) -> None:
    outside_before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(FileRefused, match=fragment):
        ws.write_text(path, "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == outside_before


def test_reading_outside_is_refused(ws: Workspace) -> None:
    for path in ["../x", "/etc/hostname", "kernels/../../x"]:
        with pytest.raises(FileRefused):
            ws.read_text(path)
    with pytest.raises(FileRefused, match="does not exist"):
        ws.read_text("missing.py")
    with pytest.raises(FileRefused, match="is a folder"):
        ws.read_text("kernels")


def test_symlinks_are_never_followed(ws: Workspace, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    os.symlink(secret, ws.root / "kernels" / "leak.cu")
    os.symlink(ws.root / REFERENCE, ws.root / "kernels" / "inside.cu")
    os.symlink(tmp_path, ws.root / "kernels" / "dir.cu")
    for link in ["kernels/leak.cu", "kernels/inside.cu"]:
        with pytest.raises(FileRefused, match="symlink"):
            ws.read_text(link)
        with pytest.raises(FileRefused, match="symlink"):
            ws.write_text(link, "overwrite")
        with pytest.raises(FileRefused, match="symlink"):
            ws.edit(link, "top", "bottom")
    with pytest.raises(FileRefused, match="symlink"):
        ws.read_text("kernels/dir.cu/secret.txt")
    assert secret.read_text() == "top secret"
    assert "symlink" not in " ".join(e.path for e in ws.listing())
    assert ws.snapshot().files == {}


def test_symlinked_folder_is_refused(ws: Workspace, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws.root / "kernels").rmdir()
    os.symlink(outside, ws.root / "kernels")
    with pytest.raises(FileRefused, match="symlink"):
        ws.write_text("kernels/a.cu", "x")
    assert list(outside.iterdir()) == []


def test_fifos_and_other_special_files_are_refused(ws: Workspace) -> None:
    os.mkfifo(ws.root / "kernels" / "pipe.cu")
    with pytest.raises(FileRefused, match="not a regular file"):
        ws.read_text("kernels/pipe.cu")
    with pytest.raises(FileRefused, match="not a regular file"):
        ws.write_text("kernels/pipe.cu", "x")


def test_text_only_writes(ws: Workspace) -> None:
    with pytest.raises(FileRefused, match="NUL"):
        ws.write_text("model_new.py", "a\x00b")
    with pytest.raises(FileRefused, match="not valid Unicode"):
        ws.write_text("model_new.py", "bad \udc80 surrogate")
    (ws.root / "kernels" / "bin.cu").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(FileRefused, match="not UTF-8 text"):
        ws.read_text("kernels/bin.cu")


def test_size_and_count_caps(tmp_path: Path) -> None:
    limits = WorkspaceLimits(max_file_bytes=10, max_files=2)
    space = Workspace.create(instructions="i", reference="r", limits=limits, parent=tmp_path)
    try:
        with pytest.raises(FileRefused, match="at most 10 bytes, got 11"):
            space.write_text("model_new.py", "x" * 11)
        with pytest.raises(FileRefused, match="at most 10 bytes"):
            space.write_text("model_new.py", "é" * 6)  # 12 bytes in UTF-8
        space.write_text("model_new.py", "x" * 10)
        space.write_text("kernels/a.cu", "a")
        with pytest.raises(FileRefused, match="holds 2 writable files"):
            space.write_text("kernels/b.cu", "b")
        assert space.write_text("kernels/a.cu", "ok") == (2, False)  # overwriting needs no new slot
        assert space.count_writable_files() == 2
    finally:
        space.close()


def test_edit_exact_match_rules(ws: Workspace) -> None:
    ws.write_text("model_new.py", "a = 1\nb = 2\na = 1\n")
    with pytest.raises(FileRefused, match="not found"):
        ws.edit("model_new.py", "c = 3", "c = 4")
    with pytest.raises(FileRefused, match=r"occurs 2 times .*lines 1, 3"):
        ws.edit("model_new.py", "a = 1", "a = 5")
    with pytest.raises(FileRefused, match="must not be empty"):
        ws.edit("model_new.py", "", "x")
    with pytest.raises(FileRefused, match="the same"):
        ws.edit("model_new.py", "b = 2", "b = 2")
    assert ws.read_text("model_new.py") == "a = 1\nb = 2\na = 1\n"
    assert ws.edit("model_new.py", "b = 2", "b = 3") == (1, (2,))
    assert ws.edit("model_new.py", "a = 1", "a = 9", replace_all=True) == (2, (1, 3))
    assert ws.read_text("model_new.py") == "a = 9\nb = 3\na = 9\n"
    with pytest.raises(FileRefused, match="does not exist"):
        ws.edit("kernels/none.cu", "a", "b")


def test_edit_that_would_exceed_the_cap_is_refused(tmp_path: Path) -> None:
    space = Workspace.create(instructions="i", reference="r", limits=WorkspaceLimits(max_file_bytes=8), parent=tmp_path)
    try:
        space.write_text("model_new.py", "abc")
        with pytest.raises(FileRefused, match="at most 8 bytes"):
            space.edit("model_new.py", "b", "b" * 10)
        assert space.read_text("model_new.py") == "abc"
    finally:
        space.close()


def test_listing_of_a_folder_and_errors(ws: Workspace) -> None:
    ws.write_text("kernels/relu.cu", "x")
    entries = ws.listing("kernels")
    assert [(e.path, e.size_bytes, e.writable) for e in entries] == [("kernels/relu.cu", 1, True)]
    with pytest.raises(FileRefused, match="not a folder"):
        ws.listing("model.py")
    with pytest.raises(FileRefused, match="does not exist"):
        ws.listing("nowhere")


def test_snapshot_holds_only_editable_files(ws: Workspace) -> None:
    ws.write_text("model_new.py", "m")
    ws.write_text("kernels/relu.cu", "k")
    ws.write_text("kernels/relu_binding.cpp", "b")
    (ws.root / "stray.txt").write_text("not part of a solution")
    solution = ws.snapshot()
    assert solution.format == "extension"
    assert dict(solution.files) == {"model_new.py": "m", "kernels/relu.cu": "k", "kernels/relu_binding.cpp": "b"}


def test_close_removes_everything_and_is_idempotent(ws: Workspace) -> None:
    ws.write_text("model_new.py", "m")
    root = ws.root
    ws.close()
    ws.close()
    assert not root.exists()
    with pytest.raises(FileRefused, match="closed"):
        ws.read_text("model_new.py")


def test_pickle_copies_files_into_a_fresh_directory(ws: Workspace) -> None:
    ws.write_text("model_new.py", "m")
    ws.write_text("kernels/relu.cu", "k")
    clone = pickle.loads(pickle.dumps(ws))
    try:
        assert clone.root != ws.root and clone.root.is_dir()
        assert clone.read_text("kernels/relu.cu") == "k"
        assert clone.read_text(INSTRUCTIONS) == "# do it\n"
        assert clone.snapshot() == ws.snapshot()
        clone.write_text("model_new.py", "changed")
        assert ws.read_text("model_new.py") == "m"
    finally:
        clone.close()
    assert ws.root.is_dir()
    ws.close()
    closed = pickle.loads(pickle.dumps(ws))
    assert closed.closed


def test_nothing_is_written_outside_the_parent(tmp_path: Path) -> None:
    parent = tmp_path / "ws"
    parent.mkdir()
    space = Workspace.create(instructions="i", reference="r", parent=parent)
    space.write_text("model_new.py", "m")
    assert [p.parent for p in parent.iterdir()] == [parent]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ws"]
    space.close()
    assert list(parent.iterdir()) == []


def test_a_workspace_never_closed_is_removed_when_the_interpreter_exits(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = ("from cudagym.workspace import Workspace\n"
            f"ws = Workspace.create(instructions='i', reference='r', parent={str(tmp_path)!r})\n"
            "ws.write_text('model_new.py', 'x')\nprint(ws.root)\n")  # exits without ws.close()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    root = Path(done.stdout.strip())
    assert root.parent == tmp_path and not root.exists()


def test_an_unpickled_workspace_keeps_its_directory_until_closed(tmp_path: Path) -> None:
    import gc
    import pickle

    ws = Workspace.create(instructions="i", reference="r", parent=tmp_path)
    ws.write_text("model_new.py", "x")
    clone = pickle.loads(pickle.dumps(ws))
    gc.collect()
    assert clone.root.is_dir() and clone.read_text("model_new.py") == "x"
    root = clone.root
    del clone
    gc.collect()
    assert not root.exists()  # dropped without close(): removed all the same
    ws.close()


def test_snapshot_holds_what_solution_from_dir_reads(ws: Workspace, tmp_path: Path) -> None:
    from cudagym.solution import Solution

    ws.write_text("model_new.py", "import torch\n")
    ws.write_text("kernels/relu.cu", "__global__ void k() {}\n")
    (ws.root / "kernels" / "crlf.cu").write_bytes(b"int a;\r\nint b;\r\n")  # written around the workspace's checks
    (ws.root / "kernels" / "latin1.cu").write_bytes(b"// caf\xe9\n")
    (ws.root / "kernels" / "deep").mkdir()
    (ws.root / "kernels" / "deep" / "x.cu").write_text("int c;\n")  # not an editable path
    (tmp_path / "outside.cu").write_text("secret\n")
    (ws.root / "kernels" / "link.cu").symlink_to(tmp_path / "outside.cu")
    snap = ws.snapshot()
    assert snap == Solution.from_dir(ws.root, ws.format.name)
    assert snap.files["kernels/crlf.cu"] == "int a;\nint b;\n" and snap.files["kernels/latin1.cu"] == "// caf\ufffd\n"
    assert "kernels/link.cu" not in snap.files and "binding.cpp" not in snap.files
