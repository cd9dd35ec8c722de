"""ficco-sim: predict how fast multi-GPU compute-communication overlap runs."""

__version__ = "0.1.0"
