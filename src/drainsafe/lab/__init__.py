"""A local Kubernetes-compatible cluster whose pods are real processes."""
