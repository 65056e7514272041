"""One set of Kafka settings for two clients: ``kafka_options`` are librdkafka's (the job's
publisher, its outage watch, ``faultline simulate``), and Spark's Kafka source runs the Java
client, which names some settings differently. :func:`spark_source_options` hands the source
what the Java client shares or can be told in its own words; ``kafka_source_options`` adds or
overrides any of Spark's source options verbatim (``kafka.ssl.keystore.location``,
``kafka.sasl.jaas.config``, ``minPartitions``, ...)."""

from __future__ import annotations

import json
from collections.abc import Mapping

SHARED = ("security.protocol", "client.id", "sasl.kerberos.service.name")
"""librdkafka settings the Java client takes under the same name with the same values."""

LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
"""The Java client's login module for librdkafka's ``sasl.username``/``sasl.password``."""


def spark_source_options(
    kafka_options: Mapping[str, str], source_options: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Spark's ``kafka.*`` options for the librdkafka settings ``kafka_options``, then
    ``source_options`` over them.

    >>> opts = spark_source_options({"security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN",
    ...     "sasl.username": "u", "sasl.password": 'p"1', "ssl.ca.location": "/ca.pem",
    ...     "linger.ms": "5"})
    >>> print(opts.pop("kafka.sasl.jaas.config").split(".")[-1])
    PlainLoginModule required username="u" password="p\\"1";
    >>> for key, value in sorted(opts.items()):
    ...     print(key, value)
    kafka.sasl.mechanism PLAIN
    kafka.security.protocol SASL_SSL
    kafka.ssl.truststore.location /ca.pem
    kafka.ssl.truststore.type PEM
    """
    out = {f"kafka.{k}": v for k, v in kafka_options.items() if k in SHARED}
    mechanism = kafka_options.get("sasl.mechanism") or kafka_options.get("sasl.mechanisms")
    if mechanism:
        out["kafka.sasl.mechanism"] = mechanism
    user, password = kafka_options.get("sasl.username"), kafka_options.get("sasl.password")
    module = LOGIN_MODULES.get((mechanism or "PLAIN").upper())
    if user is not None and password is not None and module is not None:
        out["kafka.sasl.jaas.config"] = (
            f"{module} required username={json.dumps(user)} password={json.dumps(password)};"
        )
    if kafka_options.get("ssl.ca.location"):
        out["kafka.ssl.truststore.type"] = "PEM"
        out["kafka.ssl.truststore.location"] = kafka_options["ssl.ca.location"]
    if kafka_options.get("ssl.endpoint.identification.algorithm") == "none":
        out["kafka.ssl.endpoint.identification.algorithm"] = ""
    return {**out, **(source_options or {})}
