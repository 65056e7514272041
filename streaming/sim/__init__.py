"""A simulated RocketMQ cluster (:mod:`~streaming.sim.simulator`), fuzzed records
(:mod:`~streaming.sim.fuzz`) and a Kafka-protocol cluster on loopback
(:mod:`~streaming.sim.mock_kafka`), for demos, tests and benchmarks."""
