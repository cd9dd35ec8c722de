"""The overlap design space: schedules, and their lowering into task graphs."""

from .lowering import lower
from .schedule import Schedule, basic_schedules, parse_schedule
from .validity import invalid_reason

__all__ = ["Schedule", "basic_schedules", "invalid_reason", "lower", "parse_schedule"]
