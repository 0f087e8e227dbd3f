"""C text of the generated code: engine descriptors, the configuration, and the translation
unit around the layers. The fixed C lives in ``accel/tvm_glue.h``; what is written here is
what differs from one function to the next. No TVM here."""
from __future__ import annotations

import re
import textwrap
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..._accel_ffi import ffi
from ...sim.config import AccelConfig
from ...sim.vocabulary import (ACTIVATIONS, CONV_MODES, ELEMENTWISE, LAYOUTS, PIXEL_FORMATS,
                                POOLS, PRECISIONS, SRAM_STREAMS, WEIGHT_FORMATS)
from ..layer import ConvSpec, CopySpec, LrnSpec, PoolSpec, RubikSpec


def c_float(value: float) -> str:
    """A float literal that reads back as the same float32."""
    if np.isinf(value):
        return "INFINITY" if value > 0 else "-INFINITY"
    return f"{float(np.float32(value))!r}f"


def c_string(text: str) -> str:
    """``text`` as a C string literal: quotes and backslashes escaped, anything outside
    printable ASCII as octal escapes of its UTF-8 bytes (an ONNX node's name may hold any)."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in '"\\':
            out.append("\\" + char)
        elif 32 <= byte < 127 and char != "?":  # "?" escaped: no trigraph can form
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def run_names(label: str, source: str) -> str:
    """What an error raised during a run starts with: the source model's name of its layer and
    the run's label (``layer1.0.{conv1,bn1,relu} (run f0.3 accel.conv2d_bn_relu)``), or the
    label alone (a module without source names)."""
    return f"{source} (run {label})" if source else f"run {label}"


def name_run(label: str, source: str) -> str:
    """The statement that opens a run's code: the glue's errors until the next name the run
    (``accel_glue_function.layer``)."""
    return f"  k_fn.layer = {c_string(run_names(label, source))};"


def c_precision(precision: str) -> str:
    return PRECISIONS[precision].c_name


def c_layout(layout: str) -> str:
    return LAYOUTS[layout].c_name


def c_activation(act: Optional[str]) -> str:
    return ACTIVATIONS[act].c_name


def c_elementwise(ew_op: Optional[str]) -> str:
    return ELEMENTWISE[ew_op].c_name


def conv_op(c: ConvSpec, weights: str, precision: str, in_zero: int = 0,
            pack: Optional[Tuple[int, int]] = None, modes: Optional[dict] = None,
            memory=None) -> str:
    """A CONV descriptor (``OP`` stands for the op); ``pack``: (input channels, slot) of weights
    the glue packs once; ``modes``: the modes chosen (``Layer.conv_modes``: input modes and
    Winograd); ``memory``: the CBUF split and weight format
    (:class:`~accel_codegen.compiler.codegen.memory.ConvChoice`)."""
    k, _, kh, kw = c.weight_shape
    t, left, b, r = c.padding
    text = textwrap.dedent(f"""\
        OP.engine = ACCEL_ENGINE_CONV;  /* {c.source} */
        OP.conv.out_c = {k};
        OP.conv.kernel_h = {kh}; OP.conv.kernel_w = {kw};
        OP.conv.stride_h = {c.stride[0]}; OP.conv.stride_w = {c.stride[1]};
        OP.conv.pad_top = {t}; OP.conv.pad_left = {left}; OP.conv.pad_bottom = {b}; \
