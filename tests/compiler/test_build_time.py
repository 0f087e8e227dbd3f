"""What keeps a transformer's build short (issue 29: ViT-B/16 built and exported in under 10 s;
examples/build_time.py measures it): the C of layers that repeat (every block's layer norms
and attention, tens of runs each) printed once as a shared function, with the same runs, in
the same order, as the inline code."""
import numpy as np

import accel_codegen as ac
from accel_codegen.compiler.codegen import emit
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.tools.models import VisionTransformer, build_realistic
from conftest import run_profiled


def _vit():
    """A ViT of 2 blocks at width 32 (2 heads, 5 tokens): 5 layer norms, 2 attentions."""
    return build_realistic(lambda: VisionTransformer(image=32, dim=32, depth=2, heads=2,
                                                     num_classes=10), (3, 32, 32))


def test_repeated_layers_share_their_code_and_run_the_same(monkeypatch):
    model, (x,) = _vit()
    mod, params = from_pytorch(model, (x,))
    shared = ac.partition_for_accel(mod, params)
    (source,) = ac.generated_sources(shared).values()
    # the layer norms in the blocks but the first (one code: the same shapes, their data
    # and results on surfaces) and the 2 attentions share 2 functions; the first block's
    # first norm, which transposes its data onto the surface, and the final norm, which
    # writes its tokens, are printed inline
    assert source.count("static int layer_code") == 2, source[:2000]
    assert source.count("if (layer_code0(") + source.count("if (layer_code1(") == 5
    monkeypatch.setattr(emit, "SHARED_LAYER_RUNS", 10 ** 9)
    inline = ac.partition_for_accel(mod, params)
    (inline_source,) = ac.generated_sources(inline).values()
    assert "layer_code" not in inline_source
    # 0.77 (0.73 while a layer norm's sums were 23-run trees): the first block's first norm,
    # which transposes its data, is printed inline (one of the four block norms at two blocks)
    assert len(source) < len(inline_source) * 0.8, (len(source), len(inline_source))
    out, labels = run_profiled(shared, x.numpy())
    inline_out, inline_labels = run_profiled(inline, x.numpy())
    assert labels == inline_labels and len(labels) > 80  # 85 runs (a layer norm 6 in fp32)
    assert np.array_equal(out, inline_out)


def test_layers_that_differ_only_in_their_weight_pack_slots_share_their_code():
    # the glue's pack slot is a counter over the function (fp16 / int8 constant weights,
    # Winograd, C16 1x1 convs): two layers' equal code differs in it, as in an fp16 ViT's
    # layer norms, and each call passes its own slots
    def layer(first_slot, temp):
        runs = [f"if (accel_glue_pack_weights(&k_fn, &ops[0], 32, {first_slot + i}) != 0) "
                f"return -1;\nif (accel_glue_run_layer(&k_fn, ops, 1, k_temp[{temp}], "
                f"in_shape, k_temp[{temp + 1}], out_shape, \"run {i}\") != 0) return -1;"
                for i in range(8)]  # a layer of 8 runs: at least SHARED_LAYER_RUNS
        return "\n".join(runs)

    assert emit.SHARED_LAYER_RUNS <= 8
    functions, body = emit.shared_layers([layer(0, 0), layer(8, 4)])
    assert len(functions) == 1 and "P[7]) != 0" in functions[0], functions
    assert "const int P_[8] = {0, 1, 2, 3, 4, 5, 6, 7};" in body[0]
    assert "const int P_[8] = {8, 9, 10, 11, 12, 13, 14, 15};" in body[1]
    assert "layer_code0(NULL, T_, NULL, S_, P_)" in body[1]


def test_generated_code_is_compiled_by_the_c_compiler(monkeypatch, tmp_path):
    """The generated C is built by the C compiler: TVM's default, g++, compiles it as C++,
    about three times the time for the same library (the most of a small model's build, and
    of the mixed search's, which builds one per layer); a C++ source keeps TVM's default."""
    import torch
    from tvm.support import cc as tvm_cc

    from accel_codegen.compiler import link

    used = []
    real = tvm_cc.create_shared

    def spy(output, objects, options=None, cc=None, **kwargs):
        used.append(cc)
        return real(output, objects, options, cc=cc, **kwargs)

    monkeypatch.setattr(tvm_cc, "create_shared", spy)
    link.create_shared(str(tmp_path / "x.so"), [], None, cc="true")  # a given cc is kept
    assert used == ["true"]
    used.clear()
    monkeypatch.setattr(tvm_cc, "create_shared", lambda *a, cc=None, **k: used.append(cc))
    link.create_shared("x.so", ["lib0.cc", "lib1.o"])
    assert used == [None]
    monkeypatch.setattr(tvm_cc, "create_shared", spy)
    used.clear()
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    x = torch.randn(1, 3, 6, 6)
    mod, params = from_pytorch(model, (x,))
    path = ac.export_library(ac.build(mod, params), tmp_path / "m.so")
    assert used == [link.c_compiler()] and "g++" not in str(used[0])
    y = ac.virtual_machine(path)["main"](x.numpy())
    np.testing.assert_allclose(y.numpy(), model(x).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_a_cc_that_is_not_one_program_is_a_typed_error(monkeypatch):
    """$CC with options, or a path that is no program, names $CC in an AccelLibraryError
    (TVM would run it without a shell and fail with a bare 'No such file'); unset, gcc."""
    import shutil

    import pytest

    from accel_codegen.compiler import link
    from accel_codegen.errors import AccelLibraryError

    for bad in ("/nonexistent/cc", "gcc -O1"):
        monkeypatch.setenv("CC", bad)
        with pytest.raises(AccelLibraryError, match=r"\$CC"):
            link.c_compiler()
    monkeypatch.delenv("CC")
    assert link.c_compiler() == (shutil.which("gcc") or shutil.which("cc"))


def test_the_constants_are_packed_as_an_object_not_as_c(tmp_path):
    """export_library packs the constants through LLVM into an object only when its fcompile
    reports a target triple; otherwise into devc.c, a C array of every weight, which the C
    compiler took minutes and gigabytes over on AlexNet's 61 M weights."""
    import torch

    from accel_codegen.compiler import link

    assert link.create_shared.get_target_triple().startswith(("x86_64", "aarch64", "arm"))
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU()).eval()
    x = torch.randn(1, 64)
    mod, params = from_pytorch(model, (x,))
    work = tmp_path / "work"
    work.mkdir()
    ac.build(mod, params).export_library(str(tmp_path / "m.so"), fcompile=link.create_shared,
                                         options=link.link_options(),
                                         workspace_dir=str(work))
    assert not list(work.glob("*devc.c")) and list(work.glob("*devc.o"))
