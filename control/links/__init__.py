"""Link drivers: realise `links` table rows in the kernel over netlink (pyroute2).

`driver.py` holds the contract the reconciler uses (`LinkDriver`, `Drivers`);
one module per link kind (`veth.py`, `vxlan.py`, `macvlan.py`) does the work;
`netns.py` is the only way into a network namespace and `iface_names.py` the only
place that names interfaces and marks them as meshwire's.
"""
