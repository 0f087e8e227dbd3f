"""The LeNet-5 whose int8 export NVDLA's nv_small RTL ran (docs/nvdla_rtl_exports.json,
recorded 2026-11-29): the zoo's LeNet-5 as the zoo drew it then, from torch's generator (He
weights, N(0, 0.1) biases, in module order; the example input from the zoo's input stream).
The zoo now draws with NumPy (the same bits on every CPU), which changed LeNet-5's weights;
the RTL's CRCs hold for these. torch's generator gives these bits on CPUs whose ATen kernels
take its AVX2 or AVX-512 paths (the Zen 3 and Zen 4 hosts so far), not under
``ATEN_CPU_CAPABILITY=default``.

    accel-codegen export-nvdla examples/lenet5_rtl.py:lenet5_rtl --config nv_small ...
"""
import math

import torch
from torch import nn

from accel_codegen.tools.models import LeNet5

_INPUT_STREAM = 0x5EED  # the zoo's input stream (accel_codegen/tools/models.py)


def lenet5_rtl():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LeNet5()
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for module in model.modules():
                if isinstance(module, (nn.Conv2d, nn.Linear)):
                    w = module.weight
                    w.copy_(torch.randn(w.shape, generator=gen) * math.sqrt(2.0 / w[0].numel()))
                    if module.bias is not None:
                        module.bias.copy_(torch.randn(module.bias.shape, generator=gen) * 0.1)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    x = torch.randn((1, 1, 32, 32), generator=torch.Generator().manual_seed(0 ^ _INPUT_STREAM))
    return model, (x,)
