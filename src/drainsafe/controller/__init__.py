"""drainsafe controller: an eviction guard that makes every drainer make-before-break."""
