"""Build script of the cffi extension module ``accel_codegen._accel_ffi`` (out-of-line API mode).

CMake runs it at build time: the public header, run through the C preprocessor with ACCEL_CDEF
defined, is the cdef, so the bindings cannot drift from the C library.
"""
import argparse
import subprocess

import cffi


def declarations(header: str, cc: str) -> str:
    """Return the header's declarations as plain C (no directives, no comments)."""
    return subprocess.run(
        [cc, "-E", "-P", "-DACCEL_CDEF", "-x", "c", header],
        check=True, capture_output=True, text=True,
    ).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--header", required=True)
    parser.add_argument("--cc", default="cc")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    ffi = cffi.FFI()
    ffi.cdef(declarations(args.header, args.cc))
    # The calibration observer: Python code the C library calls (accel_set_observer).
    ffi.cdef('extern "Python" void accel_python_observer(void*, const char*, int32_t, '
             'const accel_tensor*);')
    # The run recorder (accel_set_recorder): the export to NVDLA's trace format reads it.
    ffi.cdef('extern "Python" void accel_python_recorder(void*, const char*, const accel_op*, '
             'int32_t, const accel_tensor*, const accel_tensor*, accel_mode);')
    ffi.set_source("accel_codegen._accel_ffi", '#include "accel/accel.h"')
    ffi.emit_c_code(args.output)


if __name__ == "__main__":
    main()
