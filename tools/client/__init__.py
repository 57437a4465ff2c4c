"""The client commands a user runs against an API server or a node: apply, delete,
links, config defaults, certs. Each module's `main(argv)` is what `meshwire` dispatches to."""