OP.conv.pad_right = {r};
        OP.conv.dilation_h = {c.dilation[0]}; OP.conv.dilation_w = {c.dilation[1]};
        OP.conv.groups = {c.groups};
        OP.conv.precision = {c_precision(precision)};
        OP.conv.weights = {weights};""")
    if in_zero:
        text += f"\nOP.conv.in_zero = {in_zero};"
    modes = modes or {}
    if modes.get("pixel_format"):
        text += (f"\nOP.conv.pixel_format = {PIXEL_FORMATS[modes['pixel_format']].c_name};"
                 "  /* image input: the function's input read as pixels */")
    if modes.get("multi_batch"):
        text += "\nOP.conv.multi_batch = 1;  /* weights fetched once for the batch */"
    if modes.get("mode", "direct") != "direct":
        text += f"\nOP.conv.mode = {CONV_MODES[modes['mode']].c_name};"
    if memory is not None:
        text += (f"\nOP.conv.data_banks = {memory.data_banks}; "
                 f"OP.conv.weight_banks = {memory.weight_banks};  /* CBUF split */")
        if memory.weight_format != "dense":
            text += (f"\nOP.conv.weight_format = {WEIGHT_FORMATS[memory.weight_format].c_name}; "
                     f"OP.conv.weights_nonzero = {memory.weights_nonzero};")
    if pack is not None:
        text += f"\nif (accel_glue_pack_weights(&k_fn, &OP, {pack[0]}, {pack[1]}) != 0) return -1;"
    return text


def sdp_op(comment: str, fields: Dict[str, object]) -> str:
    """An SDP descriptor with the given fields (C expressions)."""
    return "\n".join([f"OP.engine = ACCEL_ENGINE_SDP;  /* {comment} */"] +
                     [f"OP.sdp.{field} = {value};" for field, value in fields.items()])


def pool_op(p: PoolSpec, precision: str, zero: int = 0) -> str:
    t, left, b, r = p.padding
    return textwrap.dedent(f"""\
        OP.engine = ACCEL_ENGINE_PDP;  /* {p.source} */
        OP.pdp.pool = {POOLS[p.kind].c_name};
        OP.pdp.kernel_h = {p.kernel[0]}; OP.pdp.kernel_w = {p.kernel[1]};
        OP.pdp.stride_h = {p.stride[0]}; OP.pdp.stride_w = {p.stride[1]};
        OP.pdp.pad_top = {t}; OP.pdp.pad_left = {left}; OP.pdp.pad_bottom = {b}; \
OP.pdp.pad_right = {r};
        OP.pdp.count_include_pad = {int(p.count_include_pad)};
        OP.pdp.precision = {c_precision(precision)};
        OP.pdp.zero = {zero};""")


def cdp_op(n: LrnSpec, precision: str) -> str:
    """A CDP local response normalisation."""
    return textwrap.dedent(f"""\
        OP.engine = ACCEL_ENGINE_CDP;  /* local response norm */
        OP.cdp.local_size = {n.size};
        OP.cdp.alpha = {c_float(n.alpha)}; OP.cdp.beta = {c_float(n.beta)}; \
OP.cdp.k = {c_float(n.k)};
        OP.cdp.precision = {c_precision(precision)};""")


def bdma_op(c: CopySpec, dst_channels: int, precision: str) -> str:
    """A BDMA copy of channels src_offset + r * src_repeat_stride + i * src_stride to
    dst_offset + r * dst_repeat_stride + i * dst_stride (the repeat's fields only where it
    has one: the descriptor starts zeroed)."""
    repeat = "" if not c.repeat else (
        f"\n        OP.bdma.repeat = {c.repeat}; OP.bdma.src_repeat_stride = "
        f"{c.src_repeat_stride}; OP.bdma.dst_repeat_stride = {c.dst_repeat_stride};")
    copies = f"{c.repeat + 1} x {c.channels} channels" if c.repeat else f"{c.channels} channels"
    return textwrap.dedent(f"""\
        OP.engine = ACCEL_ENGINE_BDMA;  /* {copies} */
        OP.bdma.src_offset = {c.src_offset}; OP.bdma.src_stride = {c.src_stride}; \
OP.bdma.channels = {c.channels};
        OP.bdma.dst_offset = {c.dst_offset}; OP.bdma.dst_stride = {c.dst_stride}; \
OP.bdma.dst_channels = {dst_channels};
        OP.bdma.precision = {c_precision(precision)};{repeat}""")


def rubik_op(r: RubikSpec, precision: str) -> str:
    """A RUBIK contract: the phase cube's channel groups into stride_y x stride_x blocks."""
    return textwrap.dedent(f"""\
        OP.engine = ACCEL_ENGINE_RUBIK;  /* contract: {r.source} */
        OP.rubik.mode = ACCEL_RUBIK_CONTRACT;
        OP.rubik.stride_x = {r.stride_x}; OP.rubik.stride_y = {r.stride_y};
        OP.rubik.precision = {c_precision(precision)};""")


