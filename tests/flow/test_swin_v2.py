"""A Swin-V2 block (torchvision's SwinTransformerBlockV2 / ShiftedWindowAttentionV2, written
in tools/models.py: post-norm, cosine attention with a learnt logit scale per head, the
continuous position bias 16 sigmoid(MLP(coordinates)), shifted windows) whole on the
accelerator: the computations over constants only folded before matching
(compiler/constant_folding.py), F.normalize of q and k read into the attention core
(compiler/attention.py) as an L2 norm of each head (sim/decompose.l2_normalize_passes), the
logit scales as the scores' scale per head; one external function, fp32 within 1e-4 of the
output scale of PyTorch."""
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.tools.models import SwinBlockV2, build_realistic
from conftest import assert_close, build_and_run, torch_forward


def test_a_shifted_swin_v2_block_is_one_function_within_1e_4_of_pytorch():
    model, (x,) = build_realistic(lambda: torch.nn.Sequential(SwinBlockV2(8, 2, 4, 2, 8)),
                                  (8, 8, 8))
    assert len(set(model[0].attn.logit_scale.flatten().tolist())) == 2  # one per head
    mod, params = from_pytorch(model, (x,))
    report = ac.partition_report(mod, params)
    assert not report.host, [(op.op, op.reason) for op in report.host]
    assert len(report.functions) == 1, report.functions
    primitives = [p for ps in report.functions.values() for p in ps]
    assert "accel.attention" in primitives and primitives.count("accel.l2_normalize") == 2
    # the CPB MLP, its sigmoid and the logit scale's clamp and exp are constants: no op left
    assert not {"relax.sigmoid", "relax.exp", "relax.nn.relu"} & {op.op for op in report.ops}
    assert_close(build_and_run(mod, x.numpy(), params=params), torch_forward(model, x), 1e-4)
    # fp16's attention passes take each head's factor too (its exponentials recompute the
    # scores with it)
    report = ac.partition_report(mod, params, precision="fp16")
    assert not report.host and len(report.functions) == 1, report.host
