"""The lab's node side: one kubelet per node, running pods as local processes.

kubelet (registration, pod workers, status), process (containers as process groups),
probes and handlers (probe and lifecycle-hook actions), termination (preStop, SIGTERM,
SIGKILL as the kubelet times them) and podip (loopback pod IPs).
"""
