"""NodeMaintenance (issue 30): a declarative, resumable drain of a set of nodes in waves.

spec.py reads the resource's spec into typed values, progress.py its per-node states and
phase, waves.py chooses the next nodes to start under maxParallelNodes and maxUnavailable.
All pure; the reconciler (I/O) is the controller's. docs/maintenance.md.
"""
