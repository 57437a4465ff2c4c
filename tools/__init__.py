"""The tools around the node daemon: the lab, the graph, the embedded API, the
client commands and the `meshwire` command that dispatches to them all. They import
control; control never imports them."""
