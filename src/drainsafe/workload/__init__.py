"""Example workloads: an LLM-like streaming server used by the lab, the demo and benchmarks."""
