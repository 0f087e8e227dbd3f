"""A token layer whose data another token layer wrote reads that layer's [B, C, 1, T] surface
instead of transposing the tokens onto a surface of its own (codegen/passes.py,
``token_surfaces``): the q, k and v projections after a layer norm, fc2 after fc1 + GELU,
attention's K (the scores CONV's data) after the K projection; and a token layer whose every
reader takes its surface writes no tokens at all. The same runs and the same output bytes as
with every transpose."""

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
    # per block: q, k, v after the first layer norm, fc1 after the second, fc2 after fc1,
    # attention's K after the K projection
    assert already == 2 * 6, source[:3000]
    assert source.count("K on its surface") == 2
    assert "surface(s)" not in source  # no K transposed onto a surface of its own
    # per block: the two layer norms' results, K's and fc1's are read by token layers alone
    assert source.count("every reader takes it */") == 2 * 4
    monkeypatch.setattr(passes, "resolve_operand", lambda expr, scope: (None, None))
    transposing = ac.partition_for_accel(mod, params)
    (transposing_source,) = ac.generated_sources(transposing).values()
    assert "already */" not in transposing_source
    assert "every reader takes it" not in transposing_source
    assert transposing_source.count("onto the surface") == onto + already - 2
    assert transposing_source.count("surface(s)") == 2  # K: its tokens back onto a surface
    out, labels = run_profiled(reused, x.numpy())
    transposing_out, transposing_labels = run_profiled(transposing, x.numpy())
    assert labels == transposing_labels
    assert out.tobytes() == transposing_out.tobytes()
