"""The fleet's figures of one driver on /metrics: runs it took over from dead drivers, and the
runs it holds under its lease. A driver on SQLite serves both as 0 (it takes nothing over)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from warden.store.errors import StoreUnavailable

if TYPE_CHECKING:
    from driver.loop import Driver

log = logging.getLogger("warden.driver.durable")


class FleetCollector(Collector):
    """Read at every scrape; the held count is one query, and while the database is away the last
    count is served rather than failing the whole scrape."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self._held = 0

    def collect(self) -> Iterator[Metric]:
        durable = self.driver.durable
        if durable is not None:
            try:
                self._held = durable.runs_held()
            except StoreUnavailable as exc:
                log.info("runs held: the store did not answer (%s); serving the last count", exc)
        yield CounterMetricFamily("warden_driver_runs_taken_over",
                                  "Runs of dead drivers whose workflows this driver took over",
                                  value=durable.taken_over if durable is not None else 0)
        yield GaugeMetricFamily("warden_driver_leases_held",
                                "Open runs this driver holds under its lease (their workflows run here)",
                                value=self._held if durable is not None else 0)
