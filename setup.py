"""The native modules, all in tracelab/_native/ (read its __init__.py): the Kineto scanner.

Everything else is in pyproject.toml. Where the platform can build them (CPython on Linux or macOS with
a C compiler) the build is required: a compiler error fails the install instead of leaving the pure-Python
twins to run unnoticed. Elsewhere (no compiler, another interpreter) the build is optional."""

import os
import platform
import shutil
import sys
import sysconfig

from setuptools import Extension, setup


def _can_build() -> bool:
    """CPython on Linux / macOS with the C compiler Python was built with (or $CC) on the PATH."""
    if platform.python_implementation() != "CPython" or not sys.platform.startswith(("linux", "darwin")):
        return False
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shutil.which(cc.split()[0]) is not None


setup(
    ext_modules=[
        Extension(
            "tracelab._native._kineto_scan",
            sources=["tracelab/_native/_kineto_scan.c"],
            extra_compile_args=["-O3"],
            optional=not _can_build(),
        ),
    ]
)
