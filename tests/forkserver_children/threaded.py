"""A module whose import starts a thread: a server that loads it must not fork."""

from __future__ import annotations

import threading

threading.Thread(target=threading.Event().wait, daemon=True).start()
