"""Reading configmirror's /metrics: one parser (prometheus-client's), one sample lookup."""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from configmirror.metrics import Metrics


@dataclass(frozen=True)
class Scrape:
    """One reading of /metrics: every sample, by name and labels."""

    samples: tuple[tuple[str, dict[str, str], float], ...]

    @classmethod
    def parse(cls, text: str) -> Scrape:
        return cls(tuple((s.name, dict(s.labels), float(s.value))
                         for family in text_string_to_metric_families(text)
                         for s in family.samples))

    @classmethod
    def fetch(cls, url: str, timeout: float = 5.0) -> Scrape | None:
        """Scrape `url`; None when nothing answers there (yet, or any more)."""
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                return cls.parse(resp.read().decode())
        except OSError:
            return None

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples called `name` whose labels include `labels` (0 if none)."""
        return sum(value for sample, have, value in self.samples
                   if sample == name and all(have.get(k) == v for k, v in labels.items()))

    def idle(self) -> bool:
        """Nothing queued, in flight, delayed or waiting, read in one consistent snapshot."""
        states = [(have, value) for sample, have, value in self.samples
                  if sample == "configmirror_work_pending"]
        if not states:
            raise ValueError("this operator exports no configmirror_work_pending")
        return all(value == 0 for _, value in states)


def controller_sample(metrics: Metrics, name: str, controller: str = "test",
                      **labels: str) -> float:
    """Sample `name` of controller `controller` in `metrics`' own registry (0 when absent)."""
    value = metrics.registry.get_sample_value(name, {"controller": controller, **labels})
    return float(value or 0.0)
