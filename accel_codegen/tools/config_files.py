"""CFG: an accelerator configuration as a command line or a script names it, resolved in one
place (no TVM import).

A CFG is one of

* a preset name (``nv_small``, ``nv_large``, ``nv_full``);
* a JSON file holding an object: every field, or ``"base"`` (a preset) and the fields that
  differ (``{"base": "nv_full", "dram_bytes_per_s": 5e9}``);
* that JSON object as text (``'{"base": "nv_small", "clock_hz": 2e9}'``);
* an :class:`~accel_codegen.AccelConfig`, returned as it is.

>>> resolve_config("nv_small").atomic_c
8
>>> resolve_config("my_accel.json")
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Union

from ..errors import AccelError, AccelInvalidError
from ..sim.config import AccelConfig


def _from_file(path: Path) -> AccelConfig:
    if not path.is_file():
        raise AccelInvalidError(f"config file '{path}' does not exist")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise AccelInvalidError(f"config file '{path}' is not valid JSON: {error}") from None
    except RecursionError:
        raise AccelInvalidError(f"config file '{path}' is nested too deeply to be a "
                                "configuration") from None
    except UnicodeDecodeError as error:
        raise AccelInvalidError(f"config file '{path}' is not text: {error}") from None
    if not isinstance(data, dict):
        raise AccelInvalidError(f"config file '{path}' must hold a JSON object")
    try:
        return AccelConfig.from_dict(data)
    except (AccelError, TypeError, ValueError) as error:
        raise AccelInvalidError(f"config file '{path}': {error}") from None


def _from_text(text: str) -> AccelConfig:
    try:
        return AccelConfig.from_json(text)
    except TypeError as error:  # a field the dataclass does not take in that form
        raise AccelInvalidError(f"config JSON: {error}") from None


def is_config_file(text: str) -> bool:
    """Whether a CFG names a file (it has a suffix or a directory part) rather than a preset."""
    return text.endswith(".json") or bool(Path(text).suffix) or "/" in text


def resolve_config(config: Union[AccelConfig, str]) -> AccelConfig:
    """A CFG -> :class:`~accel_codegen.AccelConfig`.

    Raises
    ------
    AccelInvalidError
        A file that does not exist, is not JSON or not a JSON object; JSON that is not a
        configuration (the field named); a name that is not a preset.
    """
    if isinstance(config, AccelConfig):
        return config
    if not isinstance(config, str):
        raise AccelInvalidError(f"a configuration is an AccelConfig, a preset name or a JSON "
                                f"file, got {type(config).__name__}")
    if config.lstrip().startswith("{"):
        return _from_text(config)
    if is_config_file(config):
        return _from_file(Path(config))
    names = AccelConfig.preset_names()
    if config not in names:
        raise AccelInvalidError(f"unknown configuration {config!r}: give a preset "
                                f"({', '.join(names)}) or a .json file")
    return AccelConfig.preset(config)
