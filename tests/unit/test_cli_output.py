"""How the CLI prints: a step's result on its line in `orders status`, cut past a width (the
API and --json give it whole); listings too wide for the terminal as blocks, ids whole; and a
TLS failure told apart from an API that does not answer."""

from __future__ import annotations

import io
import ssl

import httpx
import pytest
from rich.console import Console

from orderctl.connection import _tls_failed
from orderctl.output import RESULT_WIDTH, print_orders, print_rows, result_text, step_table


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


def test_a_listing_with_a_long_id_is_blocks_not_a_table_of_crushed_columns(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    long_id = "o" * 100
    print_rows([{"RaisedAt": "2026-11-28T07:01:02+00:00", "Kind": "OrderFailed",
                 "OrderID": long_id, "Step": "charge_payment", "Reason": "card declined"}],
               ("RaisedAt", "Kind", "OrderID", "Step", "Reason"), False)
    lines = capsys.readouterr().out.splitlines()
    # The id cannot shrink: no room for a table whose other columns stay readable.
    assert lines[0] == "2026-11-28T07:01:02+00:00"
    assert f"  OrderID: {long_id}" in lines and "  Step: charge_payment" in lines


def test_an_order_id_of_any_length_stays_on_one_line(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    long_id = "a" * 128
    print_orders([{"OrderID": long_id, "ProcessState": "Processing", "Compensation": None,
                   "Workflow": None, "WorkflowVersion": None, "FailureCount": 0,
                   "CurrentStep": "reserve_inventory", "LastError": None,
                   "UpdatedAt": "2026-11-28T07:01:02.123456Z"}])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{long_id}  Processing  2026-11-28T07:01:02"
    assert lines[1] == "  default v1 at reserve_inventory"


def test_a_tls_failure_is_told_apart_from_nothing_answering() -> None:
    def raised(cause: BaseException) -> httpx.ConnectError:
        try:
            try:
                raise cause
            except OSError as e:
                raise httpx.ConnectError(str(e)) from e
        except httpx.ConnectError as e:
            return e

    assert _tls_failed(raised(ssl.SSLCertVerificationError("certificate verify failed")))
    assert not _tls_failed(raised(ConnectionRefusedError(111, "Connection refused")))
