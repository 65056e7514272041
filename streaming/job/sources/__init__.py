"""The job's sources, as Spark Python Data Sources yielding raw, unparsed records:
:mod:`~streaming.job.sources.kafka`, :mod:`~streaming.job.sources.files`, and
:mod:`~streaming.job.sources.simulator` (a scenario written once as files)."""
