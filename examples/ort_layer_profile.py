"""ONNX Runtime's time per node of one zoo model, as `accel-codegen bench` runs it (ort_fp32):
its profiler on warm runs, each node's minimum over the runs, labelled with its layer kind
(stem, depthwise sN @size, 1x1 sN @size, KxK sN @size: the input's spatial size), then the sum
per kind. Set beside `python examples/whole_network_time.py MODEL --layers` (the simulator's
time per layer) to see which layers lose; results: docs/notebook/whole_network_time_log.md.

    python examples/ort_layer_profile.py mobilenet_v2 [--threads 1] [--repeat 20]

The times are wall clock (ONNX Runtime's profiler): on a loaded machine the minimum over the
runs is the figure that holds.
"""
from __future__ import annotations

import argparse
import collections
import json
import tempfile

from accel_codegen.quantization import ort_baseline
from accel_codegen.tools.bench import load_model, onnx_file


def layer_kind(op: str, inputs: list, outputs: list) -> str:
    """stem, depthwise sN @size, KxK sN @size (size: the input's), from the shapes the profiler
    records: input, weight [K, C/groups, R, S], output."""
    if op not in ("Conv", "FusedConv") or len(inputs) < 2 or len(inputs[0]) != 4:
        return op
    channels, size = inputs[0][1], inputs[0][2]
    weight = inputs[1]
    stride = max(1, round(size / outputs[0][2])) if outputs and len(outputs[0]) == 4 else 1
    if channels == 3:
        return "stem"
    if weight[1] == 1 and channels > 1:
        return f"depthwise s{stride} @{size}"
    return f"{weight[2]}x{weight[3]} s{stride} @{size}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    model = load_model(args.model, None)
    directory = tempfile.mkdtemp(prefix="ort-layer-profile-")
    path = onnx_file(model, directory)
    sess = ort_baseline.session(path, args.threads, profile_prefix=f"{directory}/profile")
    feeds = ort_baseline.feeds([i.name for i in sess.get_inputs()], model.inputs)
    for _ in range(5 + args.repeat):  # the first 5 are warm-up: dropped below
        sess.run(None, feeds)
    events = json.load(open(sess.end_profiling()))
    times, kinds = collections.defaultdict(list), {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            name = e["name"][:-len("_kernel_time")]
            times[name].append(e["dur"] / 1e3)
            shapes = [[list(s.values())[0] for s in e["args"].get(key, [])]
                      for key in ("input_type_shape", "output_type_shape")]
            kinds[name] = layer_kind(e["args"].get("op_name", "?"), *shapes)
    print(f"{args.model}: ONNX Runtime {ort_baseline.version()}, {args.threads} thread(s), "
          f"minimum of {args.repeat} runs per node (ms)")
    per_kind = collections.defaultdict(float)
    for name, ts in times.items():
        best = min(ts[-args.repeat:])
        per_kind[kinds[name]] += best
        print(f"  {best:8.3f}  {kinds[name]:22s} {name[:60]}")
    print(f"  {sum(per_kind.values()):8.3f}  total")
    for kind, ms in per_kind.items():
        print(f"  {ms:8.3f}  {kind}")


if __name__ == "__main__":
    main()
