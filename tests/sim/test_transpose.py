"""accel_transpose (runtime/src/convert.c), the generated code's moves of token tensors, through
the Python binding: its bytes against NumPy's transpose, and each refusal with its typed error
naming the value (issue 28 C review)."""
from __future__ import annotations

import numpy as np
import pytest

from accel_codegen._accel_ffi import ffi, lib
from accel_codegen.errors import AccelBufferError, AccelInvalidError, check


def _transpose(src, dst, batch, rows, cols, element_bytes):
    check(lib.accel_transpose(ffi.cast("void*", src.ctypes.data),
                              ffi.cast("void*", dst.ctypes.data), batch, rows, cols,
                              element_bytes))


@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32])
def test_each_matrix_transposed_bit_for_bit(dtype):
    rng = np.random.default_rng(28)
    x = rng.integers(-100, 100, (3, 37, 70)).astype(dtype)  # tiles of 32 with ragged edges
    out = np.zeros((3, 70, 37), dtype)
    _transpose(x, out, 3, 37, 70, x.itemsize)
    assert out.tobytes() == np.ascontiguousarray(x.transpose(0, 2, 1)).tobytes()



@pytest.mark.parametrize("rows, cols", [(37, 70), (5, 3), (8, 8), (9, 17), (70, 37)])
def test_four_byte_elements_move_as_bits(rows, cols):
    """Every 32-bit pattern moves unchanged (the vector paths' loads, shuffles and masked
    stores: signalling and quiet NaNs with payloads, denormals, -0), in blocks whole, ragged in
    rows, in columns and in both; the rows and columns past the blocks untouched."""
    rng = np.random.default_rng(rows * 100 + cols)
    bits = rng.integers(0, 1 << 32, (2, rows, cols), dtype=np.uint64).astype(np.uint32)
    bits.flat[:6] = [0x7F800001, 0xFFBFFFFF, 0x7FC00123, 0x00000001, 0x80000000, 0x807FFFFF]
    x = bits.view(np.float32)
    out = np.full((2 * cols * rows + 8,), 0xA5A5A5A5, np.uint32)
    _transpose(x, out, 2, rows, cols, 4)
    assert out[:-8].tobytes() == np.ascontiguousarray(bits.transpose(0, 2, 1)).tobytes()
    assert (out[-8:] == 0xA5A5A5A5).all()  # nothing written past the last matrix

def test_refusals_name_the_value():
    src = np.zeros(64, np.float32)
    dst = np.zeros(64, np.float32)
    with pytest.raises(AccelBufferError, match="NULL"):
        check(lib.accel_transpose(ffi.NULL, ffi.cast("void*", dst.ctypes.data), 1, 2, 2, 4))
    with pytest.raises(AccelBufferError, match="NULL"):
        check(lib.accel_transpose(ffi.cast("void*", src.ctypes.data), ffi.NULL, 1, 2, 2, 4))
    with pytest.raises(AccelInvalidError, match="rows = -2"):
        _transpose(src, dst, 1, -2, 4, 4)
    with pytest.raises(AccelInvalidError, match="element_bytes = 3"):
        _transpose(src, dst, 1, 2, 4, 3)
    with pytest.raises(AccelBufferError, match="not aligned to its 4-byte elements"):
        check(lib.accel_transpose(ffi.cast("void*", src.ctypes.data + 2),
                                  ffi.cast("void*", dst.ctypes.data), 1, 2, 4, 4))
    with pytest.raises(AccelInvalidError, match="overlap"):
        check(lib.accel_transpose(ffi.cast("void*", src.ctypes.data),
                                  ffi.cast("void*", src.ctypes.data + 16), 1, 4, 4, 4))
    assert not dst.any()  # nothing written by a refused call


@pytest.mark.parametrize("batch, rows, cols, element_bytes", [
    (1 << 40, 1 << 20, 1 << 10, 1),   # batch x rows x cols overflows
    (1, 1 << 40, 1 << 30, 1),         # rows x cols overflows
    (1, 1 << 31, 1 << 31, 4),         # only the byte count overflows
])
def test_a_byte_count_beyond_int64_is_refused(batch, rows, cols, element_bytes):
    src = np.zeros(16, np.float32)
    dst = np.zeros(16, np.float32)
    with pytest.raises(AccelInvalidError, match=f"batch = {batch}, rows = {rows}, cols = "
                       f"{cols} of {element_bytes}-byte elements: .*overflows int64"):
        _transpose(src, dst, batch, rows, cols, element_bytes)


@pytest.mark.parametrize("batch, rows, cols", [(1, 197, 192), (1, 192, 197), (2, 1, 17),
                                               (2, 17, 1), (3, 16, 16), (1, 33, 47)])
def test_4_byte_blocks_and_ragged_edges_write_only_the_matrix(batch, rows, cols):
    """The AVX-512 path's 16 x 16 blocks, their masked edges (a token count of 197), and the
    words after the destination left as they were."""
    rng = np.random.default_rng(rows * cols)
    x = rng.integers(0, 2 ** 32, (batch, rows, cols), dtype=np.uint64).astype(np.uint32)
    size = batch * rows * cols
    out = np.full(size + 40, 0xDEADBEEF, np.uint32)
    _transpose(x, out, batch, rows, cols, 4)
    assert out[:size].tobytes() == np.ascontiguousarray(x.transpose(0, 2, 1)).tobytes()
    assert (out[size:] == 0xDEADBEEF).all()


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
@pytest.mark.parametrize("batch, rows, cols", [(1, 197, 192), (1, 192, 197), (2, 1, 17),
                                               (2, 17, 1), (3, 16, 16), (1, 8, 8), (1, 33, 47),
                                               (2, 15, 9)])
def test_1_and_2_byte_blocks_and_ragged_edges_write_only_the_matrix(dtype, batch, rows, cols):
    """The SSE blocks (16 x 16 bytes, 8 x 8 halves), the scalar edges below and right of them
    (a token count of 197), every bit pattern of the elements, and the elements after the
    destination left as they were."""
    rng = np.random.default_rng(rows * cols + batch)
    x = rng.integers(0, np.iinfo(dtype).max + 1, (batch, rows, cols), dtype=np.uint64).astype(dtype)
    size = batch * rows * cols
    out = np.full(size + 40, 0xA5, dtype)
    _transpose(x, out, batch, rows, cols, x.itemsize)
    assert out[:size].tobytes() == np.ascontiguousarray(x.transpose(0, 2, 1)).tobytes()
    assert (out[size:] == 0xA5).all()
