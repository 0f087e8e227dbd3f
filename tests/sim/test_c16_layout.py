"""Channel-blocked (C16) fp32 tensors: every run gives, bit for bit, what it gives on NCHW data,
whether a C16 kernel runs it (1x1 at stride 1 or 2, depthwise 3x3 and dense 3x3 convolutions,
with their SDP fused; the dense 3x3 in test_c16_conv3x3.py, Winograd mode in
test_c16_winograd.py, pooling in test_c16_pool.py) or the runtime converts around the NCHW
kernels (everything else, and any run an observer watches), at 1-3 threads; the cost does not
depend on the layout; and a bad layout is refused by name."""
import pathlib

import numpy as np
import pytest

from accel_codegen import AccelInvalidError, Bdma, Conv, Device, Pool, Sdp
from accel_codegen._accel_ffi import ffi, lib
from accel_codegen.sim.device import c16_native, host_isa
from accel_codegen.sim.layout import c16_shape, from_c16, nchw_shape, to_c16
from accel_codegen.sim.observer import observing
from conftest import assert_same

# The C16 kernels are AVX-512 code: a build without it converts every C16 run around the NCHW
# kernels (the same bits and cost; c16_native is false for every chain).
C16_KERNELS = "avx512" in host_isa()

DEVICES = {threads: Device("nv_full", num_threads=threads) for threads in (1, 2, 3)}


def _data(rng, shape, zeros=True):
    """Normal values with a sprinkling of +0 and -0 (their signs must survive)."""
    x = rng.standard_normal(shape, dtype=np.float32)
    if zeros:
        x.flat[::7] = 0.0
        x.flat[3::11] = -0.0
    return x


def _epilogue(kind, rng, k, out_shape):
    scale = rng.standard_normal(k, dtype=np.float32)
    shift = rng.standard_normal(k, dtype=np.float32)
    if kind == "none":
        return None
    if kind == "bn_relu":
        return Sdp(scale=scale, shift=shift, act="relu")
    if kind == "bn_clip":
        return Sdp(scale=scale, shift=shift, act="clip", clip=(0.0, 6.0))
    if kind == "scale_add_relu":
        return Sdp(scale=scale, ew_op="add", operand=_data(rng, out_shape), act="relu")
    if kind == "shift":
        return Sdp(shift=shift)
    raise ValueError(kind)


def _blocked(op):
    """The op with its element-wise operand in C16, as a C16 run reads it."""
    if isinstance(op, Sdp) and op.operand is not None:
        return Sdp(scale=op.scale, shift=op.shift, ew_op=op.ew_op, operand=to_c16(op.operand),
                   act=op.act, clip=op.clip)
    return op


def _same_either_way(ops, x, threads=2, mode="fused", native=True):
    """The run in C16 gives the NCHW run's bits and cost; ``native``: on a C16 kernel where the
    build has them (else converted around the NCHW kernels)."""
    assert c16_native("nv_full", ops, x.shape, mode=mode) == (native and C16_KERNELS)
    device = DEVICES[threads]
    expected, stats = device.run(ops, x, mode=mode)
    blocked, blocked_stats = device.run([_blocked(op) for op in ops], to_c16(x), mode=mode,
                                        layout="c16")
    assert blocked.shape == c16_shape(expected.shape)
    assert_same(from_c16(blocked).view(np.uint32), expected.view(np.uint32))
    assert blocked_stats.cycles == stats.cycles
    return expected


POINTWISE = [  # (n, c, k, h, w)
    (1, 16, 16, 7, 7), (2, 32, 48, 13, 17), (1, 64, 80, 14, 14), (1, 48, 64, 5, 3),
    (1, 96, 128, 28, 28), (2, 256, 64, 7, 9), (1, 512, 32, 1, 1), (1, 16, 256, 56, 56),
    (2, 32, 64, 15, 15),  # 15x15: a second strip, then the dot-product tail
    (1, 1024, 1024, 7, 7)]  # 4 MB of weights on one panel: conv_f32's channel passes


@pytest.mark.parametrize("n,c,k,h,w", POINTWISE)
@pytest.mark.parametrize("epilogue", ["none", "bn_relu", "bn_clip", "scale_add_relu", "shift"])
def test_pointwise_c16_equals_nchw(rng, n, c, k, h, w, epilogue):
    x = _data(rng, (n, c, h, w))
    conv = Conv(_data(rng, (k, c, 1, 1), zeros=False))
    sdp = _epilogue(epilogue, rng, k, (n, k, h, w))
    _same_either_way([conv] + ([sdp] if sdp is not None else []), x)


