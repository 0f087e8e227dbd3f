"""Where the examples write: the main job names its library after the model and precision (it
wrote out/resnet18.so for every model), and the timeline example writes under out/, never over
the tracked picture in docs/ unless asked with --png. Run in-process (runpy) from a temporary
working directory, on LeNet-5."""
import runpy
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run_example(monkeypatch, tmp_path, name, *argv):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [name, *argv])
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")


@pytest.mark.parametrize("precision, library", [("fp32", "lenet5.so"),
                                                ("fp16", "lenet5_fp16.so")])
def test_main_job_names_the_library_after_the_model(monkeypatch, tmp_path, capsys, precision,
                                                    library):
    _run_example(monkeypatch, tmp_path, "resnet18.py", "--model", "lenet5", "--precision",
                 precision)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [library]
    assert f"exported: out/{library}" in capsys.readouterr().out


def test_trace_example_writes_under_out_not_docs(monkeypatch, tmp_path):
    _run_example(monkeypatch, tmp_path, "trace_resnet18.py", "--model", "lenet5", "--runs",
                 "0", "2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "trace_lenet5.png", "trace_lenet5_decomposed.json", "trace_lenet5_fused.json"]
