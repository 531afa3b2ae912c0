"""What the tests and benchmarks compare against, kept out of the public API: the
materialised sliding-window pipeline that index-batching replaces
(:mod:`ddstore.testing.windows`) and the brute-force T-CSR and temporal sampler
(:mod:`ddstore.testing.temporal`)."""
