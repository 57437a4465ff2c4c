"""`meshwire lab`: a whole meshwire lab on one machine (docs/design.md §6, §9).

    meshwire lab up FILE [--nodes N] [--placement FILE] [--config FILE] [--name NAME] [--dir DIR]
    meshwire lab status [--json] | check | restart-pod POD | move-pod POD NODE
    meshwire lab kill-daemon NODE | down
    meshwire lab exec [-i] [-t] POD [--] CMD... | logs POD [-f]

What `up` builds, all named `mwl<name>-...` so nothing else is touched:

- a lab directory, default `/run/meshwire-lab/<name>` (tmpfs, a mount of its own
  where `/run` is not one: it lives exactly as long as the namespaces and
  processes it describes, and every command finds it from any working
  directory; `--dir` puts it elsewhere, then pass `--dir` to
  every command). It holds `state.json` (everything created, written before
  each creation step, for `down`), the API's SQLite db, per-node configs and
  CNI sockets, and a log per process (`state.py`).
- a hub namespace with the underlay bridge 169.254.0.1/16 and one namespace
  per simulated node (`node1` = 169.254.0.11, ...), each with a veth on the
  bridge (`nodes.py`). Nothing is added to the host's namespace.
- the embedded API (`meshwire api serve`) inside the hub namespace on
  169.254.0.1:8001, where the daemons reach it; `meshwire apply` runs there
  too. For the user's own commands a relay (`relay.py`) listens on
  127.0.0.1:<free port> in the host namespace and connects into the hub; on a
  host without a usable loopback `up` says so and goes on (the lab's own
  commands reach the API from inside the hub and never need it).
- per node, `meshwire daemon --config nodes/<node>/config.yaml` running inside
  the node's namespace: forked by `up` from a process that imported the
  daemon's modules once (`forkserver.py`), started through `nsexec.py` when a
  daemon is started again; the config is `--config` plus the node's name,
  address, API URL and CNI socket (`daemons.py`).
- per pod, a namespace, placed round robin in file order or by `--placement`
  (`placement.py`), then CNI ADD through the real shim, as a runtime does
  (`pods.py`, `cni.py`); once its links are up, its holder (hostname, private
  /tmp, /var/tmp and /run, binds, PID namespace: `holder.py`), and the lab file's `cmd`
  and `exec` for it (`software.py`); `lab exec` and `lab logs` reach into it
  (`podexec.py`).

`down` stops the processes by PID, deletes the namespaces and the directory,
idempotently, also after a crash in `up` (`down.py`).
"""