def convert(src: str, src_precision: str, dst: str, dst_precision: str, count: int,
            scale: float = 1.0, zero: int = 0) -> str:
    """Data crossing the accelerator's border (accel_convert)."""
    return (f"if (accel_glue_convert(&k_fn, {src}, {c_precision(src_precision)}, {dst}, "
            f"{c_precision(dst_precision)}, {count}, {c_float(scale)}, {zero}) != 0) return -1;")


def sram_streams(ops: List[str], streams: Sequence[str]) -> List[str]:
    """The ops with their secondary-memory bits set: the run's input (and resident weights) on
    its first op, its output on its last, an element-wise operand on the SDP(s) that read one."""
    bits: List[List[str]] = [[] for _ in ops]
    if "input" in streams:
        bits[0].append(SRAM_STREAMS["input"])
    if "weights" in streams:
        bits[0].append(SRAM_STREAMS["weights"])
    if "operand" in streams:
        for i, op in enumerate(ops):
            if "OP.sdp.ew_op" in op:
                bits[i].append(SRAM_STREAMS["operand"])
    if "output" in streams:
        bits[-1].append(SRAM_STREAMS["output"])
    return [op + (f"\nOP.sram = {' | '.join(b)};  /* in SRAM */" if b else "")
            for op, b in zip(ops, bits)]


def run_layer(ops: List[str], data: str, in_shape: Sequence[int], output: str,
              out_shape: Sequence[int], fused: bool, label: str, precision: str,
              out_precision: Optional[str] = None, in_layout: str = "nchw",
              out_layout: str = "nchw") -> List[str]:
    """One accelerator run: the ops' descriptors, then accel_run through the glue; its data in
    ``precision`` and ``in_layout``, its output in ``out_precision`` (default the same) and
    ``out_layout``."""
    lines = [f"  accel_op ops[{len(ops)}];", "  memset(ops, 0, sizeof ops);"]
    for i, op in enumerate(ops):
        lines.extend("  " + re.sub(r"\bOP\b", f"ops[{i}]", line) for line in op.splitlines())
    mode = "ACCEL_MODE_FUSED" if fused else "ACCEL_MODE_INDEPENDENT"
    lines.append(f"  static const int32_t in_shape[4] = {{{', '.join(map(str, in_shape))}}}, "
                 f"out_shape[4] = {{{', '.join(map(str, out_shape))}}};")
    lines.append(f"  if (accel_glue_run_layer(&k_fn, ops, {len(ops)}, {data}, in_shape, {output}, "
                 f"out_shape, {mode}, \"{label}\", {c_precision(precision)}, "
                 f"{c_precision(out_precision or precision)}, {c_layout(in_layout)}, "
                 f"{c_layout(out_layout)}) != 0) return -1;")
    return lines


#: What a layer's C refers to that differs between two layers of the same code: the function's
#: arguments, scratch and constants (by index), string literals (run labels, layer names) and
#: the slot of weights the glue packs once (a counter over the function: fp16 and int8
#: constant weights, Winograd, C16 1x1 convs), which group "pack" holds.
_REFERENCE = re.compile(r'\b(a|k_temp|k_const)\[(\d+)\]|"(?:[^"\\\n]|\\.)*"|'
                        r'(?P<pack>accel_glue_pack_weights\(&k_fn, &ops\[\d+\], \d+, )(\d+)\)')
_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
#: the parameter that stands for each kind of reference in a shared layer function
_PARAMETERS = {"a": ("A", "float* const*"), "k_temp": ("T", "void* const*"),
               "k_const": ("C", "const void* const*"), '"': ("S", "const char* const*"),
               "pack": ("P", "const int*")}


