"""The tests' idle probe: one scrape of configmirror_work_pending, idle only if every state is 0."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from configmirror.metrics import Metrics
from configmirror_testing.scrape import Scrape

STATES = ("queued", "in_flight", "delayed", "waiting_for_server", "events", "notifications")


def scrape(pending: dict[str, int]) -> Scrape:
    metrics = Metrics()
    metrics.observe_pending(lambda: pending)
    return Scrape.parse(generate_latest(metrics.registry).decode())


def test_idle_when_every_kind_of_pending_work_is_zero() -> None:
    assert scrape(dict.fromkeys(STATES, 0)).idle() is True


@pytest.mark.parametrize("state", STATES)
def test_not_idle_while_any_one_kind_of_work_is_pending(state: str) -> None:
    assert scrape({**dict.fromkeys(STATES, 0), state: 1}).idle() is False


def test_an_operator_without_the_snapshot_cannot_be_called_idle() -> None:
    with pytest.raises(ValueError, match="configmirror_work_pending"):
        Scrape.parse("workqueue_depth 0\n").idle()
