"""A toolrunner's instance name: given, or made once and kept in the data folder."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

import pytest

from toolrunner.instance import INSTANCE_FILE, InstanceNameError, instance_of


def test_the_name_made_at_the_first_start_is_kept_for_every_later_one(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = instance_of(data)
    assert first.startswith("tr-") and instance_of(data) == first
    assert (data / INSTANCE_FILE).read_text().strip() == first
    assert stat.S_IMODE((data / INSTANCE_FILE).stat().st_mode) == 0o600
    assert instance_of(tmp_path / "other") != first  # another data folder, another toolrunner
    assert list(data.iterdir()) == [data / INSTANCE_FILE]  # no draft left behind


def test_processes_starting_at_once_on_one_data_folder_get_one_name(tmp_path: Path) -> None:
    names: list[str] = []
    start = threading.Barrier(6)

    def name() -> None:
        start.wait()
        names.append(instance_of(tmp_path))

    threads = [threading.Thread(target=name) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(names) == 6 and len(set(names)) == 1


def test_a_given_name_wins_and_is_checked(tmp_path: Path) -> None:
    assert instance_of(tmp_path, "toolrunner-0") == "toolrunner-0"
    assert not (tmp_path / INSTANCE_FILE).exists()
    for bad in ("no spaces", "-dash-first", "x" * 64, "a/b", "tr\n"):
        with pytest.raises(InstanceNameError, match="not an instance name"):
            instance_of(tmp_path, bad)
    (tmp_path / INSTANCE_FILE).write_text("bad name\n")
    with pytest.raises(InstanceNameError, match=INSTANCE_FILE):
        instance_of(tmp_path)
