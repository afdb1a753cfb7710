from __future__ import annotations

import pytest

from cudagym.errors import ConfigError
from cudagym.solution import FORMATS, Solution, get_format


def test_formats_and_editable_paths():
    ext = get_format("extension")
    assert get_format(None) is ext
    assert ext.is_editable("model_new.py") and ext.is_editable("kernels/relu.cu")
    assert ext.is_editable("kernels/relu_binding.cpp")
    assert not ext.is_editable("binding.cpp") and not ext.is_editable("model.py")
    assert not ext.is_editable("kernels/sub/x.cu") and not ext.is_editable("x/model_new.py")
    assert not get_format("inline").is_editable("kernels/a.cu")
    assert get_format("raw").is_editable("kernels/a.cuh")
    assert set(FORMATS) == {"extension", "inline", "raw"}
    with pytest.raises(ConfigError, match="expected one of"):
        get_format("triton")


def test_protected_templates_come_from_the_package():
    files = get_format("extension").template_files()
    assert set(files) == {"binding.cpp", "binding_registry.h"}
    assert "REGISTER_BINDING" in files["binding_registry.h"]
    assert "PYBIND11_MODULE(TORCH_EXTENSION_NAME" in files["binding.cpp"]


def test_solution_rejects_files_the_format_does_not_allow():
    with pytest.raises(ConfigError, match="does not allow binding.cpp"):
        Solution("extension", {"model_new.py": "", "binding.cpp": "evil"})
    with pytest.raises(ConfigError):
        Solution("inline", {"model_new.py": "", "kernels/a.cu": ""})


def test_solution_pickles():
    import pickle

    sol = Solution("raw", {"model_new.py": "x", "kernels/a.cu": "y"})
    assert pickle.loads(pickle.dumps(sol)) == sol


def test_hashes_and_snapshot(tmp_path):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "model_new.py").write_text("import cuda_extension\n")
    (tmp_path / "kernels" / "a.cu").write_text("__global__ void k() {}\n")
    (tmp_path / "binding.cpp").write_text("protected, not part of the solution")
    (tmp_path / "notes.txt").write_text("ignored")
    sol = Solution.from_dir(tmp_path, "extension")
    assert set(sol.files) == {"model_new.py", "kernels/a.cu"}
    edited_py = Solution("extension", {**sol.files, "model_new.py": "import cuda_extension  # v2\n"})
    assert edited_py.content_hash != sol.content_hash
    assert edited_py.build_hash() == sol.build_hash()  # model_new.py is not compiled
    edited_cu = Solution("extension", {**sol.files, "kernels/a.cu": "__global__ void k2() {}\n"})
    assert edited_cu.build_hash() != sol.build_hash()
