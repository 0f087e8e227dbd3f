"""Transformer decoders on the accelerator (issue 29): torch's nn.TransformerDecoderLayer,
nn.TransformerDecoder (2 layers) and nn.Transformer (2 + 2 layers), C 48, 3 heads,
feed-forward 96, target T = 10, memory (or source) S = 7, batch-first and sequence-first, at
batch 1 and 2, with and without ``generate_square_subsequent_mask``'s causal mask:

    python examples/decoder_partitions.py [--models layer decoder transformer] [--onnx]
    python examples/decoder_partitions.py --accuracy [--trained]
    python examples/decoder_partitions.py --int8

The partition from ``frontend.from_pytorch`` (and with ``--onnx`` from ``export_onnx`` then
``from_onnx``), untrained (zero attention biases, cloned layers: what a user gets from the
constructors) unless ``--trained`` (attention biases N(0, 0.1), the stacks' layers perturbed
by N(0, 0.02): tests/flow/test_decoder_flow.py's models). ``--accuracy``: fp32's max error
over the output scale against PyTorch, fp16's SQNR against float64 beside PyTorch's
``.half()``, on two N(0, 1) inputs. ``--int8``: the causal models at batch 2, batch-first,
calibrated on 8 inputs, SQNR against PyTorch on 2, beside ONNX Runtime's static int8. nv_full.
Figures in docs/transformer_ops.md ("Decoders whole")."""
import argparse
import copy
import tempfile
from pathlib import Path

import numpy as np
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from accel_codegen.quantization import ort_baseline
from accel_codegen.quantization.metrics import sqnr_db

C, HEADS, T, S = 48, 3, 10, 7


class Decoder(torch.nn.Module):
    """``kind`` called with every is_causal a bool (the TorchScript ONNX exporter traces a
    default into a tensor, which scaled_dot_product_attention refuses)."""

    def __init__(self, kind: str, batch_first: bool, causal: bool, trained: bool):
        super().__init__()
        torch.manual_seed(0)
        layer = torch.nn.TransformerDecoderLayer(C, HEADS, dim_feedforward=2 * C, dropout=0.0,
                                                 batch_first=batch_first)
        self.model = {"layer": lambda: layer,
                      "decoder": lambda: torch.nn.TransformerDecoder(layer, 2),
                      "transformer": lambda: torch.nn.Transformer(
                          C, HEADS, 2, 2, 2 * C, dropout=0.0, batch_first=batch_first)}[kind]()
        self.kind, self.causal = kind, causal
        if trained:
            generator = torch.Generator().manual_seed(0)
            with torch.no_grad():
                for attention in self.modules():
                    if isinstance(attention, torch.nn.MultiheadAttention):
                        for bias in (attention.in_proj_bias, attention.out_proj.bias):
                            bias.copy_(0.1 * torch.randn(bias.shape, generator=generator))
                if kind != "layer":
                    generator = torch.Generator().manual_seed(3)
                    for p in self.model.parameters():
                        p.add_(0.02 * torch.randn(p.shape, generator=generator))
        self.eval()

    def forward(self, target, other):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(T) if self.causal else None
        if self.kind == "transformer":
            return self.model(other, target, tgt_mask=mask, src_is_causal=False,
                              tgt_is_causal=False, memory_is_causal=False)
        return self.model(target, other, tgt_mask=mask, tgt_is_causal=False,
                          memory_is_causal=False)


