"""The end-to-end demo: lab, streaming workload, load and a safe drain."""
