"""A simulated RocketMQ cluster (:mod:`~streaming.sim.simulator`), fuzzed records
(:mod:`~streaming.sim.fuzz`) and an Apache Kafka broker on loopback
(:mod:`~streaming.sim.kafka_broker`), for demos, tests and benchmarks."""
