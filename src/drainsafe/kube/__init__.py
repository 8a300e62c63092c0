"""Kubernetes API access: client from kubeconfig, list+watch."""
