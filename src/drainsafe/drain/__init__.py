"""Safe node drain: a pure plan, and its execution through the Eviction API."""
