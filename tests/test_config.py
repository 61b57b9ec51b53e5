"""Settings from the environment: the retention caps and the sweep batch's bounds."""

from __future__ import annotations

import pytest

from echomq_http.config import (
    DEFAULT_COMPLETED_MAX,
    DEFAULT_FAILED_MAX,
    MAX_SWEEP_BATCH,
    ConfigError,
    Settings,
)


def test_finished_jobs_are_capped_by_count_by_default() -> None:
    settings = Settings.from_env({})
    assert (settings.completed_max, settings.failed_max) == (DEFAULT_COMPLETED_MAX, DEFAULT_FAILED_MAX)
    assert (DEFAULT_COMPLETED_MAX, DEFAULT_FAILED_MAX) == (10_000, 100_000)
    chosen = Settings.from_env({"EMQ_COMPLETED_MAX": "50", "EMQ_FAILED_MAX": "0"})
    assert (chosen.completed_max, chosen.failed_max) == (50, 0)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("EMQ_SWEEP_BATCH", str(MAX_SWEEP_BATCH + 1)),  # past it, one step's id lists near unpack's limit
        ("EMQ_SWEEP_BATCH", "0"),
        ("EMQ_COMPLETED_MAX", "-1"),
        ("EMQ_FAILED_MAX", "many"),
    ],
)
def test_out_of_range_settings_are_refused_by_name(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({name: value})


def test_the_largest_sweep_batch_is_accepted() -> None:
    assert Settings.from_env({"EMQ_SWEEP_BATCH": str(MAX_SWEEP_BATCH)}).sweep_batch == MAX_SWEEP_BATCH
