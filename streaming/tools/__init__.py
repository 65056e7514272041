"""Commands over a job's output: ``faultline replay`` and ``state``, ``explain``, ``evaluate``
and ``dashboard``."""
