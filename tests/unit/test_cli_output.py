"""What `orders status` shows of a step's result: its JSON on the step's line, cut past a
width (the API and --json give it whole), and nothing where there is none."""

from __future__ import annotations

import io

from rich.console import Console

from orderctl.output import RESULT_WIDTH, result_text, step_table


def _step(name: str, result: object) -> dict[str, object]:
    return {"name": name, "status": "completed", "attempt": 1, "complete_by": None,
            "last_error": None, "work_key": f"o-1.{name}.do", "in_doubt": False,
            "result": result}


def test_a_steps_result_is_on_its_line_and_a_long_one_is_cut() -> None:
    view = {"Steps": [_step("charge_payment", {"charge_id": "ch_1", "amount": "9.00"}),
                      _step("hold", None), _step("big", {"blob": "x" * 500})]}
    buf = io.StringIO()
    Console(file=buf, width=400, markup=False).print(step_table(view))
    lines = buf.getvalue().splitlines()
    assert '{"charge_id":"ch_1","amount":"9.00"}' in next(x for x in lines if "charge_payment" in x)
    assert "{" not in next(x for x in lines if x.startswith("hold") or " hold " in x)
    cut = result_text({"blob": "x" * 500})
    assert len(cut) == RESULT_WIDTH and cut.endswith("…")
