"""The rt_polarity variant comparison (README.md): its runner `compare_variants` and `variant_throughput` (the
variants' training steps timed side by side)."""
