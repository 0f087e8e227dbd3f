"""What keeps a transformer's build short (issue 29: ViT-B/16 built and exported in under 10 s;
examples/build_time.py measures it): the C of layers that repeat (every block's layer norms
and attention, tens of runs each) printed once as a shared function, with the same runs, in
the same order, as the inline code."""
import numpy as np
import tvm
from tvm import relax

import accel_codegen as ac
from accel_codegen.compiler.codegen import emit
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.tools.models import VisionTransformer, build_realistic
from accel_codegen.sim.profiling import profile


def _vit():
    """A ViT of 2 blocks at width 32 (2 heads, 5 tokens): 5 layer norms, 2 attentions."""
    return build_realistic(lambda: VisionTransformer(image=32, dim=32, depth=2, heads=2,
                                                     num_classes=10), (3, 32, 32))


def _run(partitioned, x):
    vm = ac.virtual_machine(tvm.compile(partitioned, target="llvm"))
    with profile() as runs:
        out = vm["main"](tvm.runtime.tensor(x)).numpy()
    return out, [r.label for r in runs.records]


def test_repeated_layers_share_their_code_and_run_the_same(monkeypatch):
    model, (x,) = _vit()
    mod, params = from_pytorch(model, (x,))
    shared = ac.partition_for_accel(mod, params)
    (source,) = ac.generated_sources(shared).values()
    # the 5 layer norms (one code: the same shapes) and the 2 attentions share 2 functions
    assert source.count("static int layer_code") == 2, source[:2000]
    assert source.count("if (layer_code0(") + source.count("if (layer_code1(") == 7
    monkeypatch.setattr(emit, "SHARED_LAYER_RUNS", 10 ** 9)
    inline = ac.partition_for_accel(mod, params)
    (inline_source,) = ac.generated_sources(inline).values()
    assert "layer_code" not in inline_source
    assert len(source) < len(inline_source) / 2, (len(source), len(inline_source))
    out, labels = _run(shared, x.numpy())
    inline_out, inline_labels = _run(inline, x.numpy())
    assert labels == inline_labels and len(labels) > 200
    assert np.array_equal(out, inline_out)
