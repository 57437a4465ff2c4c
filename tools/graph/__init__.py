"""Pictures of a lab: `meshwire lab graph` and `meshwire graph` (on a cluster).

`model.py` turns Topology objects, their status and the daemons' `/links` into
one `Graph` (pure); `formats.py` writes it as dot, Mermaid or JSON (pure);
`layout.py` has Graphviz draw it as SVG; `sources.py` reads a lab or a cluster;
`serve.py` is the live page; `command.py` the command line.
"""
