"""The job's own sources, as Spark Python Data Sources yielding raw, unparsed records:
:mod:`~streaming.job.sources.files` and :mod:`~streaming.job.sources.simulator` (a scenario
written once as files). Kafka is read with Spark's own source (``streaming.job.query``)."""