def inputs(batch_first: bool, batch: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    shape = (lambda n: (batch, n, C)) if batch_first else (lambda n: (n, batch, C))
    return [rng.standard_normal(shape(n)).astype(np.float32) for n in (T, S)]


def _tensors(xs, dtype=torch.float32):
    return tuple(torch.from_numpy(x).to(dtype) for x in xs)


def _sqnr(actual, expected) -> float:
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return sqnr_db(float(np.sum(expected ** 2)), float(np.sum((actual - expected) ** 2)))


def _partition(report) -> str:
    host = sorted({op.op for op in report.host})
    return (f"{len(report.offloaded)} of {len(report.ops)} in {len(report.functions)}"
            + (f" (host: {', '.join(host)})" if host else ""))


def _run(vm, xs):
    import tvm
    return vm["main"](*(tvm.runtime.tensor(np.ascontiguousarray(x)) for x in xs)).numpy()


def accuracy(model, mod, params, batch_first, batch) -> str:
    out = []
    for precision in ("fp32", "fp16"):
        vm = ac.virtual_machine(ac.build(mod, params=params, precision=precision))
        for seed in (2, 3):
            xs = inputs(batch_first, batch, seed)
            with torch.no_grad():
                reference = model(*_tensors(xs)).numpy()
                exact = copy.deepcopy(model).double()(*_tensors(xs, torch.float64)).numpy()
                half = copy.deepcopy(model).half()(*_tensors(xs, torch.float16)).float().numpy()
            ours = _run(vm, xs)
            if precision == "fp32":
                error = np.max(np.abs(ours - reference)) / np.max(np.abs(reference))
                out.append(f"fp32 {error:.1e}")
            else:
                out.append(f"fp16 {_sqnr(ours, exact):.1f} dB (.half() {_sqnr(half, exact):.1f})")
    return ", ".join(out)


def int8(model, mod, params) -> str:
    calibration = [tuple(inputs(True, 2, seed)) for seed in range(10, 18)]
    partitioned = ac.partition_for_accel(mod, params, precision="int8",
                                         calibration=calibration)
    vm = ac.virtual_machine(ac.build(partitioned))
    tests = [inputs(True, 2, seed) for seed in (2, 3)]
    with torch.no_grad():
        reference = np.concatenate([model(*_tensors(xs)).numpy() for xs in tests])
    ours = np.concatenate([_run(vm, xs) for xs in tests])
    with tempfile.TemporaryDirectory() as folder:
        path = export_onnx(model, _tensors(tests[0]), Path(folder) / "model.onnx")
        quantized, _ = ort_baseline.quantize_int8_as_ort_can(path, calibration, Path(folder))
        session = ort_baseline.session(quantized, threads=1)
        ort = np.concatenate([ort_baseline.run(session, xs) for xs in tests])
    return (f"int8 {_partition(ac.partition_report(partitioned))}: {_sqnr(ours, reference):.1f}"
            f" dB, ONNX Runtime's static int8 {_sqnr(ort, reference):.1f} dB")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["layer", "decoder", "transformer"])
    parser.add_argument("--onnx", action="store_true")
    parser.add_argument("--accuracy", action="store_true")
    parser.add_argument("--trained", action="store_true")
    parser.add_argument("--int8", action="store_true")
    args = parser.parse_args()
    cases = [(True, 2, True)] if args.int8 else [
        (batch_first, batch, causal) for batch_first in (True, False) for batch in (1, 2)
        for causal in (False, True) if batch == 2 or not causal]
    for kind in args.models:
        for batch_first, batch, causal in cases:
            model = Decoder(kind, batch_first, causal, args.trained or args.int8)
            xs = inputs(batch_first, batch)
            mod, params = from_pytorch(model, _tensors(xs))
            name = (f"{kind}, {'batch-first' if batch_first else 'sequence-first'}, batch "
                    f"{batch}{', causal' if causal else ''}")
            if args.int8:
                print(f"{name}: {int8(model, mod, params)}", flush=True)
                continue
            line = f"{name}: {_partition(ac.partition_report(mod, params))}"
            if args.onnx:
                with tempfile.TemporaryDirectory() as folder:
                    path = export_onnx(model, _tensors(xs), Path(folder) / "model.onnx")
                    line += f"; ONNX {_partition(ac.partition_report(*from_onnx(path)))}"
            if args.accuracy:
                line += f"; {accuracy(model, mod, params, batch_first, batch)}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
