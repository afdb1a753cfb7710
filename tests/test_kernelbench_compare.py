"""benchmarks/kernelbench_compare.py on hand-made tables and a hand-made KernelBench timing folder."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from script_module import load_script

from cudagym.judge.task_check import TaskRow, to_csv


@pytest.fixture(scope="module")
def kbc():
    pytest.importorskip("scipy")
    return load_script("benchmarks/kernelbench_compare.py", "kernelbench_compare")


# (file name, published eager ms, published compile ms, measured eager us, measured compile us) for level 1:
# the H100 file is 1.5x slower than the measurement everywhere, but for 12 (changed in v0.2: 49x) and for 7
# (40x: a shape change the changelog does not name), which must be left out.
LEVEL1 = [
    ("1_Square_matrix_multiplication_.py", 3.0, 3.3, 2000.0, 2200.0),
    ("2_Standard_matrix_multiplication_.py", 1.5, 1.2, 1000.0, 800.0),
    ("3_Batched_matrix_multiplication.py", 0.6, 0.3, 400.0, 200.0),
    ("4_Matrix_vector_multiplication_.py", 0.15, 0.3, 100.0, 200.0),
    ("7_Matmul_with_small_K_dimension_.py", 6.0, 3.0, 100.0, 50.0),
    ("12_Matmul_with_diagonal_matrices_.py", 2.68, 0.5, 55.0, 40.0),
]
LEVEL2 = [("1_Conv2D_ReLU_BiasAdd.py", 4.0, 2.0, 9000.0, 3000.0),
          ("2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide.py", 1.0, 2.0, 2000.0, 1000.0),
          ("3_ConvTranspose3d_Sum_LayerNorm_AvgPool_GELU.py", 2.0, 1.0, 5000.0, 9000.0)]


def kernelbench_dir(root: Path) -> Path:
    timing = root / "results" / "timing" / "H100_Modal"
    timing.mkdir(parents=True)
    eager = {f"level{lv}": {n: {"mean": e, "std": 0.01} for n, e, _c, _me, _mc in rows}
             for lv, rows in ((1, LEVEL1), (2, LEVEL2))}
    compiled = {f"level{lv}": {n: {"mean": c} for n, _e, c, _me, _mc in rows}
                for lv, rows in ((1, LEVEL1), (2, LEVEL2))}
    (timing / "baseline_time_torch.json").write_text(json.dumps(eager))
    (timing / "baseline_time_torch_compile_inductor_default.json").write_text(json.dumps(compiled))
    changelog = root / "KernelBench" / "changelog"
    changelog.mkdir(parents=True)
    (changelog / "v0.2").write_text("Ongoing Effort\n\nUpdated Level1/12_Matmul_with_diagonal_matrices_.py - More "
                                    "efficient PyTorch implementation\n")
    return root


def table(path: Path, level: int, rows: list, extra: list[TaskRow] = ()) -> Path:
    made = [TaskRow(f"L{level}/{n.removesuffix('.py')}", level, "ok", eager_us=me, compile_us=mc, message="")
            for n, _e, _c, me, mc in rows]
    path.write_text(to_csv([*made, *extra]))
    return path


def test_stale_rows_are_left_out_and_counted_and_the_rest_correlate(kbc, tmp_path):
    kb = kernelbench_dir(tmp_path / "kb")
    failed = TaskRow("L1/99_TripletMarginLoss", 1, "task_too_large")  # not timed: never compared
    tables = [table(tmp_path / "L1.csv", 1, LEVEL1, [failed]), table(tmp_path / "L2.csv", 2, LEVEL2)]
    measured = kbc.load_measured(tables)
    assert "L1/99_TripletMarginLoss" not in measured and len(measured) == 9
    assert kbc.changelog_updates(kb) == {"L1/12_Matmul_with_diagonal_matrices_"}
    reports = kbc.compare(measured, kbc.load_published(kb, "H100_Modal"), kbc.changelog_updates(kb))
    level1, level2 = reports
    assert level1.stale_changelog == ["L1/12_Matmul_with_diagonal_matrices_"]
    assert level1.stale_outlier == ["L1/7_Matmul_with_small_K_dimension_"]
    assert len(level1.tasks) == 4 and level1.median_published_over_measured == pytest.approx(1.5)
    # ratios: published 0.909, 1.25, 2, 0.5; measured 0.909, 1.25, 2, 0.5: the same order
    assert level1.ratio_spearman == pytest.approx(1.0) and level1.eager_spearman == pytest.approx(1.0)
    # level 2: published ratios 2, 0.5, 2 (a tie) against measured 3, 2, 0.556 (all within 4x of the median)
    assert level2.ratio_spearman == pytest.approx(kbc.spearman([2.0, 0.5, 2.0], [3.0, 2.0, 5000 / 9000]))
    text = kbc.render(reports, "H100_Modal", tables)
    assert "2 stale rows left out: L1/12_Matmul_with_diagonal_matrices_, L1/7_Matmul_with_small_K_dimension_." in text
    assert "| 1 | 4 | 1.00 | 1.00 | 1.50 | 1 | 1 |" in text


def test_spearman_needs_three_pairs_and_outliers_need_a_reference(kbc):
    assert math.isnan(kbc.spearman([1.0, 2.0], [2.0, 1.0]))
    assert kbc.spearman([1.0, 2.0, 3.0], [30.0, 20.0, 10.0]) == pytest.approx(-1.0)
    assert kbc.outliers({}, 4.0) == set()


def test_the_command_reports_and_says_what_is_missing(kbc, tmp_path, capsys):
    kb = kernelbench_dir(tmp_path / "kb")
    csv_path = table(tmp_path / "L1.csv", 1, LEVEL1)
    out = tmp_path / "report.md"
    assert kbc.main(["--kernelbench-dir", str(kb), "--out", str(out), str(csv_path)]) == 0
    assert out.read_text() == capsys.readouterr().out and "| 1 | 4 |" in out.read_text()
    assert kbc.main(["--kernelbench-dir", str(tmp_path / "nowhere"), str(csv_path)]) == 2
    assert "results/timing/H100_Modal" in capsys.readouterr().err
    assert kbc.main(["--kernelbench-dir", str(kb), str(tmp_path / "missing.csv")]) == 2
