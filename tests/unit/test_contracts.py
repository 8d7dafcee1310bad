"""The published contracts (schemas/) are what the code does: generated from its models, valid
documents of their kind, and the order schema accepts and refuses what intake does."""

from __future__ import annotations

import json
from typing import Any

import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from jsonschema import Draft7Validator, Draft202012Validator
from schemathesis import GenerationMode

from shared.contracts.__main__ import SCHEMAS, main, rendered
from shared.contracts.messages import asyncapi_document, order_schema
from shared.contracts.openapi import openapi_document
from shared.domain.workflow_message import WorkflowMessage, validate_as
from shared.workflows import REGISTRY
from shared.workflows.orders.message import InvalidOrder, parse_order
from tests.conftest import ROOT, examples

ASYNCAPI_SPEC = ROOT / "node_modules/@asyncapi/specs/schemas/3.0.0-without-$id.json"
ORDER = Draft202012Validator(order_schema(REGISTRY))


def test_the_files_are_what_the_code_generates() -> None:
    for path, text in rendered().items():
        assert path.read_text() == text, f"{path.name} is stale: run python -m shared.contracts"
    assert main(["--check"]) == 0


def test_a_changed_model_is_caught(monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    import shared.contracts.__main__ as gen

    monkeypatch.setattr(gen, "order_schema",
                        lambda _: {**order_schema(REGISTRY), "title": "Changed"})
    assert main(["--check"]) == 1
    assert "order.schema.json is out of date" in capsys.readouterr().err


def test_the_order_schema_is_a_valid_json_schema() -> None:
    Draft202012Validator.check_schema(order_schema(REGISTRY))
    assert json.loads((SCHEMAS / "order.schema.json").read_text())["additionalProperties"] is False


# Every message model the app's workflows take (a user's own among them, once registered):
# what each publishes, intake must do.
MODELS = sorted({w.message for w in REGISTRY.workflows}, key=lambda m: m.__name__)


def _order_bodies(mode: GenerationMode, model: type[WorkflowMessage] | None = None) -> Any:
    """Bodies generated from a message schema by schemathesis (valid, or each violating it):
    the order schema's, or ``model``'s as the contracts publish it."""
    schema = (order_schema(REGISTRY) if model is None
              else model.model_json_schema(mode="validation"))
    defs = schema.pop("$defs", {})
    as_openapi = json.loads(json.dumps({
        "openapi": "3.1.0", "info": {"title": "orders", "version": "1"},
        "paths": {"/orders": {"post": {
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": {k: v for k, v in schema.items() if k not in ("$schema", "$id")}}}},
            "responses": {"200": {"description": "taken"}}}}},
        "components": {"schemas": defs},
    }).replace("#/$defs/", "#/components/schemas/"))
    op = schemathesis.openapi.from_dict(as_openapi)["/orders"]["POST"]
    return op.as_strategy(generation_mode=mode).map(lambda case: case.body)


@settings(max_examples=examples(300), suppress_health_check=list(HealthCheck), deadline=None)
@given(_order_bodies(GenerationMode.POSITIVE))
def test_every_order_the_schema_allows_is_accepted(doc: Any) -> None:
    assert ORDER.is_valid(doc)
    REGISTRY.parse(json.dumps(doc))


@settings(max_examples=examples(300), suppress_health_check=list(HealthCheck), deadline=None)
@given(_order_bodies(GenerationMode.NEGATIVE))
def test_every_order_the_schema_refuses_is_refused(doc: Any) -> None:
    assume(not isinstance(doc, bytes | bytearray))  # a body that is not JSON at all
    assume(not ORDER.is_valid(doc))
    with pytest.raises(InvalidOrder):
        REGISTRY.parse(json.dumps(doc))


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
@settings(max_examples=examples(100), suppress_health_check=list(HealthCheck), deadline=None)
@given(data=st.data())
def test_every_message_model_accepts_and_refuses_what_it_publishes(
        model: type[WorkflowMessage], data: st.DataObject) -> None:
    """A model of a user's own (a Decimal published as "number or string", say, where the
    model takes only a string) fails here, with the body both sides disagree on."""
    published = Draft202012Validator(model.model_json_schema(mode="validation"))
    good = data.draw(_order_bodies(GenerationMode.POSITIVE, model), label="allowed")
    assert published.is_valid(good)
    validate_as(model, json.dumps(good))
    bad = data.draw(_order_bodies(GenerationMode.NEGATIVE, model), label="refused")
    assume(not isinstance(bad, bytes | bytearray) and not published.is_valid(bad))
    with pytest.raises(InvalidOrder):
        validate_as(model, json.dumps(bad))


def _order(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"order_id": "o-1", "customer_id": "c-1",
                           "items": [{"sku": "A", "quantity": 1, "unit_price": "12.50"}]}
    for k, v in changes.items():
        if k.startswith("item_"):
            doc["items"] = [{**doc["items"][0], k[5:]: v}]
        else:
            doc[k] = v
    return {k: v for k, v in doc.items() if v is not ...}


@pytest.mark.parametrize("doc", [
    _order(extra_field="x"),
    _order(schema_version=2),
    _order(order_id="has/slash"),
    _order(order_id="-leading"),
    _order(customer_id=""),
    _order(customer_id=...),
    _order(items=[]),
    _order(item_quantity=0),
    _order(item_quantity=10_001),
    _order(item_quantity=True),  # found by the search: Python takes True for 1
    _order(item_quantity="2"),
    _order(schema_version=True),
    _order(item_unit_price="1e2"),
    _order(item_unit_price=" 5"),
    _order(item_unit_price="1.234"),
    _order(item_unit_price=-1),
    _order(item_unit_price=12.5),
    _order(item_unit_price="-1.00"),
    _order(item_colour="red"),
    _order(reply_to="Order-Status"),
    _order(reply_to="order--status"),
    _order(reply_to="ab"),
])
def test_what_the_schema_refuses_intake_refuses(doc: dict[str, Any]) -> None:
    assert not ORDER.is_valid(doc), doc
    with pytest.raises(InvalidOrder):
        parse_order(json.dumps(doc))


@pytest.mark.parametrize("doc", [
    _order(), _order(schema_version=1), _order(item_unit_price="9999999999.99"),
    _order(item_unit_price="0"), _order(reply_to="order-status-7"), _order(reply_to=None),
])
def test_what_the_schema_allows_intake_accepts(doc: dict[str, Any]) -> None:
    assert ORDER.is_valid(doc)
    parse_order(json.dumps(doc))


def _asyncapi_validator() -> Draft7Validator:
    assert ASYNCAPI_SPEC.exists(), "`make install` installs @asyncapi/specs (package.json)"
    return Draft7Validator(json.loads(ASYNCAPI_SPEC.read_text()))


def test_the_asyncapi_document_is_valid_asyncapi_3() -> None:
    doc = yaml.safe_load((SCHEMAS / "asyncapi.yaml").read_text())
    assert doc == json.loads(json.dumps(asyncapi_document(REGISTRY)))
    errors = list(_asyncapi_validator().iter_errors(doc))
    assert errors == [], [e.message for e in errors[:5]]


@pytest.mark.parametrize("break_it", [
    lambda d: d["operations"]["receiveOrder"].update(action="publish"),
    lambda d: d["channels"]["orders"].update(address=7),
    lambda d: d.update(asyncapi="3.0"),
    lambda d: d["channels"]["orders"].update(sender="me"),
])
def test_the_asyncapi_check_catches_a_broken_document(break_it: Any) -> None:
    doc = json.loads(json.dumps(asyncapi_document(REGISTRY)))
    break_it(doc)
    assert not _asyncapi_validator().is_valid(doc)


def test_the_asyncapi_document_names_every_queue_the_app_binds() -> None:
    import function_app
    from localrun.host.index import functions_of

    bound = {b.get("queueName") for f in functions_of(function_app.app) for b in f.bindings
             if b.get("queueName")}
    addresses = {c["address"] for c in asyncapi_document(REGISTRY)["channels"].values()}
    assert bound <= addresses and "{replyTo}" in addresses


def test_the_openapi_document_is_valid_json_schema_where_it_holds_schemas() -> None:
    for name, schema in openapi_document()["components"]["schemas"].items():
        Draft202012Validator.check_schema(schema)
        assert name in json.dumps(openapi_document()["paths"]) or name in json.dumps(
            openapi_document()["components"]["schemas"])


def test_the_message_check_reads_the_published_file() -> None:
    from datetime import UTC, datetime

    from shared.domain.messages import Action, AgentReply, ReplyOutcome, StatusUpdate
    from tests.contracts import problems

    good = AgentReply(order_id="o-1", step="take", action=Action.DO, attempt=1,
                      outcome=ReplyOutcome.OK).to_json()
    assert problems("agentResponses", good) == []
    bad = json.loads(good)
    del bad["outcome"]
    assert problems("agentResponses", json.dumps(bad)) == ["body: 'outcome' is a required property"]
    assert problems("agentResponses", "{oops")[0].startswith("not JSON")
    status = StatusUpdate(order_id="o-1", event="completed", at=datetime.now(UTC)).to_json()
    assert problems("statusUpdates", status) == []
    assert problems("statusUpdates", status.replace("completed", "finished")) != []


def test_help_writes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m shared.contracts --help` says what it does (it wrote the files)."""
    mtimes = {p: p.stat().st_mtime_ns for p in rendered()}
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "--check" in out and "wrote" not in out
    assert {p: p.stat().st_mtime_ns for p in rendered()} == mtimes


def test_without_the_development_packages_the_generator_says_what_to_install() -> None:
    """After `make demo` alone (which installs what the demo runs), the walk-through's next
    command ended in a bare ModuleNotFoundError for yaml."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", "import runpy, sys; sys.modules['yaml'] = None; "
         "runpy.run_module('shared.contracts', run_name='__main__')"],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [run.stderr.strip()]  # one line, no traceback
    assert "make dev" in run.stderr and "Traceback" not in run.stderr


def test_the_schema_ties_each_workflow_to_its_message_model() -> None:
    """A message of a workflow with a model of its own that forgets to name the workflow is
    read by intake as the default's, and refused: the published schema refuses it too, and
    intake's reason says which workflow it read the message as."""
    from dataclasses import replace as replaced

    from shared.domain.workflow import Registry
    from tests.workflow import FLOW

    class Renewal(WorkflowMessage):
        subscription_id: str

    registry = Registry.of([FLOW, replaced(FLOW, name="renewal", message=Renewal)])
    schema = Draft202012Validator(order_schema(registry))
    renewal = {"order_id": "r-1", "subscription_id": "s-1"}
    assert schema.is_valid({**renewal, "workflow": "renewal"})
    registry.parse(json.dumps({**renewal, "workflow": "renewal"}))
    assert not schema.is_valid(renewal)
    with pytest.raises(InvalidOrder, match="the default"):
        registry.parse(json.dumps(renewal))
    # A name no workflow has is refused by both, as is the other model's under that name.
    assert not schema.is_valid({**renewal, "workflow": "no-such"})
    assert not schema.is_valid({**renewal, "workflow": "test-flow"})


def test_a_new_services_queue_setting_goes_beside_the_other_queue_settings() -> None:
    from shared.contracts.__main__ import _local_settings

    template = {"IsEncrypted": False, "Values": {
        "AzureWebJobsStorage": "UseDevelopmentStorage=true",
        "SchedulerQueueName": "scheduler-commands", "AlphaRequestsQueueName": "alpha-requests",
        "FailureThreshold": "3", "LOCALRUN_MASTER_KEY": "k"}}
    out = _local_settings(template, {"threadPool": "64", "queueSettings": {
        "AlphaRequestsQueueName": "alpha-requests", "FraudRequestsQueueName": "fraud-requests"}})
    assert list(out["Values"]) == [  # type: ignore[call-overload]
        "AzureWebJobsStorage", "SchedulerQueueName", "AlphaRequestsQueueName",
        "FraudRequestsQueueName", "FailureThreshold", "LOCALRUN_MASTER_KEY",
        "PYTHON_THREADPOOL_THREAD_COUNT"]
