"""The Topology informer: list + watch of `networkop.co.uk/v1beta1` topologies into a table."""
