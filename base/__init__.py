"""The leaf modules both control and dataplane import: HOST:PORT strings, the one
way into a network namespace, structured logs, a link end's impairment parameters and the
defaults the dataplane shares with the daemon's config. They import nothing of meshwire."""