STRIDED = [  # (n, c, k, h, w): 1x1/2 downsamples; conv_f32's implicit GEMM (28x28, 32x20) and
    # packed path (the rest), with dot-product tails (6x6 -> 3x3: all, 132x24 -> 66x12: 8) or
    # none; one output position (n = 1; n = 2 is OpenBLAS's: converted around)
    (1, 64, 128, 56, 56), (2, 32, 48, 13, 17), (1, 48, 64, 6, 6), (1, 32, 16, 132, 24),
    (1, 16, 32, 64, 40), (1, 256, 512, 14, 14), (1, 128, 32, 15, 9), (1, 32, 16, 2, 2),
    (1, 1024, 1024, 14, 14)]  # ResNet-50's last downsample, half its channels: the passes


@pytest.mark.parametrize("n,c,k,h,w", STRIDED)
@pytest.mark.parametrize("epilogue", ["none", "bn_relu", "bn_clip", "scale_add_relu", "shift"])
def test_strided_pointwise_c16_equals_nchw(rng, n, c, k, h, w, epilogue):
    x = _data(rng, (n, c, h, w))
    conv = Conv(_data(rng, (k, c, 1, 1), zeros=False), stride=(2, 2))
    sdp = _epilogue(epilogue, rng, k, (n, k, (h + 1) // 2, (w + 1) // 2))
    _same_either_way([conv] + ([sdp] if sdp is not None else []), x)


@pytest.mark.parametrize("n,c,k,h,w", STRIDED)
@pytest.mark.parametrize("epilogue", ["none", "bn_relu", "scale_add_relu"])
def test_strided_pointwise_from_c16_into_nchw(rng, n, c, k, h, w, epilogue):
    """A C16 input into an NCHW output (the layer before a stage the plan keeps NCHW) runs
    converted around conv_f32, of a 1x1/2 only the phase it reads at stride 1 (device.c's
    phase_conv): the NCHW run's bits and cost at 1-3 threads."""
    x = _data(rng, (n, c, h, w))
    ops = [Conv(_data(rng, (k, c, 1, 1), zeros=False), stride=(2, 2))]
    sdp = _epilogue(epilogue, rng, k, (n, k, (h + 1) // 2, (w + 1) // 2))
    ops += [sdp] if sdp is not None else []
    for threads in (1, 2, 3):
        expected, stats = DEVICES[threads].run(ops, x)
        got, got_stats = DEVICES[threads].run(ops, to_c16(x), layout="c16", out_layout="nchw")
        assert_same(got.view(np.uint32), expected.view(np.uint32))
        assert got_stats.cycles == stats.cycles


def test_strided_pointwise_c16_threads_and_packed_weights(rng):
    """1-3 threads give the same bits; weights packed once serve stride 2 too; a padded 1x1/2
    and a batch of single positions (OpenBLAS in conv_f32) stay converted around."""
    x = _data(rng, (2, 96, 27, 21))
    conv = Conv(_data(rng, (64, 96, 1, 1)), stride=(2, 2))
    assert conv.packs("nv_full", 96)
    bn = _epilogue("bn_relu", rng, 64, None)
    single = _same_either_way([conv, bn], x, threads=1)
    for threads in (2, 3):
        assert_same(_same_either_way([conv, bn], x, threads=threads), single)
    assert_same(_same_either_way([conv.packed_for("nv_full"), bn], x), single)
    padded = Conv(_data(rng, (16, 96, 1, 1)), stride=(2, 2), padding=(1, 1, 1, 1))
    _same_either_way([padded], x, native=False)
    _same_either_way([Conv(_data(rng, (16, 32, 1, 1)), stride=(2, 2))],
                     _data(rng, (2, 32, 2, 2)), native=False)


DEPTHWISE = [  # (n, c, h, w, stride)
    (1, 16, 7, 7, 1), (2, 48, 13, 17, 1), (1, 144, 14, 14, 2), (1, 32, 28, 28, 2),
    (2, 16, 3, 3, 2), (1, 64, 1, 1, 1), (1, 16, 112, 112, 2), (1, 576, 14, 14, 1)]


@pytest.mark.parametrize("n,c,h,w,stride", DEPTHWISE)
@pytest.mark.parametrize("epilogue", ["none", "bn_relu", "bn_clip", "scale_add_relu"])
def test_depthwise_c16_equals_nchw(rng, n, c, h, w, stride, epilogue):
    x = _data(rng, (n, c, h, w))
    conv = Conv(_data(rng, (c, 1, 3, 3), zeros=False), stride=(stride, stride),
                padding=(1, 1, 1, 1), groups=c)
    oh, ow = (h - 1) // stride + 1, (w - 1) // stride + 1
    sdp = _epilogue(epilogue, rng, c, (n, c, oh, ow))
    _same_either_way([conv] + ([sdp] if sdp is not None else []), x)


@pytest.mark.parametrize("threads", [2, 3])
def test_c16_kernels_do_not_depend_on_the_thread_count(rng, threads):
    x = _data(rng, (2, 64, 15, 11))
    pointwise = [Conv(_data(rng, (96, 64, 1, 1))), _epilogue("bn_clip", rng, 96, None)]
    depthwise = [Conv(_data(rng, (64, 1, 3, 3)), stride=(2, 2), padding=(1, 1, 1, 1),
                      groups=64), _epilogue("bn_relu", rng, 64, None)]
    for ops in (pointwise, depthwise):
        single = _same_either_way(ops, x, threads=1)
        assert_same(_same_either_way(ops, x, threads=threads), single)


@pytest.mark.parametrize("act", ["silu", "sigmoid", "hardswish"])
def test_post_activations_run_on_the_c16_kernels(rng, act):
    """FP32's exact LUT activations after a C16 kernel's one-pass steps (BN, or a scale and an
    ADD): the kernel applies those, the runtime the activation on its whole output (element by
    element, so the layout does not matter): the NCHW run's bits, natively, at 1-3 threads, on
    the 1x1 (stride 1 and 2), depthwise 3x3, dense 3x3 and Winograd kernels."""
    x = _data(rng, (1, 32, 14, 12)) * 4
    convs = [Conv(_data(rng, (48, 32, 1, 1), zeros=False)),
             Conv(_data(rng, (48, 32, 1, 1), zeros=False), stride=(2, 2)),
             Conv(_data(rng, (32, 1, 3, 3), zeros=False), padding=1, groups=32),
             Conv(_data(rng, (32, 1, 3, 3), zeros=False), stride=(2, 2), padding=1, groups=32),
             Conv(_data(rng, (48, 32, 3, 3), zeros=False), padding=1),
             Conv(_data(rng, (48, 32, 3, 3), zeros=False), padding=1, mode="winograd")]
    for i, conv in enumerate(convs):
        k = conv.weights.shape[0]
        out = DEVICES[1].run([conv], x)[0].shape
        bn = Sdp(scale=rng.standard_normal(k, dtype=np.float32),
                 shift=rng.standard_normal(k, dtype=np.float32), act=act)
        add = Sdp(scale=rng.standard_normal(k, dtype=np.float32), ew_op="add",
                  operand=_data(rng, out), act=act)
        for sdp in (bn, add) if i in (0, 4) else (bn,):
            for threads in (1, 2, 3):
                _same_either_way([conv, sdp], x, threads=threads)


def test_a_post_activation_before_a_fused_pool_is_converted_around(rng):
    """The image layer's C16 kernel with its pool fused would pool before the activation
    ran: converted around instead, the same bits."""
    x = _data(rng, (1, 3, 32, 32))
    ops = [Conv(_data(rng, (32, 3, 3, 3)), stride=(2, 2), padding=1),
           Sdp(scale=np.ones(32, np.float32), act="silu"),
           Pool("max", kernel=(3, 3), stride=(2, 2), padding=(1, 1, 1, 1))]
    assert not c16_native("nv_full", ops, x.shape, in_layout="nchw")
    assert c16_native("nv_full", ops[:2], x.shape, in_layout="nchw") == C16_KERNELS
    for chain in (ops, ops[:2]):  # the pool converted around; the stem kernel alone
        expected = DEVICES[2].run(chain, x)[0]
        blocked = DEVICES[2].run(chain, x, out_layout="c16")[0]
        assert_same(from_c16(blocked).view(np.uint32), expected.view(np.uint32))


def test_runs_without_a_c16_kernel_are_converted_around(rng):
    """A dilated 3x3 convolution, an SDP alone with an operand, an independent CONV -> SDP and
    a PDP after a 1x1 CONV have no C16 kernel: the same bits through conversions."""
    x = _data(rng, (2, 32, 12, 10))
    bn = _epilogue("bn_relu", rng, 32, None)
    chains = [
        ([Conv(_data(rng, (32, 32, 3, 3)), padding=(2, 2, 2, 2), dilation=(2, 2)), bn],
         "fused"),
        ([_epilogue("scale_add_relu", rng, 32, (2, 32, 12, 10))], "fused"),
        ([Conv(_data(rng, (32, 32, 1, 1))), bn], "independent"),
        ([Conv(_data(rng, (32, 32, 1, 1))), bn, Pool("avg", kernel=(2, 2), stride=(2, 2))],
         "fused"),
    ]
    for ops, mode in chains:
        _same_either_way(ops, x, mode=mode, native=False)


def test_weights_packed_for_c16_runs_give_the_same_bits(rng):
    """FP32 1x1 weights packed once (accel_conv_pack_weights) for the C16 kernel: the same
    bits in a C16 run, and an NCHW run reads the weights as they are."""
    x = _data(rng, (1, 48, 9, 7))
    conv = Conv(_data(rng, (80, 48, 1, 1)))
    packed = conv.packed_for("nv_full")
    assert packed.packed is not None and conv.packs("nv_full", 48)
    assert not Conv(_data(rng, (16, 48, 5, 5))).packs("nv_full", 48)
    bn = _epilogue("bn_relu", rng, 80, None)
    expected = _same_either_way([conv, bn], x)
    assert_same(_same_either_way([packed, bn], x), expected)


def test_a_c16_run_refuses_operands_of_other_widths(rng):
    """The C library's own check (Python's refuses the operand's shape first): an independent
    chain whose SDP adds a 24-channel operand cannot run with C16 tensors."""
    ops = [Conv(_data(rng, (24, 32, 1, 1))), Sdp(ew_op="add", operand=_data(rng, (1, 24, 2, 2))),
           Conv(_data(rng, (32, 24, 1, 1)))]
    c_ops = ffi.new("accel_op[]", len(ops))
    for op, c_op in zip(ops, c_ops):
        op.lower(c_op)
    tensors = [ffi.new("accel_tensor*", {"n": 1, "c": 32, "h": 2, "w": 2,
                                         "precision": lib.ACCEL_FP32,
                                         "layout": lib.ACCEL_LAYOUT_C16}) for _ in range(2)]
    status = lib.accel_estimate(Device("nv_full")._config_c, c_ops, len(ops), tensors[0],
                                tensors[1], lib.ACCEL_MODE_INDEPENDENT, ffi.NULL, ffi.NULL)
    assert status == lib.ACCEL_ERR_INVALID
    assert "op 1 (SDP): its element-wise operand has 24 channels" in \
        ffi.string(lib.accel_last_error()).decode()


def test_a_copy_into_a_c16_output_keeps_its_other_channels(rng):
    x = _data(rng, (1, 16, 5, 6))
    out = _data(rng, (1, 48, 5, 6))
    copy = Bdma(channels=16, dst_offset=16, dst_channels=48)
    expected, _ = DEVICES[2].run([copy], x, out=out.copy())
    blocked = to_c16(out)
    DEVICES[2].run([copy], to_c16(x), out=blocked, layout="c16")
    assert_same(from_c16(blocked), expected)


class _Keep:
    def __init__(self):
        self.tensors = {}

    def add(self, label, op_index, x):
        self.tensors[(label, op_index)] = x.copy()


def test_an_observer_sees_nchw_tensors_of_a_c16_run(rng):
    """Watched, a run takes the converting path: the observer gets NCHW tensors, the same
    as for the NCHW run."""
    x = _data(rng, (1, 32, 9, 9))
    ops = [Conv(_data(rng, (48, 32, 1, 1))), _epilogue("bn_relu", rng, 48, None)]
    seen = {}
    for layout, data in (("nchw", x), ("c16", to_c16(x))):
        with observing(_Keep()) as keep:
            out, _ = DEVICES[2].run(ops, data, label="watched", layout=layout)
        seen[layout] = (keep.tensors, out if layout == "nchw" else from_c16(out))
    (nchw_tensors, nchw_out), (c16_tensors, c16_out) = seen["nchw"], seen["c16"]
    assert_same(c16_out, nchw_out)
    assert nchw_tensors.keys() == c16_tensors.keys() and nchw_tensors
    for key, tensor in nchw_tensors.items():
        assert_same(c16_tensors[key], tensor, what=str(key))


def test_c16_layout_helpers(rng):
    x = _data(rng, (2, 32, 3, 5))
    blocked = to_c16(x)
    assert blocked.shape == (2, 2, 3, 5, 16) and blocked.flags.c_contiguous
    assert blocked[1, 1, 2, 4, 3] == x[1, 19, 2, 4]
    assert_same(from_c16(blocked), x)
    assert nchw_shape(blocked.shape) == x.shape
    with pytest.raises(AccelInvalidError, match="multiple of 16 channels, not 24"):
        c16_shape((1, 24, 2, 2))
    with pytest.raises(AccelInvalidError, match="C16 array has the shape"):
        nchw_shape((1, 2, 3, 4))


def test_bad_c16_tensors_are_refused_by_name(rng):
    conv = Conv(_data(rng, (16, 16, 1, 1)))
    with pytest.raises(AccelInvalidError, match="layout C16 holds FP32 data with c a multiple "
                                                "of 16, not int8"):
        DEVICES[1].run([Conv(np.ones((16, 16, 1, 1), np.int8), precision="int8"),
                        Sdp(precision="int8", bias=np.zeros(16, np.int32))],
                       np.zeros((1, 1, 2, 2, 16), np.int8), layout="c16")
    with pytest.raises(AccelInvalidError, match="layout = 'nhwc' is not one of"):
        DEVICES[1].run([conv], _data(rng, (1, 16, 2, 2)), layout="nhwc")
    with pytest.raises(AccelInvalidError, match="C16 array has the shape"):
        DEVICES[1].run([conv], _data(rng, (1, 16, 2, 2)), layout="c16")
    with pytest.raises(AccelInvalidError, match="sdp operand of shape"):
        DEVICES[1].run([conv, Sdp(ew_op="add", operand=_data(rng, (1, 16, 2, 2)))],
                       to_c16(_data(rng, (1, 16, 2, 2))), layout="c16")
    # the C library's own check, as a caller of accel.h meets it
    config = Device("nv_full")._config_c
    tensor = ffi.new("accel_tensor*", {"n": 1, "c": 24, "h": 2, "w": 2,
                                       "precision": lib.ACCEL_FP32, "layout": lib.ACCEL_LAYOUT_C16})
    shapes = ffi.new("accel_tensor[]", 1)
    op = ffi.new("accel_op[]", 1)
    Sdp(act="relu").lower(op[0])
    assert lib.accel_chain_shapes(config, op, 1, tensor, lib.ACCEL_MODE_FUSED, shapes) != 0
    assert "c a multiple of 16, not fp32 with c = 24" in ffi.string(lib.accel_last_error()).decode()
    tensor.c, tensor.layout = 16, 7
    assert lib.accel_chain_shapes(config, op, 1, tensor, lib.ACCEL_MODE_FUSED, shapes) != 0
    assert "layout = 7 is not an accel_layout" in ffi.string(lib.accel_last_error()).decode()


def test_the_build_claims_only_instruction_sets_the_cpu_has():
    """accel_host_isa names the instruction sets the kernels were compiled for: each must be
    one this CPU has (its kernels would fault otherwise), and C16_KERNELS above follows it."""
    flags = set()
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    needs = {"avx2": {"avx2", "fma"}, "avx512": {"avx512f", "avx512bw", "avx512vl"},
             "avx512_vnni": {"avx512_vnni"}, "avx512_vbmi": {"avx512vbmi"},
             "amx": {"amx_tile", "amx_int8"}}
    isa = host_isa()
    assert isa <= needs.keys()
    for name in isa:
        assert needs[name] <= flags, (name, sorted(needs[name] - flags))
    if "avx512" not in isa:  # every instruction set above AVX2 needs AVX-512 here
        assert not isa & {"avx512_vnni", "avx512_vbmi", "amx"}
