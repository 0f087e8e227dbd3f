"""partition --graph: a picture of the partitioned model, its external functions coloured and
its host operators marked with their reasons (issue 30)."""
import xml.etree.ElementTree as ET

import torch

from accel_codegen import partition_report
from accel_codegen.compiler import frontend
from accel_codegen.compiler.partition import match_composites
from accel_codegen.tools.graph_view import graph_nodes, write_graph
from conftest import run_cli

SVG = "{http://www.w3.org/2000/svg}"


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.b = torch.nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = torch.relu(self.a(x))
        return self.b(torch.sin(y)) + y  # sin on the host splits the accelerator's regions


def test_graph_boxes_arrows_and_colours(tmp_path):
    torch.manual_seed(0)
    mod, _ = frontend.from_pytorch(Net().eval(), (torch.randn(1, 3, 6, 6),))
    report = partition_report(mod)
    matched = match_composites(mod)
    nodes = graph_nodes(matched, report)
    assert [(n.kind, n.source) for n in nodes] == [
        ("layer", "a+relu"), ("host", "sin"), ("layer", "b+add")]
    assert [n.function for n in nodes] == [0, None, 1]
    assert nodes[1].code == "no-primitive" and "relax.sin" in nodes[1].reason
    # sin reads the first layer; the last layer reads sin and (a skip) the first layer
    assert nodes[1].inputs == {0} and nodes[2].inputs == {0, 1}
    svg = ET.parse(write_graph(matched, report, tmp_path / "g.svg")).getroot()
    boxes = [g.find(f"{SVG}rect") for g in svg.iter(f"{SVG}g")]
    assert len(boxes) == 3
    assert boxes[0].get("fill") != boxes[2].get("fill")  # two external functions
    assert boxes[1].get("stroke") == "#d62728"
    tips = [g.find(f"{SVG}title").text for g in svg.iter(f"{SVG}g")]
    assert "stays on the host: no accelerator primitive for relax.sin" in tips[1]
    assert len(list(svg.iter(f"{SVG}path"))) == 2  # the arrowhead and the skip's curve
    page = write_graph(matched, report, tmp_path / "g.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page


def test_cli_writes_the_graph(capsys, tmp_path):
    out = tmp_path / "lenet.html"
    status, _, err = run_cli(capsys, "partition", "lenet5", "--graph", out)
    assert status == 0 and f"wrote {out}" in err, err
    assert out.read_text().count("<rect") >= 5
    status, _, err = run_cli(capsys, "partition", "lenet5", "--graph", tmp_path / "g.png")
    assert status == 1 and "must end in .svg or .html" in err