#: Layers of fewer runs stay inline: a layer of one run or a few (a conv, a concat's copies)
#: gains little from a shared function, and its run reads better where it runs; a layer norm
#: (6 runs in fp32 since its sums became CONVs, tens in fp16), a softmax or an attention is
#: many, the same in every block of a transformer.
SHARED_LAYER_RUNS = 6


def _template(text: str) -> Optional[Tuple[str, Dict[str, List[str]]]]:
    """A layer's C as a function body over its references (``_REFERENCE``), each distinct
    one a parameter in the order it first appears, with the references by kind; None when
    something in it is not a reference the function can take as a parameter."""
    refs: Dict[str, List[str]] = {kind: [] for kind in _PARAMETERS}

    def parameter(match: "re.Match[str]") -> str:
        if match.group("pack"):
            kind, ref = "pack", match.group(4)
        else:
            kind, ref = match.group(1) or '"', match.group(0)
        seen = refs[kind]
        if ref not in seen:
            seen.append(ref)
        parameter = f"{_PARAMETERS[kind][0]}[{seen.index(ref)}]"
        return f"{match.group('pack')}{parameter})" if kind == "pack" else parameter

    body = _REFERENCE.sub(parameter, _COMMENT.sub("", text))
    if re.search(r"\b(a|k_temp|k_const|k_packed|k_const_object)\b", body):
        return None  # used otherwise than as an element read: stays where it is
    return body, refs


def shared_layers(layers: Sequence[str]) -> Tuple[List[str], List[str]]:
    """Layers whose C is the same but for the buffers, constants and strings it names (the
    blocks of a transformer, a layer norm's passes) printed once, as a static function that
    takes those as arrays; each such layer then calls it. Returns (the functions, the body's
    statements). The calls and their arguments, and so what runs, are the same as the layers'
    own text; the C is shorter, which is what the compiler's time goes by."""
    templates = [_template(text) if text.count("accel_glue_run_layer(") >= SHARED_LAYER_RUNS
                 else None for text in layers]
    uses: Dict[str, int] = {}
    for template in templates:
        if template is not None:
            uses[template[0]] = uses.get(template[0], 0) + 1
    names: Dict[str, str] = {}
    functions: List[str] = []
    body: List[str] = []
    for text, template in zip(layers, templates):
        if template is None or uses[template[0]] < 2:
            body.append(text)
            continue
        code, refs = template
        if code not in names:
            names[code] = f"layer_code{len(names)}"
            signature = ", ".join(f"{ctype} {name}" for name, ctype in _PARAMETERS.values())
            functions.append(f"static int {names[code]}({signature}) {{\n"
                             f"{textwrap.indent(code.strip(), '  ')}\n  return 0;\n}}")
        first = _COMMENT.search(text)
        call = [first.group(0)] if first else []
        arrays = []
        for kind, (name, ctype) in _PARAMETERS.items():
            if refs[kind]:
                element = ctype.rsplit("*", 1)[0].strip()
                storage = "static const char* const" if kind == '"' else element
                call.append(f"  {storage} {name}_[{len(refs[kind])}] = "
                            f"{{{', '.join(refs[kind])}}};")
                arrays.append(f"{name}_")
            else:
                arrays.append("NULL")
        call.append(f"  if ({names[code]}({', '.join(arrays)}) != 0) return -1;")
        body.append("\n".join(["{", *call, "}"]))
    return functions, body


#: The ELF section where each generated function leaves its record, a JSON text ended by a
#: NUL (the linker puts the functions' records one after the other): the configuration, the
#: precision and each layer's source-model name (:func:`accel_codegen.compiler.library.
#: library_info`).
INFO_SECTION = ".accel_info"


