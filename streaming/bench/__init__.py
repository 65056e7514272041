"""Benchmarks that print their figures: ``python -m streaming.bench`` (or ``.throughput``: the job
against a pass-through), ``.latency`` (fault to decision on Kafka), ``.engine`` (the engine
alone), ``.tables`` (reading after many commits) and ``.dashboard``."""
