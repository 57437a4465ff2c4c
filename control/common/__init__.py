"""Neutral pieces any layer may import: config, work queue, retry policy, ids, clock,
listening. They import nothing of meshwire but each other and base."""
