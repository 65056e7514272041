"""The core is a library of its own: no Spark, no Kafka, no Delta."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_core_imports_no_engine() -> None:
    code = (
        "import sys, udfs.rocketmq\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'pyspark', 'py4j', 'confluent_kafka', 'deltalake', 'pandas', 'pyarrow'})\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
