"""The optional C fast paths: the Kineto parser's scanner (tracelab/parsers/_kineto_scan.c) and the nsys
reader's integer-column readers (tracelab/parsers/_sqlite_columns.c, linked with the system libsqlite3, and
tracelab/parsers/_sqlite_btree.c, which decodes plain table pages itself), and the numpy allocator that
reuses the pages of freed big arrays (tracelab/_pages.c), and the gzip inflater of the block reader
(tracelab/parsers/_inflate.c, linked with the system zlib).
Everything else is in pyproject.toml. Without a C compiler (or without sqlite3.h / zlib.h) the build goes on
without them and the parsers use their pure-Python reference paths."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracelab.parsers._kineto_scan",
            sources=["tracelab/parsers/_kineto_scan.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "tracelab.parsers._sqlite_columns",
            sources=["tracelab/parsers/_sqlite_columns.c"],
            extra_compile_args=["-O2"],
            libraries=["sqlite3"],
            optional=True,
        ),
        Extension(
            "tracelab._pages",
            sources=["tracelab/_pages.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "tracelab.parsers._inflate",
            sources=["tracelab/parsers/_inflate.c"],
            extra_compile_args=["-O2"],
            libraries=["z"],
            optional=True,
        ),
        Extension(
            "tracelab.parsers._sqlite_btree",
            sources=["tracelab/parsers/_sqlite_btree.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
