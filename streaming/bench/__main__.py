"""``python -m streaming.bench``: the throughput benchmark (:mod:`streaming.bench.throughput`)."""

import sys

from streaming.bench.throughput import main

sys.exit(main())
