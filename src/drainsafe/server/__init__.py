"""Drain-aware serving: the lifecycle, the ASGI runtime and the entrypoint wrapper."""
