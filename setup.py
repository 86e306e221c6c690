"""The optional C fast path of the Kineto parser (tracelab/parsers/_kineto_scan.c). Everything else is in
pyproject.toml. Without a C compiler the build goes on without it and the parser uses msgspec alone."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracelab.parsers._kineto_scan",
            sources=["tracelab/parsers/_kineto_scan.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
