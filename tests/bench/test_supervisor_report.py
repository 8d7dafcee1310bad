"""How the report explains a Supervisor tick that took longer while reading the same entities."""

from __future__ import annotations

from typing import Any

from localrun.bench.bench import _azurite_slowed


def _tick(seconds: float, reads: float, queries: float, control: float | None) -> dict[str, Any]:
    tick = {"seconds": seconds, "entities_read": 101, "azurite_point_reads_s": reads,
            "azurite_due_queries_s": queries}
    if control is not None:
        tick["azurite_control_reads_s"] = control
    return tick


def test_the_control_reads_say_where_azurite_s_time_went() -> None:
    text = _azurite_slowed(_tick(0.8, 0.183, 0.035, 0.081), _tick(2.1, 0.453, 0.065, 0.079), 50)
    assert "from 183 to 453 ms" in text and "from 35 to 65 ms" in text
    assert "took 81 and 79 ms" in text
    assert 'row key is "state"' in text and "reads of the same 50 records" in text


def test_a_report_from_before_the_control_is_explained_without_it() -> None:
    text = _azurite_slowed(_tick(0.8, 0.183, 0.035, None), _tick(2.1, 0.453, 0.065, None), 50)
    assert "from 183 to 453 ms" in text
    assert "row key" not in text and "scans where Table Storage seeks" in text
