# The cffi module built from cext/wirec.c (scripts/build.d/30-dataplane.sh); see cext/wirec.h.
from typing import Any

ffi: Any
lib: Any
