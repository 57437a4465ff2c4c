# The cffi module built from cext/*.c (scripts/build.d/30-dataplane.sh, cext/wirec_build.py);
# its C declarations are cext/wirec.h, cext/batchmsg.h, cext/seal.h, cext/h2wire.h and
# cext/emul.h.
from typing import Any

ffi: Any
lib: Any
