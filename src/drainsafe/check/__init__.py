"""Static audit of Kubernetes manifests for drain safety."""
