"""examples/transformer_goals.py, the audit of issue 29's goals, on the forum's seed and a
decoder layer (two inputs): its rows say what the goals ask, and the figures meet them."""
import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "transformer_goals.py"


def _example():
    spec = importlib.util.spec_from_file_location("transformer_goals", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_seed_and_a_decoder_meet_the_goals(capsys):
    goals = _example()
    for name, whole in (("seed", "5/5 in 1"), ("decoder", "43/43 in 1")):
        row = goals.measure(*goals.MODELS[name](), 2)
        assert row["pytorch"] == whole and row["onnx"].endswith(" in 1"), row
        assert row["fp32"] <= max(1e-4, 2 * row["fp32_pytorch"]), row
        assert row["fp16"] >= row["half"] - 1.0, row
    goals.main(["--models", "seed", "--inputs", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["model", "PyTorch", "ONNX"] and \
        lines[1].split()[:4] == ["seed", "5/5", "in", "1"], lines
