"""A token layer whose data another token layer wrote reads that layer's [B, C, 1, T] surface
instead of transposing the tokens onto a surface of its own (codegen/passes.py,
``token_surfaces``): the q, k and v projections after a layer norm, fc2 after fc1 + GELU,
attention's K (the scores CONV's data) after the K projection; tokens transposed onto a
surface once stay there for their later readers; a residual add of two token tensors held
on surfaces runs on them (``surface_adds``); and a layer whose every reader takes its surface
writes no tokens at all. The same runs and the same output bytes as with every transpose."""

import accel_codegen as ac
from accel_codegen.compiler.codegen import emit, passes
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.tools.models import VisionTransformer, build_realistic
from conftest import run_profiled


def test_token_layers_read_the_surface_their_data_was_written_on(monkeypatch):
    model, (x,) = build_realistic(lambda: VisionTransformer(image=32, dim=32, depth=2, heads=2,
                                                            num_classes=10), (3, 32, 32))
    mod, params = from_pytorch(model, (x,))
    monkeypatch.setattr(emit, "SHARED_LAYER_RUNS", 10 ** 9)  # every layer's C inline: counted
    reused = ac.partition_for_accel(mod, params)
    (source,) = ac.generated_sources(reused).values()
    onto = source.count("onto the surface")
    already = source.count("already */")
    # per block: q, k, v, the second layer norm, fc1, fc2 and attention's K; the first layer
    # norm of the second block (the first block's transposes its data) and the final one
    assert already == 2 * 7 + 2, source[:3000]
    assert source.count("K on its surface") == 2
    assert "surface(s)" not in source  # no K transposed onto a surface of its own
    # per block: the two residual adds, on the surfaces of their operands
    assert source.count("on the surfaces") == 2 * 2
    # left: the first layer norm's data, per block q and v (attention reads them as rows)
    # and attention's output (the output projection's data), the last layer norm's result
    # (the class token's slice reads it as tokens)
    assert source.count("accel_glue_transpose") == 1 + 2 * 3 + 1
    monkeypatch.setattr(passes, "resolve_operand", lambda expr, scope: (None, None))
    transposing = ac.partition_for_accel(mod, params)
    (transposing_source,) = ac.generated_sources(transposing).values()
    assert "already */" not in transposing_source
    assert "every reader takes it" not in transposing_source
    assert "on the surfaces" not in transposing_source
    assert transposing_source.count("onto the surface") == onto + already - 2
    assert transposing_source.count("surface(s)") == 2  # K: its tokens back onto a surface
    out, labels = run_profiled(reused, x.numpy())
    transposing_out, transposing_labels = run_profiled(transposing, x.numpy())
    assert labels == transposing_labels
    assert out.tobytes() == transposing_out.tobytes()


def test_the_estimate_prices_the_residual_adds_on_their_surfaces():
    """The planning pass gives a residual add's run the surface's shape [1, C, 1, T], the
    shape it runs in: the estimate's runs are the profile's, cycle for cycle."""
    import tvm

    model, (x,) = build_realistic(lambda: VisionTransformer(image=32, dim=32, depth=1, heads=2,
                                                            num_classes=10), (3, 32, 32))
    mod, params = from_pytorch(model, (x,))
    partitioned = ac.partition_for_accel(mod, params)
    vm = ac.virtual_machine(tvm.compile(partitioned, target="llvm"))
    with ac.profile() as prof:
        vm["main"](tvm.runtime.tensor(x.numpy()))
    estimated = ac.estimate(mod, params).layers
    assert [(layer.label, layer.cycles) for layer in estimated] == \
        [(r.label, r.cycles) for r in prof.records]
    adds = [r for r in prof.records if r.label.endswith("accel.add")]
    assert len(adds) == 3  # the position embedding's (a constant) and the two residual adds


def test_the_code_generator_follows_the_planned_surface_adds(monkeypatch):
    """Which residual adds run on surfaces is decided once per function, by the planning pass
    the estimate prices (``Function.surface_adds``); the code generator follows that choice
    instead of deciding again by its own reading of the precision (the two readings could
    differ: then an operand's surface was missing, a typed error)."""
    model, (x,) = build_realistic(lambda: VisionTransformer(image=32, dim=32, depth=1, heads=2,
                                                            num_classes=10), (3, 32, 32))
    mod, params = from_pytorch(model, (x,))
    decide = passes.surface_adds
    decided = []

    def once(function, precision):
        decided.append(function)
        return decide(function, precision)

    monkeypatch.setattr(passes, "surface_adds", once)
    (source,) = ac.generated_sources(ac.partition_for_accel(mod, params)).values()
    assert source.count("on the surfaces") == 2
    assert decided and len({id(f) for f in decided}) == len(decided)
