"""The native modules are there wherever the platform can build them: CPython on Linux / macOS with a C
compiler (what setup.py requires there). A broken compiler step used to skip every C test silently; now
this test fails instead. Each module's twin and differential test are named in tracelab/_native."""

from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import shutil
import sys
import sysconfig
from pathlib import Path

import pytest

from tracelab._native import MODULES

NATIVE = Path(__file__).resolve().parents[1] / "tracelab" / "_native"


def _platform_can_build() -> bool:
    if platform.python_implementation() != "CPython" or not sys.platform.startswith(("linux", "darwin")):
        return False
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shutil.which(cc.split()[0]) is not None


def test_every_c_file_is_a_listed_module_with_a_twin():
    sources = sorted(p.stem for p in NATIVE.glob("*.c"))
    assert sources == sorted(MODULES)
    for twin in MODULES.values():
        assert importlib.util.find_spec(twin) is not None, twin


@pytest.mark.parametrize("name", sorted(MODULES))
def test_native_module_is_built_where_the_platform_can_build_it(name):
    if not _platform_can_build():
        pytest.skip(f"no C compiler for {platform.python_implementation()} on {sys.platform}: the twin runs")
    mod = importlib.import_module(f"tracelab._native.{name}")  # ImportError here: the build was skipped
    assert Path(mod.__file__).suffix in (".so", ".pyd"), mod.__file__


def test_no_native_code_outside_the_native_folder():
    root = NATIVE.parent
    stray = [p for p in root.rglob("*.c") if p.parent != NATIVE]
    assert stray == []
