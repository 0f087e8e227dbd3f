"""fp16 output SQNR of our build and of PyTorch's own .half(), both against a float64 run of
the same model (issue 29: fp16 within 1 dB of .half()). Prints one row per model:

    python examples/fp16_sqnr.py [--tokens T] [--models encoder convnext_mini]

encoder: nn.TransformerEncoderLayer(192, 3 heads) (post-norm, PyTorch's defaults), input
[1, T, 192] N(0, 1), T = 197 by default; attention: its nn.MultiheadAttention(192, 3) alone, the same
input; convnext_mini: the zoo's (3x64x64); vit_ti16: the zoo's ViT-Ti/16 (3x224x224). Figures in
docs/transformer_ops.md (fp16 accuracy)."""
import argparse
import copy

import numpy as np
import torch
import tvm

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.quantization.metrics import sqnr_db


def sqnr(actual, expected) -> float:
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return sqnr_db(float(np.sum(expected ** 2)), float(np.sum((actual - expected) ** 2)))


def encoder(tokens: int):
    torch.manual_seed(0)
    model = torch.nn.TransformerEncoderLayer(192, 3, batch_first=True).eval()
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((1, tokens, 192))
                         .astype(np.float32))
    return model, x


class _SelfAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(192, 3, batch_first=True)

    def forward(self, x):
        return self.attention(x, x, x, need_weights=False)[0]


def attention(tokens: int):
    torch.manual_seed(0)
    model = _SelfAttention().eval()
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((1, tokens, 192))
                         .astype(np.float32))
    return model, x


def convnext_mini(tokens: int):
    from accel_codegen.tools.models import convnext_mini as zoo

    model, (x,) = zoo()
    return model.eval(), x


def vit_ti16(tokens: int):
    from accel_codegen.tools.models import vit_ti16 as zoo

    model, (x,) = zoo()
    return model.eval(), x


MODELS = {"encoder": encoder, "attention": attention, "convnext_mini": convnext_mini,
          "vit_ti16": vit_ti16}


def measure(model, x):
    """(ours, .half()) SQNR in dB against the float64 run."""
    with torch.no_grad():
        exact = copy.deepcopy(model).double()(x.double()).numpy()
        half = copy.deepcopy(model).half()(x.half()).float().numpy()
    mod, params = from_pytorch(model, (x,))
    vm = ac.virtual_machine(ac.build(mod, params=params, precision="fp16"))
    ours = vm["main"](tvm.runtime.tensor(np.ascontiguousarray(x.numpy()))).numpy()
    return sqnr(ours, exact), sqnr(half, exact)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=197)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args(argv)
    print(f"{'model':16s} {'ours fp16 dB':>13s} {'.half() dB':>11s} {'gap dB':>7s}")
    for name in args.models:
        ours, half = measure(*MODELS[name](args.tokens))
        print(f"{name:16s} {ours:13.1f} {half:11.1f} {half - ours:7.1f}")


if __name__ == "__main__":
    main()
