"""Builds the dataplane's C parts as the cffi module `meshwire.dataplane._wirec`.

The batching codec and wire table (`wirec.c`), the Batch message codec
(`batchmsg.c`) and the Wire service's gRPC-over-HTTP/2 transport on nghttp2
(`h2io.c`, `h2sender.c`, `h2receiver.c`), the record layer sealing it on
libcrypto (`seal.c`), and link emulation's per-frame work
(`emul.c`). Run by scripts/build.d/30-dataplane.sh
from the repo root; the extension lands in `cext/build/` and the build step
copies it into `dataplane/`.
"""

from __future__ import annotations

import pathlib

from cffi import FFI

HERE = pathlib.Path(__file__).resolve().parent
# The public headers, in dependency order: cffi reads each line not starting with '#'.
HEADERS = ("wirec.h", "batchmsg.h", "seal.h", "h2wire.h", "emul.h")
SOURCES = ("wirec.c", "batchmsg.c", "seal.c", "h2io.c", "h2sender.c", "h2receiver.c", "emul.c")


def builder() -> FFI:
    ffi = FFI()
    for name in HEADERS:
        header = (HERE / name).read_text()
        ffi.cdef("\n".join(line for line in header.splitlines() if not line.startswith("#")))
    ffi.set_source(
        "meshwire.dataplane._wirec",
        "\n".join(f'#include "{name}"' for name in HEADERS),
        sources=[str(HERE / name) for name in SOURCES],
        include_dirs=[str(HERE)],
        libraries=["nghttp2", "crypto"],
        extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Werror"],
    )
    return ffi


if __name__ == "__main__":
    print(builder().compile(tmpdir=str(HERE / "build")))
