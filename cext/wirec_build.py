"""Builds the batching codec (`wirec.c`) as the cffi module `meshwire.dataplane._wirec`.

Run by scripts/build.d/30-dataplane.sh from the repo root; the extension lands in
`cext/build/` and the build step copies it into `dataplane/`.
"""

from __future__ import annotations

import pathlib

from cffi import FFI

HERE = pathlib.Path(__file__).resolve().parent


def builder() -> FFI:
    header = (HERE / "wirec.h").read_text()
    ffi = FFI()
    ffi.cdef("\n".join(line for line in header.splitlines() if not line.startswith("#")))
    ffi.set_source(
        "meshwire.dataplane._wirec",
        '#include "wirec.h"',
        sources=[str(HERE / "wirec.c")],
        include_dirs=[str(HERE)],
        extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Werror"],
    )
    return ffi


if __name__ == "__main__":
    print(builder().compile(tmpdir=str(HERE / "build")))
