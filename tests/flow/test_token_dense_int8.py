"""An int8 dense layer over tokens (issue 29 item 5): the transposes onto the feature surface
move int8 codes as they are, so its run is the int8 1x1 convolution of the same weights on the
surface, bit for bit (that run's int8 code is the NumPy reference's, tests/compiler), and the
output is the fp32 answer within int8 error."""
import numpy as np
from tvm import relax

import accel_codegen as ac
from conftest import build_and_run, sqnr

T, C, K = 24, 32, 40


def _token_dense(weight, bias):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, T, C), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, relax.op.permute_dims(relax.const(weight))))
            out = bb.emit_output(relax.op.nn.relu(relax.op.add(y, relax.const(bias))))
        bb.emit_func_output(out)
    return bb.get()


def _conv(weight, bias):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, C, 1, T), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, relax.const(weight[:, :, None, None])))
            out = bb.emit_output(relax.op.nn.relu(relax.op.add(
                y, relax.const(bias.reshape(1, K, 1, 1)))))
        bb.emit_func_output(out)
    return bb.get()


def test_int8_token_dense_is_the_surface_conv_bit_for_bit():
    rng = np.random.default_rng(29)
    weight = (rng.standard_normal((K, C)) / C ** 0.5).astype(np.float32)
    bias = (rng.standard_normal(K) * 0.1).astype(np.float32)
    calibration = [rng.standard_normal((1, T, C)).astype(np.float32) for _ in range(3)]
    x = rng.standard_normal((1, T, C)).astype(np.float32)
    mod = _token_dense(weight, bias)
    assert list(ac.partition_report(mod).functions.values()) == [
        ["accel.token_dense_bias_relu"]]
    y = build_and_run(mod, x, precision="int8", calibration=calibration)
    surface = [c.transpose(0, 2, 1)[:, :, None, :] for c in calibration]
    conv = build_and_run(_conv(weight, bias), x.transpose(0, 2, 1)[:, :, None, :],
                         precision="int8", calibration=surface)
    np.testing.assert_array_equal(y, conv[:, :, 0, :].transpose(0, 2, 1))
    fp32 = np.maximum(x @ weight.T + bias, 0)
    # int8 error of one layer calibrated on 3 inputs (the 1x1 conv's own, being its bits)
    assert 24.0 < sqnr(y, fp32) < 60.0, sqnr(y, fp32)
