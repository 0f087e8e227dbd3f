"""Attention's core read back as one op (issue 29, item 3): the head split, Q K^T, the scale,
the softmax over the keys, P V and the head merge of multi-head attention, in whatever layout
ops a frontend spells them, become ``reshape(nn.attention(q, k, v, scale), [tokens, channels])``
of the three token tensors, which the pattern table takes as one accelerator layer
(``accel.attention``: the engine passes of ``sim/decompose.attention_passes``).

torch.export spells ``nn.MultiheadAttention`` as reshapes, an unsqueeze, transposes, a squeeze
and selects of the packed projection, views to [batch x heads, tokens, head_dim], a scale
of q and of k (or of the scores), batched matmuls, a softmax and the inverse layout ops; ONNX
as Reshape, Transpose, Gather, Mul, MatMul and Softmax; Paddle2ONNX (PP-OCR's SVTR) as a
Reshape to [1, T, 3, heads, d], a Transpose [2, 0, 3, 1, 4], a Slice + Squeeze of axis 0 per
q, k and v and an opset-12 Softmax of the [heads x T, T] rows. All are the same index maps.
So each operand is traced back through the layout ops (reshape, permute_dims, squeeze,
expand_dims, strided_slice, take of constant indices) and multiplications by scalar constants to
the tensor that computed it (a projection's output), and the layout ops are applied to an array
of that tensor's element indices: the operand is a head split of that tensor exactly when the
indices it gathers are ``token * channels + first + head * head_dim + j``. The result is
traced forward the same way to the tensor whose indices are the heads merged, token-major.

What is rewritten: one image (batch 1, or the batch axis of size 1 anywhere), or one image's
windows (Swin, MaxViT: the operands gather the heads of consecutive blocks of rows of one
token tensor, window after window: the batch of ``nn.attention`` is the windows), or a
sequence-first batch (torch's batch_first=False: B images' rows alternate, so [T, B, C] is
T rows of B x C channels and image b's head h is head b x heads + h of one image, where
each image's channels are the whole row or a projection of its own); adds of
constants between the scores and the softmax (Swin's relative position bias and its shifted
windows' region mask, each layout ops of a constant table) become its bias, one
[T, Tk] per head (and per window where they differ); every intermediate read only by the next
op. Swin-V2's cosine attention: F.normalize of q and of k over each head's channels (passed
on the way back like a layout op, checked to normalise exactly one head's d channels of a
token per row) becomes an L2 norm of the heads' rows before ``nn.attention``, and a constant
factor per head on the scores (its logit scale, after compiler/constant_folding.py folded
its clamp and exp) a constant [1, 1, heads, 1] multiplying the query's heads. A padding
mask's computed bias added last (one value per key, the same for every query and head:
BERT's ``(1 - mask) * min`` as [1, 1, 1, Tk]; in a padded batch of sentences, batch-first,
one row per sentence, [B, 1, 1, Tk], each sentence a window; torch's boolean
key_padding_mask, ``where(mask, -inf, 0)`` expanded over the heads, in a sequence-first
batch one row per image's heads) becomes the bias too, traced through the layout ops that
expand it, its rows copied to the T queries (of each window, or each head) by a 1x1
convolution of one-hot weights, a boolean mask's ``where`` the mask times float32's lowest
(_Rewriter._key_row_values); another add of a computed tensor leaves the region as it
was. The result computes the same values up to
rounding (the scale is applied once, to the scores, where torch applies its square root to
q and to k).

``nn.MultiheadAttention``'s default ``need_weights=True`` returns the probabilities too,
averaged over each image's heads (or, ``average_attn_weights=False``, every head's): the
softmax has a reader besides P V, layout ops and a mean of groups of consecutive heads
(_heads_means). The core is read without it, and the mean becomes a second
``nn.attention`` of the same query and key heads (and bias) whose V is the identity (P I =
P), then the mean of each group of heads (_Rewriter._probabilities), which the pattern
table takes as one ``accel.attention_weights`` layer: the scores' and softmax's passes, one
SDP normalising every head's rows and one CONV averaging the heads, no V
(sim/decompose.attention_passes' ``groups``; docs/transformer_ops.md).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np
import tvm
from tvm import relax

from tvm.relax.dpl import wildcard

from . import chains
from .layer import constant_value, is_constant
from .lowering import l2_normalize_parts
from .relax_exprs import Unsupported, prim_int, read_counts, strided_sliced
from .source_names import name_of, named

#: Ops that only move elements (their index maps are applied to index arrays).
LAYOUT_OPS = ("relax.reshape", "relax.permute_dims", "relax.squeeze", "relax.expand_dims",
              "relax.strided_slice", "relax.take", "relax.broadcast_to")
_SCALARS = ("relax.multiply", "relax.divide")


def _static(expr: relax.Expr) -> Optional[Tuple[int, ...]]:
    try:
        return tuple(int(v) for v in expr.ty.shape.values)
    except (AttributeError, TypeError):
        return None


def _ints(values) -> List[int]:
    return [int(getattr(v, "value", v)) for v in values]


def _scalar(expr: relax.Expr) -> Optional[float]:
    if not is_constant(expr):
        return None
    value = constant_value(expr)
    return float(value.reshape(-1)[0]) if value.size == 1 else None


_ARITHMETIC = {"relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
               "relax.less": np.less, "relax.greater": np.greater, "relax.equal": np.equal,
               "relax.mod": np.fmod, "relax.floor_mod": np.mod}


def evaluate_indices(expr: relax.Expr, value_of, depth: int = 0) -> Optional[np.ndarray]:
    """The value of an integer expression computed from constants and static shapes (ONNX's
    Gather indices: ``where(i < 0, i + dim, i)`` of a ``shape_of``; torch.roll's
    ``(arange(n) + shift) mod n``; T5's relative position buckets, a constant cast and
    reshaped), or None."""
    if depth > 16:
        return None
    if is_constant(expr):
        return constant_value(expr)
    if isinstance(expr, relax.ShapeExpr):
        try:
            return np.array([int(v) for v in expr.values], np.int64)
        except TypeError:
            return None
    if isinstance(expr, relax.Var):
        value = value_of(expr)
        return None if value is None else evaluate_indices(value, value_of, depth + 1)
    if not isinstance(expr, relax.Call) or not isinstance(expr.op, tvm.ir.Op):
        return None
    name = expr.op.name
    if name == "relax.arange":  # torch.roll's indices: (arange(n) + shift) mod n
        bounds = [prim_int(a) for a in expr.args]
        return None if None in bounds else np.arange(*bounds, dtype=np.int64)
    if name == "relax.shape_of":
        shape = _static(expr.args[0])
        return None if shape is None else np.array(shape, np.int64)
    args = [evaluate_indices(a, value_of, depth + 1) for a in expr.args]
    if any(a is None for a in args):
        return None
    if name == "relax.shape_to_tensor":
        return args[0]
    if name == "relax.astype":  # T5's bucket table, int64 cast to int32 for its gather
        return args[0].astype(str(expr.attrs.dtype))
    if name in ("relax.reshape", "relax.expand_dims", "relax.squeeze"):
        shape = _static(expr)
        return None if shape is None else args[0].reshape(shape)
    if name == "relax.take" and len(args) == 2:
        axis = expr.attrs.axis
        return np.take(args[0], args[1].astype(np.int64), axis=None if axis is None else int(axis))
    if name == "relax.where" and len(args) == 3:
        return np.where(*args)
    if name in _ARITHMETIC and len(args) == 2:
        return _ARITHMETIC[name](*args)
    return None


_L2_INPUT = wildcard()
_L2 = chains.l2_normalize(_L2_INPUT)


def _l2_normalized(graph: "_Graph", call: relax.Call) -> Optional[Tuple[relax.Expr, float]]:
    """(x, eps) where ``call`` is torch's F.normalize of x over its last axis
    (chains.l2_normalize), else None."""
    if call.op.name != "relax.divide" or _L2.extract_matched_expr(call, graph.value) is None:
        return None
    try:
        x, total, eps = l2_normalize_parts(call, graph.value.get)
    except Unsupported:
        return None
    shape = _static(x)
    axes = total.attrs.axis
    if shape is None or axes is None or [int(a) % len(shape) for a in axes] != \
            [len(shape) - 1] or not bool(total.attrs.keepdims):
        return None
    return x, eps


def _apply(call: relax.Call, index: np.ndarray, value_of=lambda var: None
           ) -> Optional[np.ndarray]:
    """The layout op ``call`` applied to ``index`` (its input's element indices); ``value_of``
    gives a variable's bound value (for indices computed from shapes)."""
    name = call.op.name
    out = _static(call)
    if out is None:
        return None
    if name in ("relax.reshape", "relax.squeeze", "relax.expand_dims"):
        return index.reshape(out)
    if name == "relax.broadcast_to":
        return np.broadcast_to(index, out)
    if name == "relax.permute_dims":
        axes = call.attrs.axes
        return np.transpose(index, None if axes is None else _ints(axes))
    if name == "relax.strided_slice":
        result = strided_sliced(call, index)
        return result if result is not None and result.shape == out else None
    if name == "relax.take":
        indices = evaluate_indices(call.args[1], value_of)
        if indices is None:
            return None
        axis = call.attrs.axis
        result = np.take(index, np.asarray(indices).astype(np.int64),
                         axis=None if axis is None else int(axis))
        return result if result.shape == out else None
    return None


class _Graph:
    """A function's bindings: what computes each variable, and who reads it."""

    def __init__(self, function: relax.Function):
        self.value: Dict[relax.Var, relax.Expr] = {}
        self.readers: Dict[relax.Var, List[relax.Var]] = {}
        for block in function.body.blocks:
            for binding in block.bindings:
                self.value[binding.var] = binding.value
                for var in _vars(binding.value):
                    self.readers.setdefault(var, []).append(binding.var)
        for var in _vars(function.body.body):
            self.readers.setdefault(var, []).append(None)

    def call(self, expr: relax.Expr, *names: str) -> Optional[relax.Call]:
        value = self.value.get(expr) if isinstance(expr, relax.Var) else expr
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and (
                not names or value.op.name in names):
            return value
        return None

    def only_reader(self, var: relax.Expr) -> Optional[relax.Var]:
        readers = self.readers.get(var, [])
        return readers[0] if len(readers) == 1 else None

    def back(self, expr: relax.Expr, normalizes: Optional[list] = None
             ) -> Tuple[List[Tuple[relax.Expr, List[relax.Call], float]], float]:
        """Candidate (base, layout ops from it to ``expr``, the product of the scalar factors
        on the way) triples, furthest base first, and the product of all the factors. With
        ``normalizes`` (a list), F.normalize over the last axis is passed too (it moves no
        element), each appended as (the number of bases nearer ``expr`` than it, its eps, the
        layout ops after it, the product of the factors after it)."""
        chain: List[relax.Call] = []
        scale = 1.0
        bases = [(expr, [], scale)]
        while True:
            call = self.call(expr)
            if call is None:
                break
            normalized = _l2_normalized(self, call) if normalizes is not None else None
            if normalized is not None:
                normalizes.append((len(bases), normalized[1], len(chain), scale))
                expr = normalized[0]
                bases.append((expr, list(chain), scale))
                continue
            if call.op.name in LAYOUT_OPS:
                chain.insert(0, call)
                expr = call.args[0]
                bases.append((expr, list(chain), scale))
                continue
            if call.op.name in _SCALARS:
                a, b = call.args
                factor = _scalar(b)
                if factor is None and call.op.name == "relax.multiply":
                    factor, a = _scalar(a), b
                if factor is None or factor == 0.0:
                    break
                scale *= factor if call.op.name == "relax.multiply" else 1.0 / factor
                expr = a
                continue
            break
        return bases[::-1], scale

    def forward(self, var: relax.Var) -> List[Tuple[relax.Var, List[relax.Call]]]:
        """(tensor, layout ops from ``var`` to it) along the layout ops that read ``var`` (each
        the only reader of the one before), nearest first."""
        found, chain = [], []
        while True:
            reader = self.only_reader(var)
            call = self.call(reader, *LAYOUT_OPS) if reader is not None else None
            if call is None or not call.args[0].same_as(var):
                return found
            chain = chain + [call]
            found.append((reader, chain))
            var = reader

    def linear(self, expr: relax.Expr
               ) -> Optional[Tuple[relax.Expr, np.ndarray, Optional[np.ndarray]]]:
        """(data, W [K, C], b [K] or None) where ``expr`` is data W^T (+ b) of constants (or
        of layout ops of constants: torch's MultiheadAttention with a query other than its
        key projects each by a slice of in_proj_weight and in_proj_bias, which
        rewrites.constant_broadcasts_and_takes folds only after this module's rewrite)."""
        call, bias = self.call(expr), None
        if call is not None and call.op.name == "relax.add":
            a, b = call.args
            bias = _constant_of(self, b)
            if bias is None:
                a, b = b, a
                bias = _constant_of(self, b)
            if bias is None:
                return None
            call = self.call(a)
            # a reshape of the rows before the bias's add (rewrites.broadcast_weight_matmuls
            # leaves a bias it cannot read as a constant yet after its reshape back to
            # [B, M, N]: the slice of in_proj_bias that the key and value add)
            if call is not None and call.op.name == "relax.reshape" and \
                    _static(call) is not None and _static(call.args[0]) is not None and \
                    _static(call)[-1] == _static(call.args[0])[-1]:
                call = self.call(call.args[0])
        if call is None or call.op.name != "relax.matmul":
            return None
        data, weight = call.args
        w = _constant_of(self, weight)
        if w is None or w.ndim != 2:
            return None
        # (float32 of float32 values: _constant_of computes in float64)
        w = w.T.astype(np.float32)
        bias = None if bias is None else bias.astype(np.float32)
        shape = _static(data)
        if w.ndim != 2 or shape is None or shape[-1] != w.shape[1] or str(
                getattr(data.ty, "dtype", "")) != "float32" or (
                bias is not None and (bias.size != w.shape[0] or bias.shape[-1] != w.shape[0])):
            return None
        return data, w, None if bias is None else bias.reshape(-1)


def _rows_of(graph: _Graph, data: relax.Expr, tokens: int) -> Optional[relax.Expr]:
    """The furthest tensor of ``tokens`` rows that ``data`` is a reshape of (the layout ops
    between move nothing in memory), or None."""
    candidates, _ = graph.back(data)
    channels = _static(data)[-1]
    for base, chain, scale in candidates:
        shape = _static(base)
        # (a view of more axes than a surface has, such as Swin's 6-D windows, is passed)
        if scale != 1.0 or shape is None or shape[-1] != channels or len(shape) > 4 or \
                int(np.prod(shape)) != tokens * channels:
            continue
        index = _indices_of(graph, _static(base), chain)
        if index is not None and np.array_equal(index.reshape(-1), np.arange(index.size)):
            return base
    return None


def _indices_of(graph: "_Graph", shape, chain: List[relax.Call]) -> Optional[np.ndarray]:
    """The element indices of a tensor of ``shape`` after the layout ops ``chain``."""
    if shape is None:
        return None
    index = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    for call in chain:
        index = _apply(call, index, graph.value.get)
        if index is None:
            return None
    return index


def _heads(graph: _Graph, operand: relax.Expr, tokens: int, keys_first: bool,
           normalized: Optional[list] = None
           ) -> Optional[Tuple[relax.Expr, int, float, int, bool]]:
    """(base, first channel, scale, windows, interleaved) where ``operand`` ([..., tokens, d],
    or [..., d, tokens] with ``keys_first`` False: K transposed) gathers the heads of
    ``base``'s tokens, window after window (Swin's windows: ``windows`` consecutive blocks of
    ``tokens`` rows, each split into heads; 1 for one image), or (``interleaved``) of a
    sequence-first batch: ``windows`` images whose rows alternate, token t of image b at row
    t x windows + b (nn.MultiheadAttention with batch_first=False); None if it does not. With
    ``normalized`` (a list), the heads may be L2-normalised on the way (F.normalize over
    each head's d channels: Swin-V2's cosine attention), whose eps (or None) is appended."""
    shape = _static(operand)
    if shape is None or len(shape) < 3:
        return None
    groups = int(np.prod(shape[:-2]))
    d = shape[-1] if keys_first else shape[-2]
    norms = [] if normalized is not None else None
    candidates, _ = graph.back(operand, norms)
    # the factors between the operand and the base it reads: those before the base are
    # already in it
    for position, (base, chain, scale) in zip(range(len(candidates) - 1, -1, -1), candidates):
        base_shape = _static(base)
        if base_shape is None or not base_shape:
            continue
        rows = int(np.prod(base_shape)) // base_shape[-1]
        windows = rows // tokens
        if rows % tokens or groups % windows or base_shape[-1] < groups // windows * d:
            continue
        heads = groups // windows
        index = _indices_of(graph, _static(base), chain)
        if index is None or index.shape != shape:
            continue
        index = index.reshape(windows, heads, *shape[-2:])
        if not keys_first:
            index = index.transpose(0, 1, 3, 2)
        first = int(index.flat[0])
        w = np.arange(windows)[:, None, None, None]
        h = np.arange(heads)[None, :, None, None]
        t = np.arange(tokens)[None, None, :, None]
        j = np.arange(d)[None, None, None, :]
        if first + heads * d > base_shape[-1]:
            continue
        # a sequence-first batch's rows are one image's heads of a tensor of B x C channels
        # only where each image's C channels are the whole row, or a projection of its own
        # (compiler/lowering.py reads a channel range, which B images' heads are not)
        separable = first == 0 and base_shape[-1] == heads * d or \
            _projected_input(graph, (base, first), rows, heads * d)[0] == "linear"
        forms = (False, True) if windows > 1 and separable else (False,)
        interleaved = next((form for form in forms if np.array_equal(index, (
            t * windows + w if form else w * tokens + t) * base_shape[-1] + first + h * d + j)),
            None)
        if interleaved is None:
            continue
        passed = [n for n in norms or [] if n[0] <= position]
        if not passed:
            if normalized is not None:
                normalized.append(None)
            return base, first, scale, windows, interleaved
        if interleaved:  # a normalised sequence-first batch: not read
            continue
        # one normalisation, over rows that are one head's d channels each, no factor
        # before it (a negative one would flip the sign it removes)
        if len(passed) != 1:
            continue
        (_, eps, after, factor), = passed
        normed = _indices_of(graph, base_shape, chain[:len(chain) - after])
        if factor != scale or normed is None or normed.shape[-1] != d:
            continue
        normed = normed.reshape(-1, d)
        if not np.array_equal(normed - normed[:, :1],
                              np.broadcast_to(np.arange(d), normed.shape)) \
                or np.any((normed[:, 0] % base_shape[-1] - first) % d):
            continue
        normalized.append(eps)
        return base, first, scale, windows, interleaved
    return None


#: a key or value source read transposed (_channel_major): (_TRANSPOSED, [windows, d, Tk])
_TRANSPOSED = "transposed"


def _channel_major(operand: relax.Expr, normalized: Optional[list] = None
                   ) -> Optional[Tuple[str, relax.Expr, float, int, bool]]:
    """K^T or V^T as a tensor of its own, one head of d (or dv) channel rows of Tk keys per
    window ([windows, d, Tk]: a conv's NCHW output reshaped, the keys of a non-local block,
    SAGAN's keys and values), in _heads' form with the base (_TRANSPOSED, operand): the core
    reads its transpose, one BDMA pass. None where the operand is no such tensor (several
    heads would interleave their channels in rows: not read)."""
    shape = _static(operand)
    if shape is None or len(shape) != 3 or str(getattr(operand.ty, "dtype", "")) != "float32":
        return None
    if normalized is not None:
        normalized.append(None)
    return _TRANSPOSED, operand, 1.0, shape[0], False


def _values_product(graph: _Graph, probabilities: relax.Var):
    """(its var, the matmul, V's operand, whether the product is transposed) of the product of
    the probabilities and V: P V (through layout ops that move nothing), or (SAGAN) V^T P^T,
    the output transposed, V^T its first operand; None if neither."""
    found = _identity(graph, probabilities, "relax.matmul")
    if found is not None:
        return found[0], found[1], found[1].args[1], False
    found = _transposed_values(graph, probabilities)
    return None if found is None else (found[0], found[1], found[1].args[0], True)


def _transposed_values(graph: _Graph, probabilities: relax.Var
                       ) -> Optional[Tuple[relax.Var, relax.Call]]:
    """(its var, its call) where the probabilities P [windows, T, Tk] are read, through one
    transpose of their last two axes, as the second operand of a matmul ``V^T P^T`` (SAGAN's
    ``bmm(v, attention.permute(0, 2, 1))``: V^T [windows, dv, Tk], the result the output
    transposed, [windows, dv, T]); None otherwise."""
    transpose = graph.only_reader(probabilities)
    call = graph.call(transpose, "relax.permute_dims") if transpose is not None else None
    shape = _static(probabilities)
    if call is None or shape is None or len(shape) != 3 or call.attrs.axes is None or \
            _ints(call.attrs.axes) != [0, 2, 1]:
        return None
    reader = graph.only_reader(transpose)
    pv = graph.call(reader, "relax.matmul") if reader is not None else None
    if pv is None or not pv.args[1].same_as(transpose) or pv.args[0].same_as(transpose):
        return None
    return reader, pv


def _merged(graph: _Graph, result: relax.Var, heads: int, tokens: int, d: int,
            windows: int = 1, width: Optional[int] = None) -> Optional[relax.Var]:
    """The last tensor of the layout ops after ``result`` ([windows x heads, tokens, d]) that
    holds the heads merged token-major ([windows x tokens, heads x d] in memory), in rows of
    ``width`` (default heads x d; a sequence-first batch: one image's heads x d)."""
    width = heads * d if width is None else width
    index = np.arange(windows * heads * tokens * d, dtype=np.int64)
    expected = index.reshape(windows, heads, tokens, d).transpose(0, 2, 1, 3).reshape(-1)
    index = index.reshape(_static(result))
    # the result itself where it already is (one head: a non-local block's [1, T, d], read
    # channel-major after by a transpose that stays)
    found = result if _static(result)[-1] == width and \
        np.array_equal(index.reshape(-1), expected) else None
    var = result
    while True:
        reader = graph.only_reader(var)
        call = graph.call(reader, *LAYOUT_OPS) if reader is not None else None
        if call is None or not call.args[0].same_as(var):
            return found
        index = _apply(call, index, graph.value.get)
        if index is None:
            return found
        shape = _static(call)
        if shape[-1] == width and np.array_equal(index.reshape(-1), expected):
            found = reader
        var = reader


class _Core:
    """One attention core: its inputs, each (base tensor, first channel) or, where the base is
    a projection of a token tensor, ("linear", that tensor, W rows, b rows, the projection's
    source name); its shapes; the
    merged heads' tensor ``output``; and, where a projection reads only that, the tensor
    ``projected`` = (the projection's result as it is read, W, b, the projection's source
    name: its own, not the layout ops' after it, which torch's MultiheadAttention names by
    the attention module)."""

    def __init__(self, q, k, v, heads, tokens, kv_tokens, d, scale, output, windows=1,
                 bias=None, width=None):
        self.q, self.k, self.v = q, k, v
        self.heads, self.tokens, self.kv_tokens, self.d = heads, tokens, kv_tokens, d
        # the channels of each input row the heads take: heads x d, or (a sequence-first
        # batch, whose images' rows alternate: each image's heads are heads of one image of
        # all the rows) one image's heads x d
        self.width = heads * d if width is None else width
        self.scale, self.output = scale, output
        # Swin: the windows (a batch of token blocks) and the constant added to the scores
        # before the softmax, [1 or windows, heads, tokens, kv_tokens] (None: no bias)
        self.windows, self.bias = windows, bias
        # Swin-V2's cosine attention: the eps of F.normalize of each head of q and of k (None:
        # not normalised); ``scale`` is then one factor per head (an array) or one float
        self.q_eps: Optional[float] = None
        self.k_eps: Optional[float] = None
        # a padding mask's computed bias, one value per key for every query and head (None:
        # none): the row added to the scores before the softmax
        self.key_bias: Optional[relax.Expr] = None
        # the row of ``key_bias`` (read as [R, Tk]) each head of each window adds, [windows x
        # heads] (None: no key bias)
        self.key_rows: Optional[np.ndarray] = None
        # where key_bias is where(mask, fill, 0) of a computed boolean mask (torch's
        # key_padding_mask): (mask, fill, whether the fill is where the mask is true)
        self.key_mask: Optional[Tuple[relax.Expr, float, bool]] = None
        self.projected: Optional[Tuple[relax.Var, np.ndarray, Optional[np.ndarray],
                                       Optional[str]]] = None
        # V's head size and the channels of its rows (and the output's) the heads take,
        # where they differ from the query's and key's (SAGAN: v of C channels, q and k of
        # C/8); whether the output is the merged heads transposed (one head, [windows, dv,
        # T]: SAGAN's bmm(v, attention^T)), which the core writes token-major and transposes
        self.dv, self.v_width, self.transposed = d, self.width, False
        # need_weights=True (nn.MultiheadAttention's default): the tensors that hold the mean
        # of each group of consecutive heads' probabilities (an image's), [images, T, Tk] in
        # memory, and the group's size: each becomes an attention layer of its own reading
        # the same Q and K (and bias), no V (_Rewriter._probabilities)
        self.means: List[Tuple[relax.Var, int]] = []


def _projected_input(graph: _Graph, source: Tuple[relax.Expr, int], tokens: int, width: int):
    """A head source whose base is x W^T + b of a token tensor x: ("linear", x, the rows of
    W and b of those channels, the projection's source name); else the source as it is."""
    base, first = source
    linear = graph.linear(base)
    if linear is None:
        return source
    data, w, b = linear
    rows = _rows_of(graph, data, tokens)
    if rows is None:
        return source
    return ("linear", rows, w[first:first + width], None if b is None else b[first:first + width],
            name_of(graph.call(base)))


def _projected_output(graph: _Graph, merged: relax.Var, shape: Tuple[int, ...]):
    """(the tensor, W, b, the projection's source name) where the merged heads' only reader
    is a projection whose result, through layout ops that move nothing, is a tensor of
    ``shape`` (the query's rows)."""
    reader = graph.only_reader(merged)
    if reader is None:
        return None
    result = reader
    after = graph.only_reader(reader)
    if after is not None and graph.linear(after) is not None:
        result = after
    linear = graph.linear(result)
    if linear is None or not linear[0].same_as(merged):
        return None
    _, w, b = linear
    found = None
    for var, chain in [(result, [])] + graph.forward(result):
        index = _indices_of(graph, _static(result), chain)
        if index is not None and tuple(index.shape) == tuple(shape[:-1]) + (w.shape[0],) and \
                np.array_equal(index.reshape(-1), np.arange(index.size)):
            found = var
    return None if found is None else (found, w, b, name_of(graph.call(result)))


def _unguarded(graph: _Graph, softmax_var: relax.Var, scores: relax.Expr) -> relax.Var:
    """The tensor P V reads: torch's softmax is followed by where(row all -inf, 0, P) (its
    guard for fully masked rows), which is P itself when no score is -inf, as no score is
    without a mask (the scores are products of finite tensors)."""
    for reader in graph.readers.get(softmax_var, []):
        where = graph.call(reader, "relax.where")
        if where is None or not where.args[2].same_as(softmax_var):
            continue
        zeros = graph.call(where.args[1], "relax.full_like")
        if zeros is None or not zeros.args[0].same_as(softmax_var) or \
                _scalar(zeros.args[1]) != 0.0:
            continue
        # the condition reads the scores only, through comparisons and reductions
        ok, stack, seen = True, [where.args[0]], set()
        while stack:
            expr = stack.pop()
            if expr.same_as(scores) or not isinstance(expr, relax.Var) or expr in seen:
                continue
            seen.add(expr)
            call = graph.call(expr)
            if call is None or call.op.name not in (
                    "relax.logical_not", "relax.astype", "relax.max", "relax.equal"):
                ok = False
                break
            stack.extend(a for a in call.args if not is_constant(a))
        if ok:
            return reader
    return softmax_var


def _heads_means(graph: _Graph, probabilities: relax.Var) -> Dict[relax.Var, Tuple]:
    """need_weights=True: the readers of the probabilities P ([blocks, T, Tk] in memory, the
    heads of each image consecutive) that begin layout ops and a ``mean`` averaging groups of
    consecutive blocks, [blocks / g, T, Tk] in memory (torch's ``attn.view(B, H, T, S)
    .mean(dim=1)``), or (``average_attn_weights=False``, g = 1) layout ops alone that
    keep P's order: reader -> (the mean's var or the last such view's, g)."""
    shape = _static(probabilities)
    found = {}
    if shape is None or len(shape) < 2:
        return found
    t, tk = shape[-2:]
    blocks = int(np.prod(shape[:-2]))
    for reader in graph.readers.get(probabilities, []):
        var, chain = reader, []
        while True:
            call = graph.call(var)
            if call is None or not call.args[0].same_as(
                    chain[-1] if chain else probabilities):
                break
            if call.op.name != "relax.mean":
                if call.op.name not in LAYOUT_OPS:
                    break
                chain.append(var)
                nxt = graph.only_reader(var)
                if nxt is None:
                    break
                var = nxt
                continue
            index = _indices_of(graph, shape, [graph.call(v) for v in chain])
            axes = [] if call.attrs.axis is None else [int(a) % index.ndim
                                                        for a in call.attrs.axis]
            if index is None or not axes:
                break
            g = int(np.prod([index.shape[a] for a in axes]))
            rows = np.moveaxis(index, axes, range(-len(axes), 0)).reshape(-1, g)
            if blocks % g:
                break
            expected = np.arange(blocks * t * tk).reshape(blocks // g, g, t, tk).transpose(
                0, 2, 3, 1).reshape(-1, g)
            if np.array_equal(np.sort(rows, axis=1), expected):
                found[reader] = (var, g)
            break
        # average_attn_weights=False: every head's probabilities, [blocks, T, Tk] in memory,
        # read through layout ops alone (the last tensor of them that holds them so) beside
        # P V, and by no matmul after them
        if reader in found or not chain or len(graph.readers.get(probabilities, [])) < 2 or \
                any(graph.call(r, "relax.matmul") is not None
                    for r in graph.readers.get(chain[-1], []) if r is not None):
            continue
        for i in range(len(chain), 0, -1):
            index = _indices_of(graph, shape, [graph.call(v) for v in chain[:i]])
            if index is not None and np.array_equal(index.reshape(-1), np.arange(index.size)):
                found[reader] = (chain[i - 1], 1)
                break
    return found


def _identity(graph: _Graph, var: relax.Var, until: str
              ) -> Optional[Tuple[relax.Var, relax.Call]]:
    """The op ``until`` that reads ``var`` through layout ops that move nothing (each the
    only reader of the one before): (its var, its call); None if there is none."""
    chain = []
    shape = _static(var)
    while True:
        reader = graph.only_reader(var)
        call = graph.call(reader) if reader is not None else None
        if call is None or not call.args[0].same_as(var):
            return None
        if call.op.name == until:
            break
        if call.op.name not in LAYOUT_OPS:
            return None
        chain.append(call)
        var = reader
    index = _indices_of(graph, shape, chain)
    if index is None or not np.array_equal(index.reshape(-1), np.arange(index.size)):
        return None
    return reader, call


def _constant_of(graph: _Graph, expr: relax.Expr) -> Optional[np.ndarray]:
    """The value of ``expr`` where it is layout ops and scalar factors of a constant (Swin's
    bias table gathered, viewed and permuted), else None."""
    candidates, _ = graph.back(expr)
    base, chain, scale = candidates[0]
    if not is_constant(base):
        return None
    value = np.asarray(constant_value(base), np.float64)
    for call in chain:
        value = _apply(call, value, graph.value.get)
        if value is None:
            return None
    return value * scale


def _scores_map(graph: _Graph, shape, steps: list):
    """(scale, index, bias) of the scores after ``steps`` from the matmul's output of
    ``shape``: the product of the scalar factors, the matmul's element each score is, and
    the constant added to it (scaled by the factors after it), in the matmul's order where
    the index is the identity; bias None where nothing is added."""
    if shape is None:
        return 1.0, None, None
    index = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    bias, scale, added = np.zeros(shape), np.ones(shape), False
    for step in steps:
        if isinstance(step, tuple) and step[0] == "scale":
            if np.broadcast_shapes(scale.shape, np.shape(step[1])) != scale.shape:
                return scale, None, None
            scale, bias = scale * step[1], bias * step[1]
        elif isinstance(step, tuple):
            if np.broadcast_shapes(bias.shape, step[1].shape) != bias.shape:
                return scale, None, None
            bias, added = bias + step[1], True
        else:
            index = _apply(step, index, graph.value.get)
            bias = None if index is None else _apply(step, bias, graph.value.get)
            scale = None if bias is None else _apply(step, scale, graph.value.get)
            if index is None or bias is None or scale is None:
                return 1.0, None, None
    if not added:
        return scale, index, None
    # nn.attention adds its bias to the scaled products: the bias is as it is
    return scale, index, bias.reshape(shape)


def _key_bias(graph: "_Graph", add: relax.Call
              ) -> Optional[Tuple[relax.Expr, relax.Expr, np.ndarray]]:
    """(the scores, the bias's rows, which row each group of scores reads) of ``add`` where one
    operand is the whole output [..., T, Tk] and the other, through layout ops (torch's
    expand over the heads: a reshape and a ``broadcast_to``), a computed tensor of R rows of
    one value per key, the same for every query of a group (a head of an image): a padding
    mask's ``(1 - mask) * min`` as [1, 1, 1, Tk] (R = 1), a padded batch's [B, 1, 1, Tk], or
    torch's ``where(key_padding_mask, -inf, 0)`` [B, Tk] expanded to [B, heads, 1, Tk]. The
    map is an int array over the output's groups (its axes but the last two, flattened);
    _core checks it against the core's windows and heads. None where the bias is no such
    rows."""
    out = _static(add)
    if out is None or len(out) < 2:
        return None
    tk = out[-1]
    groups = int(np.prod(out[:-2]))
    for scores, bias in (add.args, add.args[::-1]):
        if _static(scores) != out or str(getattr(bias.ty, "dtype", "")) != "float32":
            continue
        candidates, _ = graph.back(bias)
        # the furthest tensor the bias is layout ops of (no factor on the way: a factor
        # stays in the rows' own computation)
        for base, chain, scale in candidates:
            shape = _static(base)
            if scale != 1.0 or shape is None or not shape or int(np.prod(shape)) % tk or \
                    str(getattr(base.ty, "dtype", "")) != "float32":
                continue
            index = _indices_of(graph, shape, chain)
            if index is None or len(index.shape) > len(out):
                continue
            try:
                index = np.broadcast_to(index, out).reshape(groups, out[-2], tk)
            except ValueError:
                continue
            first = index[:, :1, :1]
            if not np.array_equal(index, np.broadcast_to(first + np.arange(tk), index.shape)) \
                    or np.any(first % tk):
                continue
            return scores, base, (first.reshape(-1) // tk).astype(np.int64)
    return None


def _score_steps(graph: _Graph, scores: relax.Expr):
    """(the matmul Q K^T, its output, the steps from it to ``scores``: layout ops,
    ("scale", factor) and ("bias", constant), last a ("key_bias", computed row) where one is
    added just before the softmax), or None where something else comes between."""
    # the scores: matmul(A, B), then scalar factors, adds of constants (Swin's relative
    # position bias and shifted windows' mask) and layout ops that move nothing, each read
    # once (the scores by the softmax and torch's guard alone)
    steps, expr = [], scores
    while True:
        call = graph.call(expr)
        readers = graph.readers.get(expr, [])
        if call is None or (len(readers) != 1 and not expr.same_as(scores)):
            return None
        if call.op.name == "relax.matmul":
            break
        if call.op.name in LAYOUT_OPS:
            steps.insert(0, call)
            expr = call.args[0]
            continue
        if call.op.name == "relax.add":
            a, b = call.args
            constant = _constant_of(graph, b)
            if constant is None:
                a, constant = b, _constant_of(graph, a)
            if constant is None:
                key_bias = _key_bias(graph, call) if not steps else None
                if key_bias is None:
                    return None
                a = key_bias[0]
                steps.insert(0, ("key_bias", key_bias[1:]))
                expr = a
                continue
            steps.insert(0, ("bias", constant))
            expr = a
            continue
        if call.op.name not in _SCALARS:
            return None
        factor = _scalar(call.args[1])
        other = call.args[0]
        if factor is None and call.op.name == "relax.multiply":
            factor, other = _scalar(call.args[0]), call.args[1]
        if factor is None and call.op.name == "relax.multiply":
            # a constant of more values (Swin-V2's logit scale, [heads, 1, 1]): per score,
            # read back as one per head or refused (_core)
            for a, b in (call.args, call.args[::-1]):
                constant = _constant_of(graph, b)
                if constant is not None and np.all(np.isfinite(constant)) and \
                        np.all(constant != 0):
                    steps.insert(0, ("scale", constant))
                    expr = a
                    break
            else:
                return None
            continue
        if not factor:
            return None
        steps.insert(0, ("scale", factor if call.op.name == "relax.multiply" else 1.0 / factor))
        expr = other
    return call, expr, steps


def _mask_fill(graph: _Graph, expr: relax.Expr) -> Optional[Tuple[relax.Expr, float, bool]]:
    """(mask, fill, on_true) where ``expr`` is ``where(mask, fill, 0)`` (on_true) or
    ``where(mask, 0, fill)`` of a computed boolean mask of ``expr``'s shape and one float
    fill (torch's key_padding_mask: ``where(mask, -inf, full_like(mask, 0))``; its ONNX
    export's zeros a constant), else None."""
    where = graph.call(expr, "relax.where")
    if where is None or is_constant(where.args[0]) or \
            str(getattr(where.args[0].ty, "dtype", "")) != "bool" or \
            _static(where.args[0]) != _static(expr):
        return None

    def single(arg):
        value = _constant_of(graph, arg)
        if value is None:
            zeros = graph.call(arg, "relax.full_like")
            return None if zeros is None else _scalar(zeros.args[1])
        flat = np.unique(np.asarray(value, np.float64).reshape(-1))
        return float(flat[0]) if flat.size == 1 else None

    on_true, on_false = single(where.args[1]), single(where.args[2])
    if on_true is not None and np.isnan(on_true) or on_false is not None and np.isnan(on_false):
        return None
    if on_false == 0.0 and on_true is not None and on_true != 0.0:
        return where.args[0], on_true, True
    if on_true == 0.0 and on_false is not None and on_false != 0.0:
        return where.args[0], on_false, False
    return None


def _core(graph: _Graph, softmax_var: relax.Var) -> Optional[_Core]:
    """The attention core around ``softmax_var`` (None: not one this module rewrites)."""
    softmax = graph.call(softmax_var, "relax.nn.softmax")
    shape = _static(softmax_var)
    # the scores may reach the softmax as rows of any rank (Paddle's [heads x tokens, keys]):
    # their last axis must be the keys' (checked once the matmul's shapes are known)
    if softmax is None or shape is None or len(shape) < 2 or \
            int(softmax.attrs.axis) % len(shape) != len(shape) - 1:
        return None
    scores = softmax.args[0]
    probabilities = _unguarded(graph, softmax_var, scores)
    found = _values_product_and_means(graph, probabilities)
    if found is None:
        return None
    (reader, pv, values, transposed), means = found
    walked = _score_steps(graph, scores)
    if walked is None:
        return None
    call, expr, steps = walked
    qk = call
    key_bias = steps.pop()[1] if steps and isinstance(steps[-1], tuple) and \
        steps[-1][0] == "key_bias" else None
    scale, index, bias = _scores_map(graph, _static(expr), steps)
    if index is None or not np.array_equal(index.reshape(-1), np.arange(index.size)):
        return None
    a_shape, b_shape, v_shape = (_static(e) for e in (qk.args[0], qk.args[1], values))
    if v_shape is not None and transposed:
        v_shape = v_shape[:-2] + v_shape[:-3:-1]  # V's [.., Tk, dv], as V^T [.., dv, Tk] holds it
    if None in (a_shape, b_shape, v_shape) or len(a_shape) < 3 or \
            a_shape[:-2] != b_shape[:-2] or a_shape[:-2] != v_shape[:-2] or \
            a_shape[-1] != b_shape[-2] or b_shape[-1] != v_shape[-2]:
        return None
    heads = int(np.prod(a_shape[:-2]))
    tokens, d = a_shape[-2:]
    kv_tokens, dv = v_shape[-2:]
    # the softmax's rows are the scores' rows (the layout ops between move nothing) only when
    # its axis has the keys' length; a transposed output is one head's (several heads'
    # would interleave in its rows)
    if shape[-1] != kv_tokens or any(str(getattr(e.ty, "dtype", "")) != "float32"
                                     for e in (qk.args[0], qk.args[1], values, reader)) or \
            (transposed and len(a_shape) != 3):
        return None
    q_eps, k_eps = [], []
    q = _heads(graph, qk.args[0], tokens, True, q_eps)
    k = _heads(graph, qk.args[1], kv_tokens, False, k_eps)
    v = _channel_major(values) if transposed else _heads(graph, values, kv_tokens, True)
    if k is None and q is not None and q[3] == int(np.prod(b_shape[:-2])) and not q[4]:
        k = _channel_major(qk.args[1], k_eps)
    # a factor on V scales the output, not the scores: nn.attention's scale would put it
    # inside the softmax
    if q is None or k is None or v is None or v[2] != 1.0 or not q[3] == k[3] == v[3] or \
            not q[4] == k[4] == v[4]:
        return None
    windows = q[3]
    # a sequence-first batch: each image's heads are more heads of one image of T rows (the
    # rows of every image, [T, batch x C]: image b's head h is head b heads + h)
    rows, width, v_width = windows, heads // windows * d, heads // windows * dv
    if q[4]:
        windows = 1
    heads //= windows
    # a transposed output (V^T P^T, one head) is the matmul's result itself, [windows, dv, T]
    output = reader if transposed else _merged(graph, reader, heads, tokens, dv, windows,
                                               v_width)
    if output is None or transposed and heads != 1:
        return None
    # a computed bias (_key_bias): which of its rows each head of each window reads, one row
    # for all, one per window (a padded batch of sentences, batch-first: each image a window)
    # or one per head (a sequence-first batch's images, whose heads are heads of one image:
    # image b's rows for its heads b heads_b ..); no constant bias beside it
    key_rows = None
    if key_bias is not None:
        base, key_rows = key_bias
        if bias is not None or key_rows.size != windows * heads:
            return None
        key_bias = base
    factors = _scores_factors(scale, bias, (windows, heads, tokens, kv_tokens))
    if factors is None:
        return None
    scale, bias = factors
    core = _Core(_projected_input(graph, q[:2], rows * tokens, width),
                 k[:2] if k[0] == _TRANSPOSED else
                 _projected_input(graph, k[:2], rows * kv_tokens, width),
                 v[:2] if v[0] == _TRANSPOSED else
                 _projected_input(graph, v[:2], rows * kv_tokens, v_width), heads, tokens,
                 kv_tokens, d, scale * q[2] * k[2], output, windows, bias, width)
    core.dv, core.v_width, core.transposed = dv, v_width, transposed
    core.q_eps, core.k_eps = q_eps[0], k_eps[0]
    core.key_bias, core.key_rows = key_bias, key_rows
    core.key_mask = None if key_bias is None else _mask_fill(graph, key_bias)
    if core.q[0] == "linear":
        core.projected = _projected_output(graph, output, _static(core.q[1]))
    weights_shape = _static(probabilities)
    for var, groups in means.values():
        if heads % groups or transposed or weights_shape[-2:] != (tokens, kv_tokens) or \
                int(np.prod(weights_shape)) != windows * heads * tokens * kv_tokens:
            return None
        core.means.append((var, groups))
    return core


def _values_product_and_means(graph: _Graph, probabilities: relax.Var):
    """The probabilities' product with V (as _values_product finds it) and their head means
    (need_weights=True's, _heads_means'), which are then the probabilities' only other
    readers; None where there is no such product."""
    means = _heads_means(graph, probabilities)
    readers = graph.readers.get(probabilities, [])
    if means:
        graph.readers[probabilities] = [r for r in readers if r not in means]
    try:
        found = _values_product(graph, probabilities)
    finally:
        graph.readers[probabilities] = readers
    return None if found is None else (found, means)


def _scores_factors(scale, bias: Optional[np.ndarray], blocks: Tuple[int, int, int, int]):
    """The core's factor on the scores, one or one per head (the same in every window), and
    its constant bias as [1 or windows, heads, T, Tk] from the scores map's per-element
    ``scale`` and ``bias`` over ``blocks`` (windows, heads, T, Tk); None where the factors
    differ within a head."""
    scale = np.asarray(scale, np.float64).reshape(blocks)
    per_head = scale[0, :, 0, 0]
    if not np.all(scale == per_head[None, :, None, None]):
        return None
    scale = float(per_head[0]) if np.all(per_head == per_head[0]) else per_head
    if bias is not None:
        bias = bias.reshape(blocks)
        if np.all(bias == bias[:1]):
            bias = bias[:1]
        # the scale of the products applies to them alone: the bias was added after it
        bias = bias.astype(np.float32)
    return scale, bias


def _l2_normalize(x: relax.Expr, eps: float) -> relax.Expr:
    """torch's F.normalize(x, dim=-1) in the ops torch.export spells it with (the form
    chains.l2_normalize matches): x / clip(sum(x^2, -1)^0.5, eps, inf)."""
    squares = relax.op.power(relax.op.abs(x), relax.const(2.0, "float32"))
    norm = relax.op.power(relax.op.sum(squares, axis=[-1], keepdims=True),
                          relax.const(0.5, "float32"))
    return relax.op.divide(x, relax.op.clip(norm, eps, float("inf")))


def _dense(x: relax.Expr, w: np.ndarray, b: Optional[np.ndarray], name: Optional[str],
           emit) -> relax.Expr:
    """``x W^T + b``: a dense layer of the tokens ``x`` (torch's Linear), its calls carrying
    the source name ``name`` (of the projection it replaces or is a part of); ``emit`` binds
    each call but the last, which is returned (the block builder's normaliser would bind
    nested calls itself, rebuilding them without their names)."""
    weight = emit(named(relax.op.permute_dims(relax.const(w, "float32"), [1, 0]), name))
    out = named(relax.op.matmul(x, weight), name)
    return out if b is None else named(relax.op.add(emit(out), relax.const(b, "float32")), name)


def _projection_names(core: _Core) -> Dict[str, Optional[str]]:
    """The source names of the dense layers made of q's, k's and v's projections: each
    projection's own, or, where one projection packs q, k and v (torch's MultiheadAttention,
    a ViT's qkv Linear), that name and the part: ``self_attn.q``."""
    parts = {"q": core.q, "k": core.k, "v": core.v}
    projections = {part: source[4] if source[0] == "linear" else None
                   for part, source in parts.items()}
    packed = len(set(projections.values())) == 1
    return {part: f"{found}.{part}" if found and packed else found
            for part, found in projections.items()}


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, cores: Dict[relax.Var, _Core]):
        super().__init__(mod)
        self.cores = cores
        self.projections = {}  # var of a projected output -> (core's result, W, b, name)
        self.made: Dict[tuple, relax.Expr] = {}  # the projections emitted, by what they are
        # need_weights=True: the tensor of each core's heads' mean probabilities -> (core, the
        # heads each mean averages)
        self.means = {var: (core, groups) for core in cores.values()
                      for var, groups in core.means}

    def _emit(self, binding_var: relax.Var, value: relax.Expr) -> relax.Expr:
        if isinstance(binding_var, relax.DataflowVar):
            return self.builder_.emit(value, name_hint=binding_var.name)
        return self.builder_.emit_output(value, name_hint=binding_var.name)

    def _linear(self, x: relax.Expr, w: np.ndarray, b: Optional[np.ndarray],
                name: Optional[str]) -> relax.Expr:
        key = (x, w.tobytes(), None if b is None else b.tobytes())
        if key not in self.made:
            self.made[key] = self.builder_.emit(_dense(x, w, b, name, self.builder_.emit))
        return self.made[key]

    def _input(self, source, core: _Core, tokens: int, eps: Optional[float], name: Optional[str],
               projection: Optional[str], value: bool = False) -> relax.Expr:
        """The heads of q, k or v (``value``) as [windows, tokens, heads, d or dv]:
        ``projection`` names the dense layer made of a projection's rows, ``name`` the layout
        ops (the core's)."""
        width, d = (core.v_width, core.dv) if value else (core.width, core.d)
        if source[0] == "linear":
            _, x, w, b, _ = source
            x = self._linear(self.visit_expr(x), w, b, projection)
        elif source[0] == _TRANSPOSED:  # [windows, d, Tk] -> the keys' rows [windows, Tk, d]
            x = self.builder_.emit(named(relax.op.permute_dims(
                self.visit_expr(source[1]), [0, 2, 1]), name))
        else:
            base, first = source
            x = self.visit_expr(base)
            shape = _static(base)
            if first != 0 or shape[-1] != width:
                x = self.builder_.emit(named(relax.op.strided_slice(
                    x, axes=[len(shape) - 1], begin=[first], end=[first + width]), name))
        shape = [core.windows, tokens, core.heads, d]
        if eps is not None:  # each head L2-normalised over its d channels, as rows of d
            x = self.builder_.emit(named(relax.op.reshape(
                x, [int(np.prod(shape[:3])), d]), name))
            x = self.builder_.emit(_l2_normalize(x, eps))
        return self.builder_.emit(named(relax.op.reshape(x, shape), name))

    def _key_row_values(self, core: _Core, name: Optional[str]) -> relax.Expr:
        """The key bias's rows as computed values: the tensor itself, or for a boolean mask's
        ``where(mask, fill, 0)`` (torch's key_padding_mask: fill -inf) the mask as 0 / 1 times
        the fill, one SDP pass (``where(mask, 0, fill)``: times -fill, plus fill). An infinite
        fill becomes float32's largest finite magnitude: a score plus it is that value for any
        score below 2^103 (it absorbs the score, as -inf does), so a row with a key left gives
        its masked keys exp(lowest - max) = 0, torch's probabilities exactly; a row whose every
        key is masked gives equal scores, the mean of V, where torch's softmax gives NaN (its
        guard zeros: docs/transformer_ops.md). (0 x -inf would be NaN for every valid key.)"""
        if core.key_mask is None:
            return self.visit_expr(core.key_bias)
        cond, fill, on_true = core.key_mask
        if not np.isfinite(fill):
            fill = float(np.copysign(np.finfo(np.float32).max, fill))
        emit = self.builder_.emit
        mask = emit(named(relax.op.astype(self.visit_expr(cond), "float32"), name))
        if on_true:
            return emit(named(relax.op.multiply(mask, relax.const(fill, "float32")), name))
        scaled = emit(named(relax.op.multiply(mask, relax.const(-fill, "float32")), name))
        return emit(named(relax.op.add(scaled, relax.const(fill, "float32")), name))

    def _key_rows(self, core: _Core, name: Optional[str]) -> relax.Expr:
        """The computed key bias as nn.attention's [windows, 1, T, Tk] (one row for every
        head of a window) or [windows, heads, T, Tk] (a row per head: a sequence-first batch,
        each image's heads reading its row): its R rows as [1, R, 1, Tk], copied to the T
        queries of each block by a 1x1 convolution of one-hot weights [blocks T, R] (exact: a
        sum of the row and zeros), the surface [1, blocks T, 1, Tk] the scores' SDP reads;
        made once for every core that adds the same rows the same way."""
        t, tk, windows, heads = core.tokens, core.kv_tokens, core.windows, core.heads
        rows_of = core.key_rows.reshape(windows, heads)
        per_head = bool(np.any(rows_of != rows_of[:, :1]))
        blocks = rows_of.reshape(-1) if per_head else rows_of[:, 0]
        key = (core.key_bias, t, blocks.tobytes())
        if key not in self.made:
            emit = self.builder_.emit
            row = self._key_row_values(core, name)
            count = int(np.prod(_static(core.key_bias))) // tk
            weights = np.zeros((blocks.size, t, count), np.float32)
            weights[np.arange(blocks.size), :, blocks] = 1.0
            row = emit(named(relax.op.reshape(row, [1, count, 1, tk]), name))
            rows = emit(named(relax.op.nn.conv2d(
                row, relax.const(weights.reshape(blocks.size * t, count, 1, 1)),
                data_layout="NCHW", kernel_layout="OIHW", out_layout="NCHW",
                out_dtype="float32"), name))
            self.made[key] = emit(named(relax.op.reshape(
                rows, [windows, heads if per_head else 1, t, tk]), name))
        return self.made[key]

    def _queries_keys(self, core: _Core, name: Optional[str], projections: Dict[str, str]):
        """The core's query and key heads, its bias and its scale, as nn.attention takes them
        (a scale per head: a constant [1, 1, heads, 1] on the query's heads, the scale 1)."""
        q = self._input(core.q, core, core.tokens, core.q_eps, name, projections["q"])
        k = self._input(core.k, core, core.kv_tokens, core.k_eps, name, projections["k"])
        bias = None if core.bias is None else relax.const(core.bias, "float32")
        if core.key_bias is not None:
            bias = self._key_rows(core, name)
        scale = core.scale
        if np.ndim(scale):  # one per head: a constant [1, 1, heads, 1] on the query's heads
            q = self.builder_.emit(named(relax.op.multiply(q, relax.const(
                np.asarray(scale, np.float32).reshape(1, 1, -1, 1), "float32")), name))
            scale = 1.0
        return q, k, bias, scale

    def _probabilities(self, core: _Core, groups: int, var: relax.Var,
                       name: Optional[str]) -> relax.Expr:
        """need_weights=True's mean of each ``groups`` consecutive heads' probabilities as
        ``reshape([permute_dims](mean(reshape(nn.attention(q, k, I), [W, T, G, g, Tk]),
        axis 3)))``: I the identity [W, Tk, H, Tk] (each head's P I = P, so the expression
        computes the probabilities wherever it runs), which the pattern table takes as one
        layer of the scores' and softmax's passes and the heads' mean, no V
        (``accel.attention_weights``: sim/decompose.attention_passes' ``groups``). A
        sequence-first batch's images (several groups of one image's heads) are put before
        their tokens, [G, T, Tk] as the mean's tensor lies."""
        q, k, bias, scale = self._queries_keys(core, name, _projection_names(core))
        w, t, h, tk = core.windows, core.tokens, core.heads, core.kv_tokens
        eye = np.broadcast_to(np.eye(tk, dtype=np.float32)[None, :, None, :],
                              (w, tk, h, tk)).copy()
        emit = self.builder_.emit
        p = emit(named(relax.op.nn.attention(q, k, relax.const(eye, "float32"), bias,
                                             scale=scale), name))
        p = emit(named(relax.op.reshape(p, [w, t, h // groups, groups, tk]), name))
        p = emit(named(relax.op.mean(p, axis=[3], keepdims=False), name))
        if h // groups > 1:  # [W, T, G, Tk] -> [W, G, T, Tk]
            p = emit(named(relax.op.permute_dims(p, [0, 2, 1, 3]), name))
        return self._emit(var, named(relax.op.reshape(p, list(_static(var))), name))

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if binding.var in self.means:
            core, groups = self.means.pop(binding.var)
            self.set_var_remap(binding.var, self._probabilities(
                core, groups, binding.var, name_of(binding.value)))
            return
        if binding.var in self.projections:
            result, w, b, name = self.projections.pop(binding.var)
            self.set_var_remap(binding.var, self._emit(binding.var, _dense(
                result, w, b, name or name_of(binding.value), self.builder_.emit)))
            return
        core = self.cores.get(binding.var)
        if core is None:
            super().visit_var_binding_(binding)
            return
        name = name_of(binding.value)
        projections = _projection_names(core)
        q, k, bias, scale = self._queries_keys(core, name, projections)
        v = self._input(core.v, core, core.kv_tokens, None, name, projections["v"], True)
        attention = self.builder_.emit(named(relax.op.nn.attention(q, k, v, bias, scale=scale),
                                             name))
        if core.projected is not None:  # the output projection reads the query's rows
            rows = list(_static(core.q[1])[:-1]) + [core.v_width]
            result = self.builder_.emit(named(relax.op.reshape(attention, rows), name))
            var, w, b, projection = core.projected
            self.projections[var] = (result, w, b, projection)
        if core.transposed:  # [windows, T, dv] written token-major, then transposed
            rows = self.builder_.emit(named(relax.op.reshape(
                attention, [core.windows, core.tokens, core.dv]), name))
            self.set_var_remap(binding.var, self._emit(
                binding.var, named(relax.op.permute_dims(rows, [0, 2, 1]), name)))
            return
        self.set_var_remap(binding.var, self._emit(
            binding.var, named(relax.op.reshape(attention, list(_static(binding.var))), name)))


def attention_cores(mod: tvm.IRModule) -> tvm.IRModule:
    """Every attention core of ``mod``'s functions (module docstring) as
    ``reshape(nn.attention(...))`` of its token tensors; the layout ops it replaces are dead
    code after (the partitioner's DeadCodeElimination removes them)."""
    result = tvm.IRModule(mod.functions, attrs=mod.attrs)
    for gv, function in mod.functions_items():
        if not isinstance(function, relax.Function) or (
                function.attrs is not None and "Composite" in function.attrs):
            continue
        graph = _Graph(function)
        cores = {}
        for var, value in graph.value.items():
            if isinstance(value, relax.Call) and getattr(value.op, "name", "") == \
                    "relax.nn.softmax":
                core = _core(graph, var)
                if core is not None:
                    cores[core.output] = core
        if cores:
            result[gv] = _Rewriter(result, cores).visit_expr(function)
    return result


def _vars(expr: relax.Expr) -> List[relax.Var]:
    found: List[relax.Var] = []
    relax.analysis.post_order_visit(expr, lambda e: found.append(e)
                                    if isinstance(e, relax.Var) else None)
    return found


#: The ops between an attention core's token tensors and nn.attention that its pattern takes,
#: each with what may come before it (chains.py: Swin-V2's factor per head on the query, the
#: heads' reshape, a channel range).
_INPUT_VIEWS = {"relax.multiply": ("relax.reshape",), "relax.reshape": ("relax.strided_slice",),
                "relax.strided_slice": ()}
_ATTENTION_OPS = ("relax.nn.attention", "relax.nn.attention_bias")


@relax.expr_functor.mutator
class _PrivateInputs(relax.PyExprMutator):
    """Each nn.attention's input views (of q, k and v: a computed bias is an input of its
    composite, read as it is) bound again for it alone where one is shared."""

    def __init__(self, mod: tvm.IRModule, function: relax.Function):
        super().__init__(mod)
        self.value = {b.var: b.value for block in function.body.blocks for b in block.bindings}
        self.readers = read_counts(function)

    def _view(self, expr: relax.Expr, allowed) -> Optional[relax.Call]:
        value = self.value.get(expr) if isinstance(expr, relax.Var) else None
        if isinstance(value, relax.Call) and getattr(value.op, "name", "") in allowed and \
                (value.op.name != "relax.multiply" or is_constant(value.args[1])):
            return value
        return None

    def _copied(self, expr: relax.Expr, allowed=tuple(_INPUT_VIEWS)) -> relax.Expr:
        """The views from a token tensor to ``expr``, bound anew (the tensor itself not)."""
        view = self._view(expr, allowed)
        if view is None:
            return self.visit_expr(expr)
        args = [self._copied(view.args[0], _INPUT_VIEWS[view.op.name])] + \
            [self.visit_expr(a) for a in view.args[1:]]
        return self.builder_.emit(relax.Call(view.op, args, view.attrs, view.ty_args,
                                             view.span))

    def shared(self, expr: relax.Expr, allowed=tuple(_INPUT_VIEWS)) -> bool:
        view = self._view(expr, allowed)
        return view is not None and (self.readers.get(expr, 0) > 1 or
                                     self.shared(view.args[0], _INPUT_VIEWS[view.op.name]))

    def sharing(self, value: relax.Expr) -> bool:
        """Whether ``value`` is an nn.attention with a shared input view."""
        return isinstance(value, relax.Call) and getattr(value.op, "name", "") in \
            _ATTENTION_OPS and any(self.shared(arg) for arg in value.args[:3])

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        if not self.sharing(value):
            super().visit_var_binding_(binding)
            return
        args = [self._copied(arg) if i < 3 and self.shared(arg) else self.visit_expr(arg)
                for i, arg in enumerate(value.args)]
        new = relax.Call(value.op, args, value.attrs, value.ty_args, value.span)
        if isinstance(binding.var, relax.DataflowVar):
            var = self.builder_.emit(new, name_hint=binding.var.name)
        else:
            var = self.builder_.emit_output(new, name_hint=binding.var.name)
        self.set_var_remap(binding.var, var)


def private_attention_inputs(mod: tvm.IRModule) -> tvm.IRModule:
    """An nn.attention whose input views (its pattern's reshape of the heads, channel range,
    factor per head) another op reads too -> the views bound again for it alone. Two cores
    read the same views where their keys and values are the same projections of one tensor
    (nn.TransformerDecoder's cloned layers before training attend to the one memory with
    equal weights), which the rewrites that merge equal expressions make one binding; the
    attention pattern refuses a view read outside it (its chain would leak), which left
    both cores on the host."""
    result = tvm.IRModule(mod.functions, attrs=mod.attrs)
    for gv, function in mod.functions_items():
        if isinstance(function, relax.Function) and not (
                function.attrs is not None and "Composite" in function.attrs):
            rewriter = _PrivateInputs(result, function)
            if any(rewriter.sharing(value) for value in rewriter.value.values()):
                result[gv] = rewriter.visit_expr(function)
    return result
