"""faultline's Spark-free code: the RocketMQ core (:mod:`udfs.rocketmq`) and the pandas
functions handed to Spark."""
