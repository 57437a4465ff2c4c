"""Modules `test_lab_forkserver.py` runs through the fork server (`python -m` form)."""