def config_filler(cfg: AccelConfig) -> str:
    """The body of ``fill_config``: every field of the C accel_config, as the configuration's
    own conversion (AccelConfig.to_c) sets it, so a new field cannot be left out."""
    c_config = cfg.to_c()
    lines = []
    for name, field in ffi.typeof("accel_config").fields:
        value = getattr(c_config, name)
        if field.type.kind == "array":
            text = ffi.string(value).decode().replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'  strncpy(config->{name}, "{text}", sizeof config->{name} - 1);')
        elif field.type.cname == "double":
            lines.append(f"  config->{name} = {float(value)!r};")
        else:
            note = {"precisions": cfg.precisions, "features": cfg.features}.get(name)
            comment = f"  /* {', '.join(note) or 'none'} */" if note is not None else ""
            lines.append(f"  config->{name} = {int(value)};{comment}")
    return "\n".join(lines)


def _table(values: Sequence[str]) -> str:
    return ", ".join(values) or "0"


def convert_op(precision: str, quant_scale: float, quant_zero: int) -> str:
    """A converting SDP from ``precision`` to the other of int8 / fp16; the int8 side's
    scale and zero point."""
    return sdp_op(f"{precision} -> {'fp16' if precision == 'int8' else 'int8'}", {
        "precision": c_precision(precision), "convert": 1, "cvt_scale": c_float(quant_scale),
        "cvt_zero": quant_zero})


def translation_unit(*, symbol: str, name: str, header: str,
                     cfg: AccelConfig, args: Sequence[Tuple[str, Tuple[int, ...]]],
                     num_inputs: int, constants: Sequence[Tuple[int, Tuple[str, int]]],
                     temps: Sequence[int], num_packed: int, body: str, info: str,
                     functions: Sequence[str] = ()) -> str:
    """The C source of one external function. ``name``: what its errors outside a run start
    with ("external function f0"); ``args``: (what, shape) of every argument; ``constants``:
    (value count, DLPack type) of each; ``temps``: scratch bytes; ``body``: the statements of
    run_layers, indented; ``info``: the function's record (JSON) in the library's
    :data:`INFO_SECTION`; ``functions``: the layer functions run_layers calls
    (:func:`shared_layers`)."""
    shapes = "\n".join(f"static const int64_t k_shape{i}[{max(len(shape), 1)}] = "
                       f"{{{_table(map(str, shape))}}};" for i, (_, shape) in enumerate(args))
    arg_table = ",\n  ".join(f'{{"{what}", {len(shape)}, k_shape{i}}}'
                             for i, (what, shape) in enumerate(args))
    counts = _table(str(count) for count, _ in constants)
    types = _table("{%s, %d}" % dl for _, dl in constants) if constants else "{0, 0}"
    n_const, n_temps = len(constants), len(temps)
    return f"""\
{header}
#include <math.h>

#include "accel/tvm_glue.h"

{shapes}
static const accel_glue_arg k_args[{len(args)}] = {{
  {arg_table}}};
static const int64_t k_const_count[{n_const + 1}] = {{{counts}}};
static const accel_glue_dtype k_const_type[{n_const + 1}] = {{{types}}};
static const void* k_const[{n_const + 1}];
static void* k_const_object[{n_const + 1}];
static const int64_t k_temp_bytes[{n_temps + 1}] = {{{_table(map(str, temps))}}};
static void* k_temp[{n_temps + 1}];
static void* k_packed[{num_packed + 1}];
static size_t k_packed_bytes[{num_packed + 1}];
static pthread_mutex_t k_lock = PTHREAD_MUTEX_INITIALIZER;

static void fill_config(accel_config* config) {{
{config_filler(cfg)}
}}

static int run_layers(float** a);

/* What the library remembers of this function (compiler/library.py: library_info). */
__attribute__((used, section("{INFO_SECTION}"))) static const char k_info[] =
  {c_string(info)};

static accel_glue_function k_fn = {{
  {c_string(name)}, "{symbol}", fill_config, run_layers,
  {num_inputs}, {len(args) - num_inputs}, k_args,
  {n_const}, k_const_count, k_const_type, k_const, k_const_object,
  {n_temps}, k_temp_bytes, k_temp,
  {num_packed}, k_packed, k_packed_bytes, &k_lock}};

{"".join(f + chr(10) + chr(10) for f in functions)}static int run_layers(float** a) {{
{body}
  return 0;
}}

ACCEL_GLUE_EXPORT({symbol}, k_fn)
"""
