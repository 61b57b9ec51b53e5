"""The queue domain: operations, leasing, schedules, cursors, limits and domain errors."""
