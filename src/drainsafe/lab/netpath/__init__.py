"""Traffic paths to lab Services: a kube-proxy-like L4 path and an nginx ingress path.

Both learn Services and EndpointSlices through the API and apply every change only after a
propagation delay, which is what makes the seeds' termination race reproducible.
"""
