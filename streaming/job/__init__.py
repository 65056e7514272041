"""The streaming job, in the order a record travels:

1. :mod:`~streaming.job.sources` read raw records (Kafka, files, or a simulated scenario), each
   keyed by its cluster;
2. :mod:`~streaming.job.query` groups them by cluster (and shard) into the one stateful operator;
3. :mod:`~streaming.job.stateful` parses them, runs the engine (:mod:`udfs.engine`) on the key's
   state and writes the tables' files;
4. :mod:`~streaming.job.sink` publishes what producers read (:mod:`~streaming.job.publish`) and
   commits every table exactly once per micro-batch.

:mod:`~streaming.job.run` starts it all and prints the progress (:mod:`~streaming.job.progress`)
and the summary (:mod:`~streaming.job.summary`); :mod:`~streaming.job.session` builds the Spark
session, :mod:`~streaming.job.checkpoint` keeps the job's marks beside Spark's checkpoint, and
:mod:`~streaming.job.maintain`, :mod:`~streaming.job.outage` and :mod:`~streaming.job.storage`
keep it running for months.
"""
