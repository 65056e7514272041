"""Commands over a job's output: ``faultline replay`` and ``state``, ``explain``, ``evaluate``
and ``dashboard``."""

OUTPUT_HINT = (
    "give the folder a job or a replay wrote its tables to (faultline run's --output, output by "
    "default)"
)
"""What every command that reads a job's tables says when ``--output`` is not such a folder."""
