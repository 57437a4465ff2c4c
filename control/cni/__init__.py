"""The CNI side of meshwire: the shim the runtime execs and the daemon's endpoint.

The runtime execs `/opt/cni/bin/meshnet` (the C shim, `cext/cni_shim.c`, or its
Python twin `shim.py`); the shim forwards the CNI environment and stdin to the
daemon over a Unix socket (`endpoint.py`) and prints the answer. `protocol.py`
is the pure codec both sides share; `install.py` puts the shim in place.
"""
