"""The embedded Kubernetes-style API for Topology objects (docs/design.md §6, §9).

`store` keeps objects and their history in SQLite, `server` speaks the REST and
watch subset of kube-apiserver that the official `kubernetes` client uses.
"""
