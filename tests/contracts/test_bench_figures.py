"""The side-by-side bench reads h2load's output right: a wrong parse would print a ratio against
the targets that nobody measured."""

from __future__ import annotations

import math
from pathlib import Path

from bench.bench_cerbos import _logged_p50_us, _us


def _log(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "requests.tsv"
    path.write_text("".join(row + "\n" for row in rows))
    return path


def test_p50_is_the_median_of_the_counted_calls(tmp_path: Path) -> None:
    log = _log(tmp_path, [f"17960000000{i:05d}\t200\t{us}" for i, us in enumerate((900, 100, 500, 300, 700))])
    assert _logged_p50_us(log, 5) == 500.0
    assert not log.exists()  # one log per run: the next run must not read this one's rows


def test_only_the_last_counted_rows_are_read(tmp_path: Path) -> None:
    # rows logged before the measured calls (a warm-up) are slow; the summary did not count them
    rows = [f"1\t200\t{us}" for us in (9000, 9000, 9000)] + [f"2\t200\t{us}" for us in (10, 20, 30)]
    assert _logged_p50_us(_log(tmp_path, rows), 3) == 20.0


def test_failed_streams_are_left_out(tmp_path: Path) -> None:
    rows = ["1\t-1\t5", "1\t200\t400", "1\t-1\t1", "1\t200\t600", "1\t200\t500"]
    assert _logged_p50_us(_log(tmp_path, rows), 5) == 500.0


def test_no_counted_call_gives_no_figure(tmp_path: Path) -> None:
    assert math.isnan(_logged_p50_us(_log(tmp_path, []), 0))
    assert math.isnan(_logged_p50_us(_log(tmp_path, ["1\t200\t300"]), 0))


def test_h2load_units() -> None:
    assert _us("123.45us") == 123.45
    assert _us("1.5ms") == 1500.0
    assert _us("2s") == 2_000_000.0
    assert math.isnan(_us("12min"))
