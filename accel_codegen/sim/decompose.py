"""Layer norm and softmax as chains of NVDLA engine passes (issue 29; no TVM here).

NVDLA has no layer-norm or softmax engine. Both become passes of the engines it has, over an
[N, C, H, W] surface whose channels C are the normalised axis (a transformer's tokens along W,
its channels as C):

- **Channel reductions** (a sum over C, a max over C). The PDP pools over H and W only, never
  across channels, so a max over C cannot be a pooling; it is a halving tree: at each level
  the SDP's element-wise unit takes the max of the lower and the upper half of the channels
  (odd counts: the halves overlap in one channel, which a max does not mind), ceil(log2 C)
  levels down to one channel. With one image each half is a contiguous block that the SDP
  reads where it lies (its input and its operand at two addresses: a view, no copy); with
  several, the BDMA first copies each half into a surface of its own. A sum is the same tree
  with the element-wise add (odd counts: the upper half is zero-padded by a BDMA copy), or
  (``reduce="conv"``) one 1x1 CONV with weights of ones and C output channels, which sums and
  broadcasts at once, or (``reduce="conv1"``) one 1x1 CONV of ones to one output channel,
  broadcast after as the tree's sum (what the compiler emits for an fp32 layer norm: the
  fewest cycles, docs/transformer_ops.md; the CONV engine is NVDLA's reduction across
  channels, its MAC cells summing C inputs per output). All are bit for bit the NumPy
  reference's: the tree's steps are SDP operations and copies, and the CONV sums in the
  library's fp32 order (csrc/conv/f32_order.h), which the reference follows
  (reference.conv2d_f32). The CONV forms cost fewer runs (docs/transformer_ops.md).
- **Broadcasts** of a one-channel result back to C channels: a 1x1 CONV with C ones as
  weights over one input channel. Each output is one product by 1, exact in every precision,
  so the broadcast is bit-exact; the SDP after it applies the per-channel scale and the
  element-wise op with the other operand in the same run.
- **rsqrt and reciprocal** through the SDP's LUT (accel.h: ACCEL_ACT_RSQRT / RECIPROCAL; in
  FP16 NVDLA's LE table in exponent mode), then in FP16 Newton steps on the SDP, because one
  LE entry per octave is only within 4.6 % (rsqrt) and 12.5 % (reciprocal):
  rsqrt y' = y (1.5 - 0.5 (v y) y) in three SDP passes, reciprocal y' = y (2 - s y) in two
  (errors square at each step: 2 steps for rsqrt, 3 for reciprocal reach below half's own
  rounding from the LE bound).

Layer norm (over C, eps the SDP's shift): sum tree of x; CONV broadcast + SDP (scale -1/C,
add x) = d = x - mean; SDP d * d; sum tree of d^2; SDP (scale 1/C, shift eps, rsqrt) = r;
[FP16: Newton]; CONV broadcast + SDP (scale gamma, mul d); SDP (shift beta).
Softmax (over C): max tree of x; CONV broadcast + SDP (scale -1, add x, exp) = e = exp(x -
max); sum tree of e; SDP reciprocal = r; [FP16: Newton]; CONV broadcast + SDP (mul e). FP16
(_softmax_fp16): e through softmax_exp's table, the sum a CONV of ones (fp32 accumulator),
1 / sum as its half r and the last Newton step's remainder r_lo, e r + e r_lo rounded once.
log_softmax (over C): softmax's max and e; sum of e, SDP log = l; SDP l + max on one
channel; CONV broadcast + SDP (scale -1, add x) = x - max - ln(sum).
softsign (element-wise): SDP (scale -1, max x) = |x|; SDP (shift 1, reciprocal) = r [FP16:
1 + |x| its own pass, then Newton]; SDP (mul x).
reciprocal of a floored value (element-wise): SDP (clip at the floor) = s; SDP
(reciprocal) = r [FP16: Newton on s].
The max is the true channel max (not a static bound): a static bound cannot keep exp(x - B)
finite and non-zero for logits of any range, and in FP16 the exp LUT overflows from 11.09.

INT8 (not built here): the reductions of squares, the variance and the LUT inputs of rsqrt
and reciprocal have a dynamic range no per-tensor int8 scale covers (a pole at 0 for both
functions), so an int8 build would keep those passes in FP16 and convert (Sdp convert) around
them; x - mean, the exp and the final products could run in int8.

:func:`run_passes` runs a decomposition on a Device, ``reference.run_decomposition`` in NumPy
(the same passes through ``reference.run_chain``), :func:`estimate_passes` prices every pass
with the cost model (``estimate_chain``).
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import AccelInvalidError
from .._accel_ffi import lib
from .device import Device, RunStats, estimate_chain
from .labels import pass_kind
from .ops import SHAPE_ONLY, Bdma, Conv, Op, Pool, Sdp, dtype_for

#: Newton steps after the LUT in FP16 (FP32's LUT functions are IEEE's: none needed).
NEWTON_FP16 = {"rsqrt": 2, "reciprocal": 3}
PRECISIONS = ("fp32", "fp16")
REDUCTIONS = ("tree", "conv", "conv1")
#: attention's softmax: the largest power-of-two divisor between the keys' sum and the input
#: of its reciprocal (the PDP's averages, scaled back by the rest beyond it): averages of
#: at least 2^-12 stay in FP16's reciprocal table, and 1 / average within 4096
MAX_COVERED = 4096
#: The most weights of the "conv" form's CONV of ones from C channels to C (a sum broadcast in
#: the pass that takes it: C^2 of them, 2 MiB in FP16 at C = 1024); a wider sum (a group norm
#: over a whole plane: C = 32768 for 32 channels of 32x32, a 2 GiB CONV) is a CONV to one
#: channel and a broadcast pass of ones after it, the same bits (the broadcast copies the
#: one channel's rounded value; the sum and its SDP are the same), linear in C.
MAX_SUM_BROADCAST_WEIGHTS = 1 << 20


def fp32_sums(shape) -> str:
    """The sums over C an fp32 layer norm, softmax or F.normalize over a surface of ``shape``
    takes (the compiler's choice): ``"conv1"``, each sum one CONV of ones to one channel, the fewest
    modelled cycles of the three forms (docs/transformer_ops.md, "Cost on nv_full"); but
    ``"tree"`` for [N > 1, C, 1, 1] rows, whose CONVs the library sums as a batch of fully
    connected rows through OpenBLAS, not in the reference's order."""
    n, _, h, w = shape
    return "tree" if n > 1 and h * w == 1 else "conv1"


def newton_steps(layer: str, act: str, precision: str, newton: Optional[int]) -> int:
    """The Newton steps after the LUT's ``act`` (rsqrt or reciprocal): ``newton``, or by
    default FP16's NEWTON_FP16 and none in fp32 (AccelInvalidError where negative)."""
    steps = newton if newton is not None else (NEWTON_FP16[act] if precision == "fp16" else 0)
    if steps < 0:
        raise AccelInvalidError(f"{layer}: newton = {newton!r} is negative")
    return steps


@dataclasses.dataclass(frozen=True)
class Pass:
    """One run: ``ops`` (a chain for Device.run) on tensor ``input``, writing ``output``; an
    SDP with an element-wise op reads tensor ``operand`` (its ``operand`` field is filled in
    when the pass runs). ``role`` names the step of the source layer ("ln.center", ...)."""

    role: str
    ops: Tuple[Op, ...]
    input: str
    output: str
    operand: Optional[str] = None
    #: a CONV whose weights are tensor ``weights`` (another pass's output or an input, read as
    #: [K, C, 1, 1] where it lies: attention's K and V); None: the CONV's own constants
    weights: Optional[str] = None
    #: the SDP's X unit operands read from tensors: (field, tensor) pairs, field one of
    #: ops.X_FIELDS (accel.h's accel_sdp_x; per-channel constants are the op's own arrays)
    units: Tuple[Tuple[str, str], ...] = ()

    def reads(self) -> Tuple[str, ...]:
        """The tensors the pass reads besides its input: the element-wise operand, the X
        units' operands, the computed weights."""
        names = [self.operand] + [t for _, t in self.units] + [self.weights]
        return tuple(n for n in names if n is not None)

    def bound(self, tensors: Optional[Dict[str, np.ndarray]]) -> List[Op]:
        """The chain with the element-wise operand and computed weights set (SHAPE_ONLY and
        shape-only weights for a cost estimate, ``tensors`` None)."""
        ops = list(self.ops)
        if self.weights is not None and tensors is not None:
            ops = [dataclasses.replace(op, weights=np.ascontiguousarray(
                tensors[self.weights]).reshape(op.weight_shape), weight_shape=None)
                if isinstance(op, Conv) else op for op in ops]
        if self.units:
            values = {field: tensors[name] if tensors is not None else SHAPE_ONLY
                      for field, name in self.units}
            ops = [dataclasses.replace(op, **values) if isinstance(op, Sdp) else op
                   for op in ops]
        if self.operand is None:
            return ops
        value = tensors[self.operand] if tensors is not None else SHAPE_ONLY
        return [dataclasses.replace(op, operand=value) if isinstance(op, Sdp) and op.ew_op
                else op for op in ops]


@dataclasses.dataclass(frozen=True)
class Decomposition:
    """The passes of one source layer, in order, from tensor ``"x"`` to ``output``, with the
    shape of every tensor they make."""

    layer: str
    precision: str
    passes: Tuple[Pass, ...]
    shapes: Dict[str, Tuple[int, int, int, int]]
    output: str
    #: tensors that are a channel range of another one, read as another shape of the same
    #: bytes: name -> (tensor, first channel, channels, shape). A contiguous block of the
    #: tensor (one image, or every channel): NVDLA reads it at its address, no copy; a pass
    #: may read it, read it as its weights, or write it.
    views: Dict[str, Tuple[str, int, int, Tuple[int, int, int, int]]] = dataclasses.field(
        default_factory=dict)
    #: the tensors the passes read besides "x" (attention's "k" and "v")
    inputs: Tuple[str, ...] = ()
    #: tensors that several BDMA passes write parts of (attention's heads into its output):
    #: zeros before the first
    into: Tuple[str, ...] = ()
    #: constant tensors the passes read (attention's bias, in the precision's dtype)
    constants: Dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        # a role several passes share (Newton's steps, attention's PDP windows) is numbered
        # in order from 1, so that each run's label (profile, trace, estimate) says its pass
        counts = collections.Counter(p.role for p in self.passes)
        seen: Dict[str, int] = collections.Counter()
        passes = []
        for p in self.passes:
            if counts[p.role] > 1:
                seen[p.role] += 1
                p = dataclasses.replace(p, role=f"{p.role}{seen[p.role]}")
            passes.append(p)
        object.__setattr__(self, "passes", tuple(passes))

    def tensor(self, tensors: Dict[str, np.ndarray], name: str) -> np.ndarray:
        """Tensor ``name`` of ``tensors``; a view: the channel range of its tensor, read as the
        view's shape (the same bytes)."""
        if name in self.views:
            base, first, count, shape = self.views[name]
            return self.tensor(tensors, base)[:, first:first + count].reshape(shape)
        return tensors[name]

    def run(self, run_pass, x: np.ndarray, inputs: Optional[Dict[str, np.ndarray]] = None
            ) -> Dict[str, np.ndarray]:
        """Every tensor the passes make, ``run_pass(pass, ops, input, out)`` running one pass
        (``out``: the array a view's pass writes into, else None) and returning its output."""
        inputs = dict(inputs or {})
        missing = set(self.inputs) - set(inputs)
        if missing:
            raise AccelInvalidError(f"{self.layer}: the passes read {sorted(missing)}, not given")
        tensors = {"x": x, **inputs, **self.constants}
        for name in self.inputs:
            if tensors[name].shape != self.shapes[name]:
                raise AccelInvalidError(f"{self.layer}: {name} has shape {tensors[name].shape}, "
                                        f"the passes were built for {self.shapes[name]}")
        for base in set(self.into) | ({v[0] for v in self.views.values()} - set(tensors) -
                                      {p.output for p in self.passes}):
            tensors[base] = np.zeros(self.shapes[base], x.dtype)  # written in parts
        for p in self.passes:
            out = self.tensor(tensors, p.output) if p.output in self.views or \
                p.output in self.into else None
            y = run_pass(p, p.bound({**tensors, **{v: self.tensor(tensors, v)
                                                   for v in p.reads() if v in self.views}}),
                         self.tensor(tensors, p.input), out)
            if out is None:
                tensors[p.output] = y
            elif y is not out and isinstance(p.ops[0], Bdma):  # the channels it copies only
                copy = p.ops[0]
                written = copy.dst_offset + copy.dst_stride * np.arange(copy.channels)
                out[:, written] = y[:, written]
            elif y is not out:
                out[...] = y
        return tensors


class _Builder:
    def __init__(self, layer: str, shape, precision: str, reduce: str):
        shape = tuple(int(v) for v in shape)
        if len(shape) != 4 or min(shape) < 1:
            raise AccelInvalidError(f"{layer}: shape = {shape!r} is not a positive [N, C, H, W]")
        if precision not in PRECISIONS:
            raise AccelInvalidError(f"{layer}: precision = {precision!r} is not one of "
                                    f"{list(PRECISIONS)} (int8 keeps these passes in fp16)")
        if reduce not in REDUCTIONS:
            raise AccelInvalidError(f"{layer}: reduce = {reduce!r} is not one of "
                                    f"{list(REDUCTIONS)}")
        self.layer, self.precision, self.reduce = layer, precision, reduce
        self.dtype = dtype_for(precision)
        self.n, self.c, self.h, self.w = shape
        self.shapes = {"x": shape}
        self.views: Dict[str, Tuple[str, int, int, Tuple[int, int, int, int]]] = {}
        self.passes: List[Pass] = []
        self.count = 0

    def values(self, v, channels: int) -> np.ndarray:
        return np.broadcast_to(np.asarray(v, np.float32), (channels,)).astype(self.dtype)

    def add(self, role, ops, src, channels, operand=None, units=(), spatial=None) -> str:
        """A pass of ``ops`` on ``src`` to a new tensor of ``channels``, of ``src``'s H and W
        (``spatial``: (H, W) of its own, a pooling's)."""
        self.count += 1
        name = f"t{self.count}"
        self.shapes[name] = (self.n, channels) + tuple(spatial or self.shapes[src][2:])
        self.passes.append(Pass(f"{self.layer}.{role}", tuple(ops), src, name, operand,
                                units=tuple(units)))
        return name

    def channels(self, name) -> int:
        return self.shapes[name][1]

    def view(self, src: str, first: int, count: int) -> str:
        """Channels [first, first + count) of ``src`` read where they lie (one image: a
        contiguous block, which the SDP's DMA reads at its address)."""
        self.count += 1
        name = f"t{self.count}"
        shape = (self.n, count) + tuple(self.shapes[src][2:])
        self.views[name] = (src, first, count, shape)
        self.shapes[name] = shape
        return name

    def tree(self, src: str, op: str, role: str) -> str:
        """Max or sum over the channels of ``src`` down to one channel (module docstring).
        With one image the SDP reads both halves where they lie (views: one run a level);
        a BDMA copy remains only for a sum's odd upper half, which is zero-padded to the
        lower's count, and with several images (a channel range is then not one block)."""
        p = self.precision
        level = 0
        while self.channels(src) > 1:
            c = self.channels(src)
            level += 1  # in each role: its passes say their level (``softmax.max.max2``)
            half = (c + 1) // 2
            if self.n == 1:
                lo = self.view(src, 0, half)
            else:
                lo = self.add(f"{role}.lo{level}", [Bdma(half, dst_channels=half, precision=p)], src,
                              half)
            if op == "max":  # overlapping halves: a channel twice does not change a max
                hi_op = Bdma(half, src_offset=c - half, dst_channels=half, precision=p)
            else:  # the upper half zero-padded to the lower's count
                hi_op = Bdma(c - half, src_offset=half, dst_channels=half, precision=p)
            if self.n == 1 and (op == "max" or c % 2 == 0):
                hi = self.view(src, c - half, half)
            else:
                hi = self.add(f"{role}.hi{level}", [hi_op], src, half)
            src = self.add(f"{role}.{op}{level}", [Sdp(ew_op=op, precision=p)], lo, half,
                           operand=hi)
        return src

    def ones(self, channels_in: int, channels_out: Optional[int] = None) -> Conv:
        return Conv(np.ones((channels_out or self.c, channels_in, 1, 1), self.dtype),
                    precision=self.precision)

    def broadcast(self, src: str, role: str, operand=None, **sdp) -> str:
        """A one-channel tensor to C channels, with an SDP after (a C-channel one: the SDP
        alone)."""
        sdp_op = Sdp(precision=self.precision, **sdp)
        if self.channels(src) == self.c:
            return self.add(role, [sdp_op], src, self.c, operand)
        return self.add(role, [self.ones(1), sdp_op], src, self.c, operand)

    def reduce_sum(self, src: str, role: str, broadcast: bool = False, **sdp) -> str:
        """The sum over C, then an SDP with ``sdp`` (none if empty, in a tree): a tree (one
        channel) or a CONV of ones in the same run as the SDP, with C output channels (the
        sum broadcast) if ``broadcast`` and the form is "conv", else one (LUT and Newton
        passes on one channel; "conv1" always)."""
        if self.reduce == "conv" and broadcast:
            return self.sum_broadcast(src, role, lambda k: Sdp(precision=self.precision, **{
                name: v[:k] if isinstance(v, np.ndarray) else v for name, v in sdp.items()}))
        if self.reduce in ("conv", "conv1"):
            return self.add(role, [self.ones(self.c, 1), Sdp(precision=self.precision, **sdp)],
                            src, 1)
        total = self.tree(src, "add", role)
        if sdp:
            total = self.add(f"{role}.scale", [Sdp(precision=self.precision, **sdp)], total, 1)
        return total

    def sum_broadcast(self, src: str, role: str, sdp) -> str:
        """The sum over C on every channel, through ``sdp(k)`` (the SDP of k channels): one
        CONV of ones C -> C, or beyond MAX_SUM_BROADCAST_WEIGHTS a CONV to one channel and a
        broadcast pass (the same bits)."""
        c = self.c
        if c * c <= MAX_SUM_BROADCAST_WEIGHTS:
            return self.add(role, [self.ones(c, c), sdp(c)], src, c)
        total = self.add(f"{role}.sum", [self.ones(c, 1), sdp(1)], src, 1)
        return self.add(role, [self.ones(1), Sdp(precision=self.precision)], total, c)

    def lut(self, src: str, act: str, newton: Optional[int]) -> str:
        """act(src) through the LUT, then Newton steps (default: FP16's NEWTON_FP16)."""
        steps = newton_steps(self.layer, act, self.precision, newton)
        k = self.channels(src)
        p = self.precision
        y = self.add(act, [Sdp(act=act, precision=p)], src, k)
        for _ in range(steps):
            if act == "rsqrt":  # y (1.5 - 0.5 (v y) y): v y first, as y^2 overflows a half
                #                     for v below 1 / 65504 (a constant token: v = eps)
                vy = self.add("newton.times_v", [Sdp(ew_op="mul", precision=p)], src, k, y)
                vy = self.add("newton.times_y", [Sdp(ew_op="mul", precision=p)], vy, k, y)
                y = self.add("newton.step", [Sdp(scale=self.values(-0.5, k),
                                                 shift=self.values(1.5, k), ew_op="mul",
                                                 precision=p)], vy, k, y)
            else:  # y (2 - s y)
                sy = self.add("newton.times_s", [Sdp(ew_op="mul", precision=p)], src, k, y)
                y = self.add("newton.step", [Sdp(scale=self.values(-1.0, k),
                                                 shift=self.values(2.0, k), ew_op="mul",
                                                 precision=p)], sy, k, y)
        return y

    def lut_x(self, v: str, act: str, newton: Optional[int]) -> str:
        """act(v) (rsqrt or reciprocal) on ``v``'s channels through the LUT, then each Newton
        step one pass through the SDP's X units, in fp32 inside it, rounded once: rsqrt y (1.5
        - 0.5 v y y) (v y y as (v y) y: y^2 overflows a half where v < 1 / 65504),
        reciprocal y (2 - v y) (default steps: FP16's NEWTON_FP16, none in fp32)."""
        p, k = self.precision, self.channels(v)
        y = self.add(act, [Sdp(act=act, precision=p)], v, k)
        for _ in range(newton_steps(self.layer, act, p, newton)):
            if act == "rsqrt":
                y = self.add("newton", [Sdp(scale=self.values(-0.5, k),
                                            shift=self.values(1.5, k), ew_op="mul",
                                            precision=p)], v, k, y,
                             units=[("x1_mul", y), ("x2_mul", y)])
            else:
                y = self.add("newton", [Sdp(scale=self.values(-1.0, k), shift=self.values(2.0, k),
                                            ew_op="mul", precision=p)], v, k, y,
                             units=[("x1_mul", y)])
        return y

    def rsqrt_halves(self, v: str, newton: Optional[int]) -> Tuple[str, str]:
        """FP16's 1 / sqrt of the one-channel ``v`` on every channel, as its half r (the LUT,
        then each Newton step y (1.5 - 0.5 v y y) one pass, v y y in fp32 inside it through
        the SDP's X units) and its remainder r_lo = r (1 - v r^2) / 2 (a first-order Newton
        correction), each broadcast to C: a last pass x r + x r_lo in fp32 rounds once."""
        p = self.precision
        r = self.lut_x(v, "rsqrt", newton)
        r_lo = self.add("rsqrt.low", [Sdp(scale=self.values(-0.5, 1), shift=self.values(0.5, 1),
                                          ew_op="mul", precision=p)], v, 1, r,
                        units=[("x1_mul", r), ("x2_mul", r)])
        return (self.add("rsqrt.broadcast", [self.ones(1), Sdp(precision=p)], r, self.c),
                self.add("rsqrt.low.broadcast", [self.ones(1), Sdp(precision=p)], r_lo, self.c))

    def done(self, output: str) -> Decomposition:
        return Decomposition(self.layer, self.precision, tuple(self.passes), dict(self.shapes),
                             output, views=dict(self.views))


def layer_norm_passes(shape, gamma=None, beta=None, eps: float = 1e-5,
                      precision: str = "fp32", reduce: str = "tree",
                      newton: Optional[int] = None, act: Optional[str] = None) -> Decomposition:
    """Layer norm over the channels of an [N, C, H, W] surface:
    ``(x - mean) / sqrt(var + eps) * gamma[c] + beta[c]`` (biased variance, as PyTorch's), as
    engine passes (module docstring). ``gamma`` / ``beta``: [C] or None (1 / 0: no pass).
    ``act``: an activation of the result (the seed's ReLU), in the last pass's SDP."""
    b = _Builder("layer_norm", shape, precision, reduce)
    c = b.c
    if not np.isfinite(eps) or eps < 0:
        raise AccelInvalidError(f"layer_norm: eps = {eps!r} is not a finite value >= 0")
    for name, v in (("gamma", gamma), ("beta", beta)):
        if v is not None and np.shape(v) != (c,):
            raise AccelInvalidError(f"layer_norm: {name} has shape {np.shape(v)}, not ({c},)")
    if precision == "fp16" and reduce == "conv":
        return _layer_norm_fp16(b, gamma, beta, eps, newton, act)
    inv_c = np.float32(1.0) / np.float32(c)

    def center(src, role):
        if reduce == "conv":
            return b.add(role, [b.ones(c), Sdp(scale=b.values(-inv_c, c), ew_op="add",
                                                precision=precision)], src, c, src)
        total = b.tree(src, "add", f"{role}.mean") if reduce == "tree" else \
            b.reduce_sum(src, f"{role}.mean")
        return b.broadcast(total, role, src, scale=b.values(-inv_c, c), ew_op="add")

    d = center("x", "center")
    if precision == "fp16" and c & (c - 1):
        # FP16's SDP scale is a half: 1/C rounds (2.4e-4 relative for C = 48 or 192), and
        # x - mean keeps mean * that, large against the spread where |mean| >> std. A second
        # centring of d (whose mean is now that residue) leaves its square.
        d = center(d, "recenter")
    sq = b.add("square", [Sdp(ew_op="mul", precision=precision)], d, c, d)
    if precision == "fp32" and (newton or 0) == 0:  # rsqrt in the variance's own SDP
        k = c if reduce == "conv" else 1  # the CONV's sum broadcast: no broadcast pass after
        r = b.reduce_sum(sq, "var", broadcast=True, scale=b.values(inv_c, k),
                         shift=b.values(eps, k), act="rsqrt")
    else:  # the LUT and the Newton steps on one channel, broadcast after
        v = b.reduce_sum(sq, "var", scale=b.values(inv_c, 1), shift=b.values(eps, 1))
        r = b.lut(v, "rsqrt", newton)
    scale = None if gamma is None else np.asarray(gamma, np.float32).astype(b.dtype)
    y = b.broadcast(r, "normalise", d, scale=scale, ew_op="mul",
                    act=None if beta is not None else act)
    if beta is not None:
        y = b.add("shift", [Sdp(shift=np.asarray(beta, np.float32).astype(b.dtype), act=act,
                                precision=precision)], y, c)
    return b.done(y)


def l2_normalize_passes(shape, eps: float = 1e-12, precision: str = "fp32",
                        newton: Optional[int] = None, reduce: str = "tree") -> Decomposition:
    """L2 normalisation over the channels of an [N, C, H, W] surface, torch's
    ``F.normalize(x, dim=channels)``: ``x / max(||x||_2, eps)``, as engine passes: SDP x * x,
    the sum tree over C, SDP (shift eps^2, rsqrt through the LUT; FP16: then the Newton
    steps), CONV broadcast + SDP (mul x). Every pass is an SDP operation, a copy or a
    broadcast by ones, so the NumPy reference gives the same bits in fp32 and fp16.
    ``reduce`` is the sum's form, as a layer norm's (module docstring; the compiler's fp32
    choice is ``fp32_sums``: one CONV of ones to one channel, its SDP the shift and rsqrt).

    In FP16 the sum's rsqrt is the LUT and two Newton steps, each one pass through the SDP's
    X units, kept as a half and its remainder, and the last pass x r + x r_lo is in fp32
    inside, rounded once (below).

    ``eps`` enters as eps^2 added to the sum of squares (the SDP's shift) instead of the max:
    1 / sqrt(s + eps^2) equals 1 / max(sqrt(s), eps) where s >= 2^24 eps^2 (fp32 adds
    nothing to s there: every norm above 4096 eps, 4e-9 for torch's default 1e-12), and an x
    of zeros gives zeros either way. In FP16 eps^2 < 2^-24 is 0 as a half, and a token of
    zeros gives 0 * inf = NaN, as PyTorch's ``.half()`` F.normalize does (its eps is 0 in
    half too)."""
    b = _Builder("l2_normalize", shape, precision, reduce)
    if not np.isfinite(eps) or eps < 0:
        raise AccelInvalidError(f"l2_normalize: eps = {eps!r} is not a finite value >= 0")
    c = b.c
    sq = b.add("square", [Sdp(ew_op="mul", precision=precision)], "x", c, "x")
    shift = b.values(float(eps) ** 2, 1)
    if precision == "fp32" and (newton or 0) == 0:  # rsqrt in the sum's own SDP pass
        r = b.reduce_sum(sq, "sum", shift=shift, act="rsqrt")
        return b.done(b.broadcast(r, "normalise", "x", ew_op="mul"))
    # FP16: the LUT, then each Newton step y (1.5 - 0.5 v y y) one pass, v y y in fp32 inside
    # it through the SDP's X units; 1 / sqrt(v) kept as the half r and its remainder r_lo =
    # r (1 - v r^2) / 2 (a first-order Newton correction, in fp32 inside its pass), and the
    # last pass x r + x r_lo in fp32, rounded once (as the fp16 layer norm's passes): r
    # rounded to half alone costs about 1.5 dB against PyTorch's half F.normalize
    p = precision
    v = b.reduce_sum(sq, "sum", shift=shift)
    rb, rlb = b.rsqrt_halves(v, newton)
    low = b.add("normalise.low", [Sdp(ew_op="mul", precision=p)], "x", c, rlb)
    return b.done(b.add("normalise", [Sdp(ew_op="add", precision=p)], "x", c, low,
                        units=[("x1_mul", rb)]))


def rms_norm_passes(shape, gamma=None, eps: float = 1e-6, precision: str = "fp32",
                    reduce: str = "tree", newton: Optional[int] = None,
                    act: Optional[str] = None) -> Decomposition:
    """RMS norm over the channels of an [N, C, H, W] surface (T5's and LLaMA's, torch's
    nn.RMSNorm): ``x / sqrt(mean(x^2) + eps) * gamma[c]``, as engine passes: SDP x * x, the
    sum over C (scaled by 1/C and shifted by eps in its SDP), rsqrt (the LUT; FP16: then the
    Newton steps), the broadcast of the one channel and SDP x * gamma * r. A layer norm's
    passes without the centring; FP16 as its (the mean of squares a CONV of weights w and an
    SDP scale s whose product is 1 / C, mean_factors; 1 / sqrt kept as the half r and its
    remainder r_lo, the last pass x g r + x g r_lo in fp32 inside, rounded once)."""
    b = _Builder("rms_norm", shape, precision, reduce)
    c, p = b.c, precision
    if not np.isfinite(eps) or eps < 0:
        raise AccelInvalidError(f"rms_norm: eps = {eps!r} is not a finite value >= 0")
    if gamma is not None and np.shape(gamma) != (c,):
        raise AccelInvalidError(f"rms_norm: gamma has shape {np.shape(gamma)}, not ({c},)")
    scale = None if gamma is None else np.asarray(gamma, np.float32).astype(b.dtype)
    sq = b.add("square", [Sdp(ew_op="mul", precision=p)], "x", c, "x")
    if p == "fp32":
        inv_c = np.float32(1.0) / np.float32(c)
        if (newton or 0) == 0:  # rsqrt in the mean's own SDP
            r = b.reduce_sum(sq, "mean", scale=b.values(inv_c, 1), shift=b.values(eps, 1),
                             act="rsqrt")
        else:
            r = b.lut(b.reduce_sum(sq, "mean", scale=b.values(inv_c, 1),
                                   shift=b.values(eps, 1)), "rsqrt", newton)
        return b.done(b.broadcast(r, "normalise", "x", scale=scale, ew_op="mul", act=act))
    w, s = mean_factors(c)
    weights = np.full((1, c, 1, 1), w, np.float16)
    v = b.add("mean", [Conv(weights, precision=p), Sdp(scale=b.values(s, 1),
                                                       shift=b.values(eps, 1), precision=p)],
              sq, 1)                                                    # mean + eps, in half
    rb, rlb = b.rsqrt_halves(v, newton)
    low = b.add("normalise.low", [Sdp(scale=scale, precision=p)], "x", c,
                units=[("x2_mul", rlb)])
    return b.done(b.add("normalise", [Sdp(scale=scale, ew_op="add", act=act, precision=p)],
                        "x", c, low, units=[("x2_mul", rb)]))


#: GRN's squares are clipped from below to this (each precision's): a channel of zeros then
#: has a positive mean of squares, whose 1 / sqrt is finite, and its norm m / sqrt(m) is 0
#: as ||0|| (FP16's rsqrt Newton steps overflow to inf from v = 0: 0 * inf is NaN). The
#: bound is above the smallest of each format by at least the PDP's padding (the windows
#: cover at most 4 times H W: the average of squares at the bound stays a normal fp32 and
#: a positive half), and changes a square by at most itself: 2^-120 (|x| < 2^-60) in fp32,
#: 2^-22 in FP16 (|x| < 2^-11, where x * x as a half is itself a subnormal or 0).
GRN_SQUARE_FLOOR = {"fp32": 2.0 ** -120, "fp16": 2.0 ** -22}


def grn_passes(shape, gamma=None, beta=None, eps: float = 1e-6, precision: str = "fp32",
               newton: Optional[int] = None) -> Decomposition:
    """ConvNeXt-V2's global response normalisation over an [N, C, H, W] surface (its
    channels-last [N, H, W, C] read as NVDLA's feature surface: the same bytes),
    ``gamma[c] (x nx) + beta[c] + x``, nx = ||x_c|| / (mean_c ||x_c|| + eps), ||x_c|| the L2
    norm of channel c over H and W, as engine passes:

    1. SDP x * x (clipped from below to GRN_SQUARE_FLOOR, the activation's clip);
    2. PDP average over H and W: passes of windows of at most ACCEL_MAX_POOL_KERNEL per side
       whose product P covers H W (padded with zeros where no exact factor fits, counted),
       giving m = sum(x^2) / P;
    3. SDP 1 / sqrt(m) through the LUT (FP16: then the Newton steps, one pass each through
       the X units), then SDP m r: g = sqrt(m) = ||x_c|| / sqrt(P);
    4. the mean over C, + eps / sqrt(P), then 1 / it through the LUT (fp32: a 1x1 CONV of
       ones to one channel, its SDP scale 1/C, shift and LUT in the same run; FP16: a CONV of
       weights w and an SDP scale s whose product is 1/C, ``mean_factors``, then the LUT and
       Newton steps): ri = 1 / (mean g + eps / sqrt(P)), so that g ri = nx exactly in reals
       (sqrt(P) cancels);
    5. CONV of ones from one channel to C (the broadcast of ri) + SDP (X unit multiplier g,
       scale gamma): f = gamma nx, one value per image and channel;
    6. SDP on x: x f + beta + x, f through the X unit's per-channel multiplier and the
       residual x the element-wise adder's operand (one image; with several, x f through the
       element-wise multiplier's per-channel operand first, then a pass + beta + x). The
       residual stays out of f: f = 1 + gamma nx rounded to a half lost 2.7 dB in FP16
       (docs/transformer_ops.md). Steps 3 to 5 run on
    [N, C, 1, 1] tensors: a few hundred values. Every pass is an engine op of the NumPy
    reference, so it gives the same bits (``reference.run_decomposition``). FP16: x * x must be
    a half (|x| < 256; beyond, the clip saturates it at 65504), as PyTorch's ``.half()`` GRN
    sums its squares in fp32 but returns the norm as a half too."""
    b = _Builder("grn", shape, precision, "conv1")
    n, c, h, w = b.n, b.c, b.h, b.w
    p = precision
    if not np.isfinite(eps) or eps < 0:
        raise AccelInvalidError(f"grn: eps = {eps!r} is not a finite value >= 0")
    for name, v in (("gamma", gamma), ("beta", beta)):
        if v is not None and np.shape(v) != (c,):
            raise AccelInvalidError(f"grn: {name} has shape {np.shape(v)}, not ({c},)")
    top = float(np.finfo(b.dtype).max)
    q = b.add("square", [Sdp(ew_op="mul", act="clip", clip=(GRN_SQUARE_FLOOR[p], top),
                             precision=p)], "x", c, "x")
    rows, cols = _windows(h, lib.ACCEL_MAX_POOL_KERNEL), _windows(w, lib.ACCEL_MAX_POOL_KERNEL)
    steps = max(len(rows), len(cols))
    rows += [(1, 0)] * (steps - len(rows))
    cols += [(1, 0)] * (steps - len(cols))
    m, size = q, (h, w)
    for (kh, ph), (kw, pw) in zip(rows, cols):
        size = ((size[0] + ph) // kh, (size[1] + pw) // kw)
        m = b.add("spatial_mean", [Pool("avg", (kh, kw), (kh, kw), (0, 0, ph, pw),
                                count_include_pad=True, precision=p)], m, c, spatial=size)
    covered = float(np.prod([k for k, _ in rows]) * np.prod([k for k, _ in cols]))
    r = b.lut_x(m, "rsqrt", newton)
    g = b.add("norm", [Sdp(ew_op="mul", precision=p)], m, c, r)
    shift = b.values(eps / np.sqrt(covered), 1)
    if p == "fp32":
        inv_c = np.float32(1.0) / np.float32(c)
        sums = fp32_sums((n, c, 1, 1))
        if sums == "conv1" and (newton or 0) == 0:  # the LUT in the sum's own SDP
            ri = b.add("channel_mean", [b.ones(c, 1), Sdp(scale=b.values(inv_c, 1), shift=shift,
                                                   act="reciprocal", precision=p)], g, 1)
        else:  # [N > 1, C, 1, 1] rows: the tree (fp32_sums), then the scale and the LUT
            total = b.tree(g, "add", "channel_mean")
            ri = b.lut_x(b.add("channel_mean.scale", [Sdp(scale=b.values(inv_c, 1), shift=shift,
                                                  precision=p)], total, 1),
                         "reciprocal", newton)
    else:
        wt, sc = mean_factors(c)
        mean = b.add("channel_mean", [Conv(np.full((1, c, 1, 1), wt, np.float16), precision=p),
                              Sdp(scale=b.values(sc, 1), shift=shift, precision=p)], g, 1)
        ri = b.lut_x(mean, "reciprocal", newton)
    scale = None if gamma is None else np.asarray(gamma, np.float32).astype(b.dtype)
    f = b.add("factor", [b.ones(1), Sdp(scale=scale, precision=p)], ri, c,
              units=[("x1_mul", g)])
    shift_beta = None if beta is None else np.asarray(beta, np.float32).astype(b.dtype)
    if n == 1:  # x f + beta + x in fp32 inside the pass, rounded once
        return b.done(b.add("output", [Sdp(shift=shift_beta, ew_op="add",
                                            x_per_channel=("x1_mul",), precision=p)],
                            "x", c, "x", units=[("x1_mul", f)]))
    # several images: the X units' per-channel operands are [C], one image's
    y = b.add("scale", [Sdp(ew_op="mul", ew_per_channel=True, precision=p)], "x", c, f)
    return b.done(b.add("output", [Sdp(shift=shift_beta, ew_op="add", precision=p)],
                        y, c, "x"))


def mean_factors(c: int) -> Tuple[np.float16, np.float16]:
    """Two halves w (in [0.5, 1]) and s whose product is 1 / c within a few 2^-24 (a half
    1 / c alone is within 2^-12 only where c is no power of two: 2.4e-4 for c = 192), so a CONV
    of weights w and an SDP scale s average exactly enough in FP16."""
    ws = np.arange(0x3800, 0x3C01, dtype=np.uint16).view(np.float16)  # every half in [0.5, 1]
    ss = (1.0 / (c * ws.astype(np.float64))).astype(np.float16)
    errors = np.abs(ws.astype(np.float64) * ss.astype(np.float64) * c - 1.0)
    errors[~np.isfinite(errors) | (ss == 0)] = np.inf
    best = int(np.argmin(errors))
    return ws[best], ss[best]


def _layer_norm_fp16(b: "_Builder", gamma, beta, eps: float, newton: Optional[int],
                     act: Optional[str]) -> Decomposition:
    """The FP16 layer norm with fp32 inside its passes (layer_norm_passes' docstring)."""
    c, p = b.c, "fp16"
    h = np.float16

    def sum_broadcast(src, role):  # -mean of src on every channel: CONV of ones, SDP -1/C
        return b.sum_broadcast(src, role,
                               lambda k: Sdp(scale=b.values(-1.0 / c, k), precision=p))

    a1 = sum_broadcast("x", "mean")                                      # -M, M in half
    d = b.add("center", [Sdp(ew_op="add", precision=p)], "x", c, a1)      # x - M, in half
    a2 = sum_broadcast(d, "remean")                                     # -(mean of x - M)
    sq = b.add("square", [Sdp(precision=p)], d, c,                      # (d + a2) d
               units=[("x1_alu", a2), ("x1_mul", d)])
    w, s = mean_factors(c)
    weights = np.full((1, c, 1, 1), w, h)
    v = b.add("var", [Conv(weights, precision=p), Sdp(scale=b.values(s, 1),
                                                      shift=b.values(eps, 1), precision=p)],
              sq, 1)                                                    # var + eps, in half
    r = b.lut_x(v, "rsqrt", newton)  # y (1.5 - 0.5 v y y), v y y in fp32: one pass a step
    # the rest of 1 / sqrt(var + eps) beyond the half r: r (1 - (var + eps) r^2) / 2 from the
    # sum's fp32 accumulator (s (S + eps / s) = var + eps), a first-order Newton correction
    r_lo = b.add("rsqrt.low", [Conv(weights, precision=p), Sdp(
        x1_alu=np.array([eps / float(s)], np.float32).astype(h), x_per_channel=("x1_alu",),
        scale=b.values(-0.5 * float(s), 1), shift=b.values(0.5, 1), ew_op="mul",
        precision=p)], sq, 1, r, units=[("x1_mul", r), ("x2_mul", r)])
    rb = b.add("rsqrt.broadcast", [b.ones(1), Sdp(precision=p)], r, c)
    rlb = b.add("rsqrt.low.broadcast", [b.ones(1), Sdp(precision=p)], r_lo, c)
    scale = None if gamma is None else np.asarray(gamma, np.float32).astype(h)
    shift = None if beta is None else np.asarray(beta, np.float32).astype(h)
    low = b.add("normalise.low", [Sdp(scale=scale, precision=p)], "x", c,
                units=[("x1_alu", a1), ("x2_alu", a2), ("x2_mul", rlb)])
    y = b.add("normalise", [Sdp(scale=scale, shift=shift, ew_op="add", act=act, precision=p)],
              "x", c, low, units=[("x1_alu", a1), ("x2_alu", a2), ("x2_mul", rb)])
    return b.done(y)


def softmax_passes(shape, precision: str = "fp32", reduce: str = "tree",
                   newton: Optional[int] = None) -> Decomposition:
    """Softmax over the channels of an [N, C, H, W] surface, ``exp(x - max) / sum``, as
    engine passes (module docstring; the max is always the BDMA + SDP tree). FP16:
    :func:`_softmax_fp16`."""
    b = _Builder("softmax", shape, precision, reduce)
    c = b.c
    m = b.tree("x", "max", "max")
    if precision == "fp16":
        return _softmax_fp16(b, m, newton)
    e = b.broadcast(m, "exp", "x", scale=b.values(-1.0, c), ew_op="add", act="exp")
    if (newton or 0) == 0 and reduce == "conv":
        r = b.reduce_sum(e, "sum", broadcast=True, act="reciprocal")
    else:
        r = b.lut(b.reduce_sum(e, "sum"), "reciprocal", newton)
    return b.done(b.broadcast(r, "normalise", e, ew_op="mul"))


def _softmax_fp16(b: "_Builder", m: str, newton: Optional[int]) -> Decomposition:
    """The FP16 softmax after the max ``m``, as attention's core normalises (issue 29: the
    probabilities of ``need_weights=True`` were 2.8 dB below ``.half()``'s):

    - e = exp(x - max) through softmax_exp's table (LO [-8, 0) at 1/32, accel.h), where t - max
      <= 0 lies: exp's own table (LO [-5, 11) at 1/16, its LE's 1/2 steps below -5) cost 5 to
      15 dB of the softmax's SQNR against float64 (docs/transformer_ops.md, fp16 softmax);
    - the sum S of e: ``reduce`` "conv" or "conv1", one CONV of ones to one channel, whose
      fp32 accumulator is rounded once to the half v (the tree, "tree": ceil(log2 C) halves);
    - r = 1 / v through the LUT, then all Newton steps but the last, each one pass through the
      SDP's X units (s r in fp32 inside it, rounded once: ``_Builder.lut_x``);
    - the last step as r's remainder r_lo = r (1 - S r), S read again from the CONV's fp32
      accumulator in the same run (tree: v), so that r + r_lo is 1 / S within a few 2^-22;
    - e r_lo broadcast (a CONV of ones from one channel) and rounded to half (2^-11 of it is
      2^-22 of the output), then e r + that in fp32 inside the last run (r broadcast by its
      CONV, e through the X1 multiplier), rounded once.

    So the output rounds once after e: 1 / sum rounded to half, the sum's halves and the
    Newton steps' products in half cost 2.8 dB before. What stays is e's table and its
    rounding to half (the P V CONV of attention reads it as halves too; here the last run's
    LUT would have to come after the product). ``newton`` 0: r from the LUT alone, times e."""
    c, p = b.c, "fp16"
    e = b.broadcast(m, "exp", "x", scale=b.values(-1.0, c), ew_op="add", act="softmax_exp")
    steps = newton_steps("softmax", "reciprocal", p, newton)
    conv = b.reduce != "tree"
    v = b.add("sum", [b.ones(c, 1), Sdp(precision=p)], e, 1) if conv else \
        b.tree(e, "add", "sum")
    if steps == 0:
        r = b.add("reciprocal", [Sdp(act="reciprocal", precision=p)], v, 1)
        return b.done(b.broadcast(r, "normalise", e, ew_op="mul"))
    r = b.lut_x(v, "reciprocal", steps - 1)
    r_lo = b.add("reciprocal.low", ([b.ones(c, 1)] if conv else []) + [Sdp(
        scale=b.values(-1.0, 1), shift=b.values(1.0, 1), ew_op="mul", precision=p)],
        e if conv else v, 1, r, units=[("x1_mul", r)])
    low = b.add("normalise.low", [b.ones(1), Sdp(ew_op="mul", precision=p)], r_lo, c, e)
    return b.done(b.add("normalise", [b.ones(1), Sdp(ew_op="add", precision=p)], r, c, low,
                        units=[("x1_mul", e)]))


def log_softmax_passes(shape, precision: str = "fp32", reduce: str = "tree") -> Decomposition:
    """log_softmax over the channels of an [N, C, H, W] surface, ``x - (max + ln(sum))``
    with sum = sum(exp(x - max)) >= 1: softmax's max and exponentials (:func:`softmax_passes`;
    FP16: through softmax_exp's table for t <= 0, attention's), the sum with ln through the
    LUT after it (ACCEL_ACT_LOG; FP16: its LO table covers sums
    below 9, accel.h), max + ln(sum) on one channel, then broadcast with SDP(scale -1, add
    x). No Newton steps: none is cheap for ln, and its table's error is absolute (accel.h)."""
    b = _Builder("log_softmax", shape, precision, reduce)
    c = b.c
    m = b.tree("x", "max", "max")
    e = b.broadcast(m, "exp", "x", scale=b.values(-1.0, c), ew_op="add", act="softmax_exp")
    log_sum = b.reduce_sum(e, "sum", act="log")
    offset = b.add("offset", [Sdp(ew_op="add", precision=precision)], log_sum, 1, operand=m)
    return b.done(b.broadcast(offset, "subtract", "x", scale=b.values(-1.0, c), ew_op="add"))


def softsign_passes(shape, precision: str = "fp32", newton: Optional[int] = None
                    ) -> Decomposition:
    """softsign, x / (1 + |x|), element-wise over an [N, C, H, W] surface, on the SDP:
    |x| as max(-x, x) (scale -1, then the element-wise max with x), 1 / (1 + |x|) through
    the reciprocal's LUT (1 + |x| >= 1: inside its domain; FP16: its Newton steps on
    s = 1 + |x|, a pass of its own), then the product with x. FP32: x * (1 / (1 + |x|)), two
    correctly rounded steps after the sum, where x / (1 + |x|) is one."""
    b = _Builder("softsign", shape, precision, "tree")
    c, p = b.c, precision
    magnitude = b.add("abs", [Sdp(scale=b.values(-1.0, c), ew_op="max", precision=p)], "x", c,
                      "x")
    if newton_steps("softsign", "reciprocal", p, newton) == 0:
        r = b.add("reciprocal", [Sdp(shift=b.values(1.0, c), act="reciprocal", precision=p)],
                  magnitude, c)
    else:
        r = b.lut(b.add("plus_one", [Sdp(shift=b.values(1.0, c), precision=p)], magnitude, c),
                  "reciprocal", newton)
    return b.done(b.add("product", [Sdp(ew_op="mul", precision=p)], r, c, "x"))


def reciprocal_passes(shape, floor: float, precision: str = "fp32",
                      newton: Optional[int] = None) -> Decomposition:
    """1 / max(x, floor), floor > 0, element-wise over an [N, C, H, W] surface (a mean
    pooling's 1 / max(count, eps); a divisor proven above a bound, SimAM's): the SDP's clip
    at the floor (the max: exact), then the reciprocal's LUT, IEEE's 1 / x in fp32; in FP16
    the table (one LE entry an octave: within 12.5 %) and its Newton steps on the clipped
    value, as softsign's."""
    if not (np.isfinite(floor) and floor > 0):
        raise AccelInvalidError(f"reciprocal: floor = {floor!r} is not a finite value > 0")
    b = _Builder("reciprocal", shape, precision, "tree")
    held = b.add("floor", [Sdp(act="clip", clip=(float(floor), float("inf")),
                               precision=precision)], "x", b.c)
    return b.done(b.lut(held, "reciprocal", newton))


def run_passes(device: Device, decomposition: Decomposition, x: np.ndarray,
               mode: str = "fused", inputs: Optional[Dict[str, np.ndarray]] = None
               ) -> Tuple[np.ndarray, List[RunStats]]:
    """Run every pass on ``device`` (``inputs``: the tensors besides ``x`` it reads); the
    output and each run's stats."""
    dtype = dtype_for(decomposition.precision)
    x = np.ascontiguousarray(x, dtype)
    if x.shape != decomposition.shapes["x"]:
        raise AccelInvalidError(f"{decomposition.layer}: x has shape {x.shape}, the passes "
                                f"were built for {decomposition.shapes['x']}")
    stats = []

    def run(p, ops, data, out):
        y, s = device.run(ops, np.ascontiguousarray(data), mode=mode, label=p.role, out=out)
        stats.append(s)
        return y

    tensors = decomposition.run(run, x, {k: np.ascontiguousarray(v, dtype)
                                         for k, v in (inputs or {}).items()})
    return decomposition.tensor(tensors, decomposition.output), stats


def estimate_passes(config, decomposition: Decomposition,
                    mode: str = "fused") -> Tuple[int, List[Tuple[str, RunStats]]]:
    """The cost model's price of every pass (``estimate_chain``, no data), and their cycles
    summed (runs do not overlap here: each reads the one before)."""
    runs = [(p.role, estimate_chain(config, p.bound(None), decomposition.shapes[p.input],
                                    mode=mode, precision=decomposition.precision))
            for p in decomposition.passes]
    return sum(s.cycles for _, s in runs), runs


def summary(decomposition: Decomposition, runs: Sequence[Tuple[str, RunStats]]) -> str:
    """One line per kind of pass: runs, engines, cycles (for docs and reports)."""
    rows: Dict[str, List[int]] = {}
    for p, (role, s) in zip(decomposition.passes, runs):
        role = pass_kind(role)
        kind = role.rsplit(".", 1)[0] if ".lo" in role or ".hi" in role or ".max" in role \
            or ".add" in role else role
        engines = "+".join(op.engine if hasattr(op, "engine") else type(op).__name__.upper()
                           for op in p.ops)
        key = f"{kind} [{engines}]" if kind == role else f"{kind} (tree)"
        row = rows.setdefault(key, [0, 0, 0])
        row[0] += 1
        row[1] += s.cycles
        row[2] += s.dram_bytes
    return "\n".join(f"{k:40s} runs {v[0]:3d}  cycles {v[1]:8d}  DRAM bytes {v[2]:9d}"
                     for k, v in rows.items())


def _windows(size: int, limit: int = 8, powers: bool = False) -> List[Tuple[int, int]]:
    """(window, right padding) of successive PDP passes along W that reduce ``size`` to 1:
    the widest exact factor of at most ``limit``, else the widest window, padded;
    ``powers``: every window a power of two (the padded width too), so that the product of
    the windows, by which an average is scaled back to a sum, is exact in any precision."""
    passes = []
    while size > 1:
        if powers:  # at least 2: size > 1
            window = min(limit, 1 << (size - 1).bit_length())
        else:  # no exact factor: the widest window, padded
            window = next((k for k in range(min(limit, size), 1, -1) if size % k == 0),
                          min(limit, size))
        pad = -size % window
        passes.append((window, pad))
        size = (size + pad) // window
    return passes


def attention_passes(tokens: int, heads: int, head_dim: int, scale: float = 1.0,
                     precision: str = "fp32", kv_tokens: Optional[int] = None,
                     channels: Optional[Dict[str, Tuple[int, int]]] = None,
                     newton: Optional[int] = None, windows: int = 1,
                     bias: Optional[np.ndarray] = None,
                     key_bias: Union[bool, str] = False,
                     value_dim: Optional[int] = None,
                     groups: Optional[int] = None) -> Decomposition:
    """Multi-head attention ``softmax(scale Q_h K_h^T) V_h`` of one image, each head's result
    in its channels of the output, as engine passes. ``channels``: per input ("x" for Q, "k",
    "v"), (channels of the tensor, first channel of head 0), default (heads x head_dim, 0): the
    heads are consecutive channel ranges of ``head_dim`` (a packed Q/K/V projection gives all
    three from one tensor at three offsets).

    The inputs, on the engines' terms (NVDLA's CONV fetches its weights from memory, so a run
    may read as weights what another run wrote):

    - "x": Q as [T, Cq, 1, 1], a row per token as it was written. Head h's [T, d] block,
      copied dense by a BDMA run (its rows are strided), is the scores CONV's T kernels.
    - "k": K as the surface [1, Ck, 1, Tk] (tokens along W). Head h's channels are a view.
    - "v": V as [Tk, Cv, 1, 1], a row per token. Head h's [Tk, d] block, copied dense by a
      BDMA run, is the surface [1, Tk, 1, d] the P V CONV reads: the keys as channels.
    - "o", the output: [T, heads x d, 1, 1], a row per token; head h's rows are written into
      its channels by a BDMA run (none for one head).

    ``scale``: one factor, or one per head (Swin-V2's learnt logit scales): the scores SDP's
    scale of each head's run.

    Per head: [BDMA Q_h]; CONV (K_h, weights Q_h) + SDP (x scale) = the scores transposed,
    S^T [1, T, 1, Tk]: the queries as channels, the keys along W, so that the softmax over the
    keys is the PDP's. Every head's S^T is a block of one surface [1, heads T, 1, Tk] (head h
    at channel h T), over which each softmax pass runs once for all heads, as the PDP and SDP
    work channel by channel: the max in PDP max passes along W (windows of at most 8, padded:
    padding never wins a max), SDP -max, SDP exp(S^T - max) = E^T with the max as the
    per-channel operand, the average as PDP average passes (power-of-two windows, zero padding
    counted), its reciprocal through the LUT (FP16: then Newton steps, as the softmax's). Then
    per head: [BDMA V_h];
    CONV (V_h, weights E^T: T kernels of Tk) + SDP (x 1 / the windows' product, x the
    reciprocal as the per-channel operand) = O_h [1, T, 1, d], which is [T, d] in memory: the
    softmax normalised after the P V products, in the accumulator, so the probabilities are
    never rounded to the data precision; [BDMA O_h into the output's channels of the head].
    FP16 rounds twice less (softmax_along_w): the exp pass recomputes the scores in its own
    CONV (S^T rounded to half feeds the max only) through softmax_exp's finer table, and the
    reciprocal's last Newton step reads the exponentials' sum from a CONV's fp32 accumulator
    and gives 1 / sum's remainder beyond its half, which the P V runs apply (values_runs).

    ``windows`` > 1 (Swin): attention within each of that many consecutive blocks of
    ``tokens`` rows of Q, K, V and the output, the per-head passes above per window and head,
    the softmax's once over every window's and head's scores. The tensors are
    then read as one image of all their bytes: "x" [1, W T Cq, 1, 1], "v" and "o" likewise,
    "k" [1, W Ck, 1, Tk] (each window's K on its own surface, one after the other); a
    window's rows are a view at its address. ``bias`` [1 or windows, heads, T, Tk] is added
    to the scaled scores by the scores' own SDP, as its element-wise operand (S^T's channels
    are the queries and its W the keys: the bias's [T, Tk] as it is): a constant the passes
    read as tensor "bias". ``key_bias``: "bias" is an input instead, [1, windows T, 1, Tk] (a
    padding mask's row copied to the queries: with windows, a batch of sentences), window w's
    [1, T, 1, Tk] block every head's operand in that window; or "head" (_bias_block).
    ``value_dim``: V's and the output's head size dv where not ``head_dim`` (SAGAN's).

    ``groups`` (``nn.MultiheadAttention``'s ``need_weights=True``): the passes compute the
    head-averaged probabilities instead of the output, no V: the mean of each ``groups``
    consecutive heads' softmax(scale Q_h K_h^T) (of the windows' heads in order: a batch's
    image's, or a sequence-first batch's image's), "o" [1, windows heads / groups, T, Tk],
    which is [images, T, Tk] in memory. After the scores and the softmax passes above, one
    SDP pass normalises every head's exponentials at once, P = E^T (1 / average) / covered
    with the reciprocals as the per-channel operand (FP16: E^T r_lo / covered first, rounded
    to half, then E^T r in the X1 unit + that, rounded once, as the values runs do), and one
    CONV reads P as [1, heads, T, Tk] (a head's block a channel, the same bytes) with
    weights of ones per group, its SDP x 1 / groups: the mean summed in the accumulator."""
    kv_tokens = tokens if kv_tokens is None else kv_tokens
    d, dv = head_dim, head_dim if value_dim is None else value_dim
    channels = _attention_channels(tokens, kv_tokens, heads, d, scale, precision, channels, dv)
    scales = np.broadcast_to(np.asarray(scale, np.float64).reshape(-1), (heads,))
    t, tk = tokens, kv_tokens
    cq, ck, cv = channels["x"][0], channels["k"][0], channels["v"][0]
    b = _HeadPasses(precision, d, _attention_shapes(t, tk, cq, ck, cv, heads * dv, windows), dv)
    constants = _attention_bias(bias, windows, heads, t, tk, b, key_bias)
    # every head's (and window's) scores are one surface [1, W H T, 1, Tk], head h of window
    # w at channel (w H + h) T: the scores CONVs write their blocks of it, and the softmax's
    # PDP and SDP passes, which work channel by channel, run once over all of them
    b.shapes["s"] = (1, windows * heads * t, 1, tk)
    heads_of = _scores_runs(b, (windows, heads, t, tk, d), channels, scales, bias, key_bias)
    e, r, covered, r_lo = b.softmax_along_w("", "s", newton,
                                            [(head, first, scores) for _, _, head, first, scores
                                             in heads_of])
    if groups is not None:
        b.probabilities(e, r, r_lo, covered, windows * heads, groups, t, tk)
        del b.shapes["v"]
    else:
        for w, h, head, first, _ in heads_of:
            b.head_values(w, h, head, first, (t, tk, windows, heads), channels["v"],
                          (e, r, r_lo), covered)
    inputs = ("k",) if groups is not None else ("k", "v")
    return Decomposition("attention", precision, tuple(b.passes), b.shapes, "o", b.views,
                         inputs + ("bias",) if key_bias else inputs, ("o",),
                         {**constants, **b.constants})


def _scores_runs(b: "_HeadPasses", blocks: Tuple[int, int, int, int, int],
                 channels: Dict[str, Tuple[int, int]], scales: np.ndarray,
                 bias: Optional[np.ndarray], key_bias: Union[bool, str]) -> list:
    """attention_passes' scores CONV of each window's head into its block of "s", with the
    head's scale and bias in the CONV's SDP; per head (window, head, its name, first channel
    of "s", its scores CONV's (data, weights, scale, bias)), which the softmax's passes
    recompute in FP16. ``blocks``: (windows, heads, T, Tk, head_dim)."""
    windows, heads, t, tk, d = blocks
    cq, ck = channels["x"][0], channels["k"][0]
    one = windows == 1
    heads_of = []
    for w in range(windows):
        at = "" if one else f"w{w}."
        x = "x" if one else b.view(f"{at}x", "x", w * t * cq, t * cq, (t, cq, 1, 1))
        rows = None
        if key_bias and key_bias != "head":  # the window's rows of the computed bias
            rows = "bias" if one else b.view(f"{at}bias", "bias", w * t, t, (1, t, 1, tk))
        for h in range(heads):
            head, first = f"{at}h{h}", (w * heads + h) * t
            q = b.rows(x, channels["x"][1] + h * d, f"{head}.q", f"{head}.queries", t)
            k = b.view(f"{head}.k", "k", w * ck + channels["k"][1] + h * d, d, (1, d, 1, tk))
            sdp = Sdp(scale=b.values(scales[h], t), precision=b.precision)
            block = _bias_block(key_bias, bias, w, h, heads)
            operand = rows if block is None else \
                b.view(f"{head}.bias", "bias", block * t, t, (1, t, 1, tk))
            if operand is not None:
                sdp = dataclasses.replace(sdp, ew_op="add")
            s = b.view(f"{head}.s", "s", first, t, (1, t, 1, tk))
            b.add(f"{head}.scores", [Conv(None, weight_shape=(t, d, 1, 1), precision=b.precision),
                                     sdp], k, s, (1, t, 1, tk), operand=operand, weights=q)
            heads_of.append((w, h, head, first, (k, q, scales[h], operand)))
    return heads_of


def _bias_block(key_bias: Union[bool, str], bias: Optional[np.ndarray], w: int, h: int,
                heads: int) -> Optional[int]:
    """Which block of T rows of "bias" head h of window w adds to its scores: a constant
    bias's [1 or windows, heads, T, Tk] block, or (``key_bias`` "head": a computed bias of
    [1, windows heads T, 1, Tk], a sequence-first batch's images being heads of one image,
    each image's heads reading its own row of the padding mask) the head's own; None where
    the window's rows of a computed bias are every head's (or there is no bias)."""
    if key_bias == "head":
        return w * heads + h
    if bias is not None:
        return (w if bias.shape[0] > 1 else 0) * heads + h
    return None


def _attention_shapes(t, tk, cq, ck, cv, merged, windows) -> Dict[str, Tuple[int, ...]]:
    """The shapes of attention's inputs and output: one image's rows, or (windows) all
    windows' bytes as one image (K: each window's surface after the other)."""
    if int(windows) != windows or windows < 1:
        raise AccelInvalidError(f"attention: windows = {windows!r} is not a positive integer")
    if windows == 1:
        return {"x": (t, cq, 1, 1), "k": (1, ck, 1, tk), "v": (tk, cv, 1, 1),
                "o": (t, merged, 1, 1)}
    return {"x": (1, windows * t * cq, 1, 1), "k": (1, windows * ck, 1, tk),
            "v": (1, windows * tk * cv, 1, 1), "o": (1, windows * t * merged, 1, 1)}


def _attention_bias(bias, windows, heads, t, tk, b: "_HeadPasses",
                    key_bias: Union[bool, str]) -> Dict[str, np.ndarray]:
    """attention_passes' constants: the bias, [1 or windows, heads, T, Tk] checked, in the
    precision's dtype as the one image [1, (windows) heads T, 1, Tk] its views cut; none for a
    computed key bias, an input [1, windows T, 1, Tk]."""
    if key_bias:
        if bias is not None:
            raise AccelInvalidError("attention: a computed key bias is for attention without "
                                    "a constant bias")
        if key_bias not in (True, "head"):
            raise AccelInvalidError(f"attention: key_bias = {key_bias!r} is not True or 'head'")
        b.shapes["bias"] = (1, windows * (heads if key_bias == "head" else 1) * t, 1, tk)
        return {}
    if bias is None:
        return {}
    bias = np.asarray(bias, np.float32)
    if bias.ndim != 4 or bias.shape[0] not in (1, windows) or bias.shape[1:] != (heads, t, tk):
        raise AccelInvalidError(f"attention: the bias's shape {list(bias.shape)} is not "
                                f"[1 or {windows}, {heads}, {t}, {tk}]")
    value = bias.astype(b.dtype).reshape(1, -1, 1, tk)
    b.shapes["bias"] = value.shape
    return {"bias": value}


def _attention_channels(tokens, kv_tokens, heads, d, scale, precision, channels, dv
                        ) -> Dict[str, Tuple[int, int]]:
    """attention_passes' arguments checked; each input's (channels, first of the heads)."""
    widths = {"x": heads * d, "k": heads * d, "v": heads * dv}
    channels = dict(channels or {})
    for name in ("x", "k", "v"):
        channels.setdefault(name, (widths[name], 0))
    for name, value in [("tokens", tokens), ("kv_tokens", kv_tokens), ("heads", heads),
                        ("head_dim", d), ("value_dim", dv)]:
        if int(value) != value or value < 1:
            raise AccelInvalidError(f"attention: {name} = {value!r} is not a positive integer")
    for name, (total, first) in channels.items():
        merged = widths[name]
        if first < 0 or first + merged > total:
            raise AccelInvalidError(f"attention: {name}'s heads take channels {first} to "
                                    f"{first + merged}, beyond its {total}")
    if np.size(scale) not in (1, heads) or not np.all(np.isfinite(scale)):
        raise AccelInvalidError(f"attention: scale = {scale!r} is not one finite factor or "
                                f"one per head ({heads})")
    if precision not in PRECISIONS:
        raise AccelInvalidError(f"attention: precision = {precision!r} is not one of "
                                f"{list(PRECISIONS)}")
    return channels


class _HeadPasses:
    """The passes, shapes and views of attention_passes as it adds them."""

    def __init__(self, precision: str, d: int, shapes: Dict[str, Tuple[int, int, int, int]],
                 dv: int):
        self.precision, self.d, self.dv = precision, d, dv
        self.dtype = dtype_for(precision)
        self.shapes = dict(shapes)
        self.views: Dict[str, Tuple] = {}
        self.passes: List[Pass] = []
        #: constant tensors the passes read (the FP16 softmax's ones surface)
        self.constants: Dict[str, np.ndarray] = {}

    def add(self, role, ops, src, name, shape, operand=None, weights=None, units=()) -> str:
        self.shapes[name] = shape
        self.passes.append(Pass(f"attention.{role}", tuple(ops), src, name, operand, weights,
                                tuple(units)))
        return name

    def view(self, name, base, first, count, shape) -> str:
        self.views[name] = (base, first, count, shape)
        self.shapes[name] = shape
        return name

    def values(self, v, k) -> np.ndarray:
        return np.full(k, v, np.float32).astype(self.dtype)

    def rows(self, src, first, name, role, count, d=None) -> str:
        """A head's ``d`` columns (default the key's head size) of a row-per-token tensor,
        dense (a BDMA copy; none if the tensor is that head)."""
        d = self.d if d is None else d
        if self.shapes[src][1] == d and first == 0:
            return src
        return self.add(role, [Bdma(d, src_offset=first, dst_channels=d,
                                    precision=self.precision)], src, name, (count, d, 1, 1))

    def head_values(self, w, h, head, first, sizes, v_channels, softmax, covered) -> None:
        """Head h of window w after the softmax: [BDMA V_h], the P V CONV reading its block
        of the exponentials (channel ``first``) and of the reciprocals, [BDMA O_h into the
        output's channels of the head]."""
        t, tk, windows, heads = sizes
        d, (cv, v_first), (e, r, r_lo) = self.dv, v_channels, softmax
        merged, one = heads * d, windows == 1
        at = "" if one else f"w{w}."
        v_rows = "v" if one else self.view(f"{at}v", "v", w * tk * cv, tk * cv, (tk, cv, 1, 1))
        v = self.rows(v_rows, v_first + h * d, f"{head}.v", f"{head}.values.rows", tk, d)
        v = self.view(f"{head}.vs", v, 0, self.shapes[v][1], (1, tk, 1, d))
        e_h = self.view(f"{head}.e", e, first, t, (1, t, 1, tk))
        r_h = self.view(f"{head}.r", r, first, t, (1, t, 1, 1))
        r_lo_h = None if r_lo is None else self.view(f"{head}.rlo", r_lo, first, t,
                                                     (1, t, 1, 1))
        ops, r_h, units = self.values_runs(head, v, e_h, r_h, r_lo_h, covered)
        if heads == 1:  # O_h is the output: [1, T, 1, d] and [T, d, 1, 1] are its bytes
            surface = self.view(f"{at}o.surface", "o", w * t * merged,
                                merged if one else t * merged, (1, t, 1, d))
            self.add(f"{head}.values", ops, v, surface, (1, t, 1, d), operand=r_h,
                     weights=e_h, units=units)
            return
        out = "o" if one else self.view(f"{at}o", "o", w * t * merged, t * merged,
                                        (t, merged, 1, 1))
        o = self.add(f"{head}.values", ops, v, f"{head}.o", (1, t, 1, d), operand=r_h,
                     weights=e_h, units=units)
        o = self.view(f"{head}.orows", o, 0, t, (t, d, 1, 1))
        self.add(f"{head}.merge", [Bdma(d, dst_offset=h * d, dst_channels=merged,
                                        precision=self.precision)], o, out, (t, merged, 1, 1))

    def probabilities(self, e, r, r_lo, covered, blocks, groups, t, tk) -> None:
        """attention_passes' ``groups``: P = e r / covered for every head's rows at once
        (FP16: with r_lo, 1 / average's remainder beyond its half r, as values_runs), then
        the mean of each ``groups`` consecutive heads' [T, Tk] blocks: a CONV of ones reading
        P as [1, blocks, T, Tk], x 1 / groups, into "o" [1, blocks / groups, T, Tk]; one
        head a group (torch's ``average_attn_weights=False``): P is "o", no CONV."""
        if blocks % groups:
            raise AccelInvalidError(f"attention: {blocks} heads are not groups of {groups}")
        p, rows = self.precision, blocks * t
        shape = (1, rows, 1, tk)
        ops = [Sdp(scale=self.values(1.0 / covered, rows), ew_op="mul", ew_per_channel=True,
                   precision=p)]
        # one head a group (average_attn_weights=False): P itself is the output
        out = "p"
        if groups == 1:
            self.shapes["o"] = (1, blocks, t, tk)
            out = self.view("o.rows", "o", 0, blocks, shape)
        if r_lo is None:
            probs = self.add("probabilities", ops, e, out, shape, operand=r)
        else:
            low = self.add("probabilities.remainder", ops, e, "plow", shape, operand=r_lo)
            probs = self.add("probabilities", [Sdp(
                x_per_channel=("x1_mul",), scale=self.values(1.0 / covered, rows),
                ew_op="add", precision=p)], e, out, shape, operand=low, units=(("x1_mul", r),))
        if groups == 1:
            return
        images = blocks // groups
        ones = np.zeros((images, blocks, 1, 1), self.dtype)
        for i in range(images):
            ones[i, i * groups:(i + 1) * groups] = 1
        heads = self.view("p.heads", probs, 0, rows, (1, blocks, t, tk))
        self.add("probabilities.mean", [Conv(ones, precision=p),
                                        Sdp(scale=self.values(1.0 / groups, images),
                                            precision=p)], heads, "o", (1, images, t, tk))

    def values_runs(self, head, v, e, r, r_lo, covered):
        """The P V run's chain, its element-wise operand and X unit operands: the
        exponentials' products with V summed in the CONV's fp32 accumulator, then normalised
        by the SDP in the same run (1 / covered: the sums' windows, a power of two; 1 /
        average per query, the per-channel operand): P is never rounded. FP16 (``r_lo``, 1 /
        average's remainder beyond the half r): E V r_lo first, rounded to half (2^-11 of
        the output), then E V r + that in fp32 inside the last run, rounded once: r rounded
        to half alone cost 3 dB of the attention core's SQNR."""
        _, t, _, tk = self.shapes[e]
        d = self.shapes[v][3]
        p = self.precision
        conv = Conv(None, weight_shape=(t, tk, 1, 1), precision=p)
        ops = [conv, Sdp(scale=self.values(1.0 / covered, t), ew_op="mul", ew_per_channel=True,
                         precision=p)]
        if r_lo is None:
            return ops, r, ()
        low = self.add(f"{head}.values.remainder", ops, v, f"{head}.olow", (1, t, 1, d),
                       operand=r_lo, weights=e)
        return [conv, Sdp(x_per_channel=("x1_mul",), scale=self.values(1.0 / covered, t),
                          ew_op="add", precision=p)], low, (("x1_mul", r),)

    def softmax_along_w(self, prefix: str, s: str, newton: Optional[int], heads=None
                        ) -> Tuple[str, str, int, Optional[str]]:
        """The softmax over W of scores ``s`` [1, R, 1, Tk] but its normalisation, every row
        (channel) on its own: PDP max passes, SDP -max, SDP exp with it as the per-channel
        operand, PDP average passes (power-of-two windows), the LUT reciprocal of the average
        (FP16: then Newton steps, as the softmax's). Each pass is one run over all R rows
        (every head's queries). Returns e = exp(s - max), r = 1 / average [1, R, 1, 1] and
        the windows' product ``covered`` (a power of two): softmax = e r / covered, which the
        P V CONV's SDP applies to the CONV's sums.

        FP16 (``heads``: per head its name, first row of ``s`` and its scores CONV's data K_h,
        weights Q_h, scale and bias): the exponentials' pass recomputes each head's scores in
        its CONV, so exp reads scale Q_h K_h^T + bias - max in fp32 (S^T rounded to half
        feeds the max only, which any value near the true max serves); the Newton steps are
        one SDP pass each, s r in fp32 in the X1 unit; the last step reads each head's sum of
        the exponentials from a CONV's fp32 accumulator (a ones surface, weights E^T), not
        the PDP's averages rounded to half, so 1 / sum is rounded once (returned as r_lo,
        1 / average's remainder beyond r: docs/transformer_ops.md, fp16 accuracy)."""
        p = self.precision
        fp16 = p == "fp16" and heads is not None
        _, rows, _, tk = self.shapes[s]
        one = (1, rows, 1, 1)
        m = s
        for i, (window, pad) in enumerate(_windows(tk)):
            m = self.add(f"{prefix}softmax.max", [Pool("max", (1, window), (1, window),
                                                        (0, 0, 0, pad), precision=p)],
                         m, f"{prefix}m{i}", (1, rows, 1, (self.shapes[m][3] + pad) // window))
        neg = self.add(f"{prefix}softmax.negate",
                       [Sdp(scale=self.values(-1.0, rows), precision=p)], m,
                       f"{prefix}negmax", one)
        e = f"{prefix}e"
        if fp16:
            self.shapes[e] = (1, rows, 1, tk)  # written head by head
            t = rows // len(heads)
            for head, first, scores in heads:
                self._exponentials(head, scores, self.view(f"{head}.negmax", neg, first, t,
                                                           (1, t, 1, 1)),
                                   self.view(f"{head}.e", e, first, t, (1, t, 1, tk)))
        else:
            self.add(f"{prefix}softmax.exp", [Sdp(ew_op="add", ew_per_channel=True, act="exp",
                                                  precision=p)], s, e, (1, rows, 1, tk), neg)
        total, covered, r_lo = e, 1, None
        for i, (window, pad) in enumerate(_windows(tk, powers=True)):
            total = self.add(f"{prefix}softmax.sum", [Pool(
                "avg", (1, window), (1, window), (0, 0, 0, pad), count_include_pad=True,
                precision=p)], total, f"{prefix}a{i}",
                (1, rows, 1, (self.shapes[total][3] + pad) // window))
            covered *= window
        if covered > MAX_COVERED:  # the average of many keys back up into the reciprocal
            # table's range (its smallest input 2^-15 in FP16, and 1 / average a half)
            back = covered // MAX_COVERED
            total = self.add(f"{prefix}softmax.total", [Sdp(scale=self.values(back, rows),
                                                             precision=p)],
                             total, f"{prefix}total", one)
            covered = MAX_COVERED
        steps = newton_steps("attention", "reciprocal", p, newton)
        r = self.add(f"{prefix}softmax.reciprocal", [Sdp(act="reciprocal", precision=p)],
                     total, f"{prefix}r", one)
        for i in range(steps):  # y (2 - s y)
            if fp16 and i == steps - 1:  # r stays the half before it, r_lo its remainder
                r_lo = f"{prefix}rlo"
                self.shapes[r_lo] = one  # written head by head
                t = rows // len(heads)
                for head, first, _ in heads:
                    at = (first, t, (1, t, 1, 1))
                    self._last_newton_step(
                        head, self.view(f"{head}.e", e, first, t, (1, t, 1, tk)),
                        self.view(f"{head}.ry", r, *at), covered,
                        self.view(f"{head}.rlo", r_lo, *at))
            elif fp16:  # s y in fp32 (X1), 2 - s y (scale, shift), times y: one rounding
                r = self.add(f"{prefix}softmax.newton", [Sdp(
                    scale=self.values(-1.0, rows), shift=self.values(2.0, rows), ew_op="mul",
                    precision=p)], total, f"{prefix}r{i}", one, r, units=[("x1_mul", r)])
            else:
                sy = self.add(f"{prefix}softmax.newton.times_s",
                              [Sdp(ew_op="mul", precision=p)], total, f"{prefix}sy{i}", one, r)
                r = self.add(f"{prefix}softmax.newton.step", [Sdp(
                    scale=self.values(-1.0, rows), shift=self.values(2.0, rows), ew_op="mul",
                    precision=p)], sy, f"{prefix}r{i}", one, r)
        return e, r, covered, r_lo

    def _exponentials(self, head: str, scores, neg: str, out: str) -> str:
        """E^T = exp(scale Q_h K_h^T + bias - max): the scores CONV again, its SDP taking the
        fp32 accumulator through the scale (with a bias: the X1 unit's per-channel multiplier,
        then the X2 unit adds the bias, so the element-wise unit is free for -max), the
        per-channel -max and the exp LUT, rounded once. The LUT is softmax_exp's, twice as
        fine as exp's where t - max <= 0 lies: exp's own table's interpolation cost 6 dB on
        E^T against half(e^t) (68.8 against 74.9 dB, docs/transformer_ops.md)."""
        k, q, scale, bias = scores
        shape = self.shapes[out]
        t = shape[1]
        conv = Conv(None, weight_shape=(t, self.d, 1, 1), precision=self.precision)
        if bias is None:
            sdp = Sdp(scale=self.values(scale, t), ew_op="add", ew_per_channel=True,
                      act="softmax_exp", precision=self.precision)
            units = ()
        else:
            sdp = Sdp(x1_mul=self.values(scale, t), x_per_channel=("x1_mul",), ew_op="add",
                      ew_per_channel=True, act="softmax_exp", precision=self.precision)
            units = (("x2_alu", bias),)
        return self.add(f"{head}.softmax.exp", [conv, sdp], k, out, shape, neg,
                        weights=q, units=units)

    def _last_newton_step(self, head: str, e: str, r: str, covered: int, out: str) -> str:
        """y (2 - (S / covered) y) with S = the sum of the exponentials in a CONV's fp32
        accumulator: a ones surface [1, Tk, 1, 1] (a constant) with E^T as the weights (T
        kernels of Tk, as the P V CONV reads them), its SDP S y (X1), x -1 / covered, + 2,
        x y (the element-wise unit), rounded once: 1 / average within a half's rounding of
        the exact sum's, where the PDP's averages were rounded to half three times."""
        t, tk = self.shapes[out][1], self.shapes[e][3]
        if "ones" not in self.shapes:
            self.shapes["ones"] = (1, tk, 1, 1)
            self.constants["ones"] = np.ones((1, tk, 1, 1), self.dtype)
        return self.add(f"{head}.softmax.newton.sum", [
            Conv(None, weight_shape=(t, tk, 1, 1), precision=self.precision),
            Sdp(scale=self.values(-1.0 / covered, t), shift=self.values(1.0, t), ew_op="mul",
                ew_per_channel=True, precision=self.precision)],
            "ones", out, (1, t, 1, 1), r, weights=e, units=(("x1_mul", r),))
