"""Everything the app writes, at its largest, against the Azure limit that holds it (#30).

An order as wide as the published schema takes goes through intake, the Scheduler and the real
Agents, on the engine's test workflow (tests/workflow.py), whose message takes it as it is. The
remote service behind them answers with an error far past any budget, so the order fails, undoes
what it can, fails an undo, and an operator resubmits it with the longest reason, until every
budget that grows (history, timeline) is full. A hook on the app's own storage clients sees each
request they send: every entity as the Tables SDK sends it, every queue message as the Queues SDK
sends it (base64), each held to the limit that applies. An Agent's reply goes out on the host's
output binding: sent here as the host sends it (base64), through the same hook. Azurite refuses
what Azure would (a string past 32,768 units, a message past 64 KiB): nothing may be refused.

The numbers are in docs/limits.md; what follows from the budgets by arithmetic alone is in
tests/unit/test_budget.py.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import urlparse

import azure.functions as func
import httpx
import pytest
from azure.core.exceptions import HttpResponseError
from azure.core.pipeline import PipelineResponse
from azure.storage.queue import QueueClient, TextBase64EncodePolicy

from localrun.host.index import functions_of
from shared import bootstrap
from shared.adapters.remote_service import PermanentServiceError, RemoteServiceClient
from shared.domain import budget
from shared.domain.services import Call
from shared.domain.workflow import agent_function
from shared.handlers.principal import RESUBMIT_ROLE
from shared.settings import load_settings
from tests.conftest import FakeClock
from tests.integration.conftest import app_of
from tests.integration.helpers import drain, queue_message, sb_message
from tests.integration.test_operator_api import signed_in
from tests.workflow import BY_CUSTOMER, FLOW, HOLD, TAKE, queue_settings

# The test workflow whose message also writes a column on its order row (the customer, as wide
# as the order's): the order row at its widest holds one.
REGISTRY = BY_CUSTOMER

# Table Storage (https://learn.microsoft.com/azure/storage/tables/scalability-targets).
ENTITY_BYTES = 1024 * 1024
PROPERTY_BYTES = 64 * 1024
STRING_UNITS = 32_768  # UTF-16 code units: 64 KiB
PROPERTIES = 255  # PartitionKey, RowKey and Timestamp among them
KEY_BYTES = 1024  # PartitionKey, RowKey: 512 UTF-16 units
# A Storage queue message: its text as sent (base64 here, the Functions host's encoding).
QUEUE_MESSAGE = 64 * 1024
# A Service Bus Standard message.
SERVICE_BUS_MESSAGE = 256 * 1024

GENERATIONS = 6  # resubmits until the history and the timeline are full, and then some
NON_BMP = "\U0001f600"  # 😀: two UTF-16 units, four UTF-8 bytes
CJK = "\U00020000"  # 𠀀: likewise
# Per unit of a budget, what JSON stores largest: a control character is a six-unit escape.
ESCAPED = "\x01"
# The operations the service does; it refuses the rest. The order fails at its second step (a
# refusal, which did nothing and is not undone), the first step's undo is refused: the undo
# fails too, and two steps keep an error each (the most a record's Steps can hold), beside the
# first step's result at its budget.
DOES = {HOLD.operation}


def widest_order(order_id: str, reply_to: str | None = None) -> dict[str, Any]:
    """As wide as the largest order the published schema takes (schemas/order.schema.json),
    for the test workflow (its message takes any items)."""
    order = {"order_id": order_id, "workflow": FLOW.name, "customer_id": CJK * 128,
             "items": [{"sku": NON_BMP * 64, "quantity": 10_000, "unit_price": "9999999999.99"}
                       for _ in range(100)]}
    return order if reply_to is None else {**order, "reply_to": reply_to}


def units(text: str) -> int:
    return budget.utf16_units(text)


# --- Measuring what the SDKs send --------------------------------------------------------------

_SIZE = {"Edm.DateTime": 8, "Edm.Int64": 8, "Edm.Double": 8, "Edm.Guid": 16}


@dataclass(frozen=True)
class Entity:
    """An entity as one request wrote it, measured as Table Storage counts it."""

    table: str
    props: dict[str, Any]  # name -> value as sent (odata annotations apart)
    types: dict[str, str]

    @property
    def keys(self) -> tuple[str, str]:
        return str(self.props.get("PartitionKey", "")), str(self.props.get("RowKey", ""))

    def is_string(self, name: str) -> bool:
        return isinstance(self.props[name], str) and self.types.get(name, "Edm.String") \
            == "Edm.String"

    def value_bytes(self, name: str) -> int:
        v, t = self.props[name], self.types.get(name)
        if t == "Edm.Binary":
            return len(base64.b64decode(v))
        if t in _SIZE:
            return _SIZE[t]
        if isinstance(v, bool):
            return 1
        if isinstance(v, int):
            return 4
        if isinstance(v, float):
            return 8
        return 2 * units(str(v))

    @property
    def size(self) -> int:
        """Azure's formula: 4 bytes, the keys, and 8 bytes, the name and the value of each
        property (a string's value: 4 bytes and 2 a unit); Timestamp counted."""
        pk, rk = self.keys
        props = [n for n in self.props if n not in ("PartitionKey", "RowKey")]
        return (4 + 2 * (units(pk) + units(rk)) + (8 + 2 * len("Timestamp") + 8)
                + sum(8 + 2 * units(n) + self.value_bytes(n) + 4 * self.is_string(n)
                      for n in props))

    @property
    def count(self) -> int:
        return len(self.props) + ("Timestamp" not in self.props)

    def largest_string(self) -> tuple[str, int]:
        strings = {n: units(v) for n, v in self.props.items() if self.is_string(n)}
        name = max(strings, key=lambda n: strings[n])
        return name, strings[name]


@dataclass(frozen=True)
class Message:
    queue: str
    text: str  # as sent: base64

    @property
    def body(self) -> str:
        return base64.b64decode(self.text).decode()


_BATCHED = re.compile(rb"(?:POST|PUT|PATCH|MERGE) (\S+) HTTP/1\.1\r\n.*?\r\n\r\n(\{.*?\})\r\n",
                      re.DOTALL)
_MESSAGE_TEXT = re.compile(rb"<MessageText>(.*?)</MessageText>", re.DOTALL)


def _table_of(url: str) -> str:
    return urlparse(url).path.rstrip("/").split("/")[-1].split("(")[0]


def _entity(table: str, body: dict[str, Any]) -> Entity:
    types = {k.removesuffix("@odata.type"): v for k, v in body.items()
             if k.endswith("@odata.type")}
    props = {k: v for k, v in body.items() if "@odata" not in k}
    return Entity(table, props, types)


@dataclass
class Recorder:
    """A response hook on the app's storage clients: what each successful write sent."""

    entities: list[Entity] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    # Writes storage refused for what they hold (anything but a lost race or a key it has).
    refused: list[str] = field(default_factory=list)

    def table(self, response: PipelineResponse[Any, Any]) -> None:
        request, status = response.http_request, response.http_response.status_code
        if request.method not in ("POST", "PUT", "PATCH", "MERGE") or not request.body:
            return
        body = request.body if isinstance(request.body, bytes) else request.body.encode()
        if status >= 300:
            if status not in (404, 409, 412):
                self.refused.append(f"{status} {request.method} {request.url[:200]}")
            return
        if _table_of(request.url) == "Tables":  # a table created
            return
        if _table_of(request.url) == "$batch":
            for url, part in _BATCHED.findall(body):
                self.entities.append(_entity(_table_of(url.decode()), json.loads(part)))
            return
        self.entities.append(_entity(_table_of(request.url), json.loads(body)))

    def queue(self, response: PipelineResponse[Any, Any]) -> None:
        request, status = response.http_request, response.http_response.status_code
        if request.method != "POST" or not urlparse(request.url).path.endswith("/messages"):
            return
        body = request.body if isinstance(request.body, bytes) else request.body.encode()
        if status >= 300:
            self.refused.append(f"{status} message to {request.url[:200]}")
            return
        queue = urlparse(request.url).path.split("/")[-2]
        for text in _MESSAGE_TEXT.findall(body):
            self.messages.append(Message(queue, text.decode()))


# --- The app, its remote service, and the host's deliveries -------------------------------------


@cache
def _app() -> Any:
    return app_of(REGISTRY)


def function(name: str) -> Any:
    """One of the functions function_app.py would register, in an app of the test workflow."""
    (f,) = [f for f in functions_of(_app()) if f.name == name]
    return f.call


class Service:
    """The remote service behind every Agent: does some operations, refuses the others with an
    error body far past the budget of any text the app keeps."""

    def __init__(self, refusal: str) -> None:
        self.refusal = refusal
        self.calls: list[str] = []
        self.undone_with: list[Any] = []  # the result each undo was handed

    def answer(self, c: Call) -> dict[str, Any]:
        """The work's answer, as large as its step keeps, in the refusal's characters."""
        limit = FLOW.result_budget(c.step)
        answer = {"status": "done", "key": c.key, "pad": ""}
        room = limit - budget.json_bytes(answer)
        unit = self.refusal[0]
        each = budget.json_bytes(unit * 2) - budget.json_bytes(unit)  # its JSON's bytes
        answer["pad"] = unit * (room // each)
        assert limit - each < budget.json_bytes(answer) <= limit
        return answer

    def call(self, c: Call, timeout: float) -> dict[str, Any]:
        self.calls.append(c.operation)
        if c.action.value == "undo":
            self.undone_with.append(c.result)
        if c.operation not in DOES:
            raise PermanentServiceError(self.refusal)  # every unit of it at its worst
        return self.answer(c)


class Reply(func.Out[str]):
    """The Agent function's output binding, as the host hands it over."""

    def __init__(self) -> None:
        self.value: str | None = None

    def set(self, val: str) -> None:
        self.value = val

    def get(self) -> str:
        return self.value or ""


@dataclass
class App:
    env: dict[str, str]
    container: bootstrap.Container
    recorder: Recorder
    replies: QueueClient  # what the host's output binding sends to

    def pump(self) -> int:
        """Deliver every message on the app's queues to its function, as the host would,
        until none is left; an Agent's reply is sent as the host sends it. Deliveries made."""
        s = self.container.settings
        agents = {v.queue: name for name, v in self.container.config.services.items()}
        delivered = 0
        while True:
            moved = 0
            for queue, service in agents.items():
                for body in drain(queue):
                    reply = Reply()
                    function(agent_function(service))(msg=queue_message(body), reply=reply)
                    if reply.value is not None:
                        self.replies.send_message(reply.value)
                    moved += 1
            for body in drain(s.responses_queue):
                function("scheduler_replies")(msg=queue_message(body))
                moved += 1
            for body in drain(s.scheduler_queue):
                function("scheduler_commands")(msg=queue_message(body))
                moved += 1
            if not moved:
                return delivered
            delivered += moved


@pytest.fixture
def make_app(app_env: Callable[..., dict[str, str]],
             clock: FakeClock) -> Iterator[Callable[[], App]]:
    """The app on this test's tables and queues, with the test workflow, its storage clients
    hooked (bootstrap passes the options to each SDK client)."""
    made: list[bootstrap.Container] = []

    def make() -> App:
        env = app_env(OutageGapSeconds="86400")
        env = {**queue_settings(env["StateTableName"][5:].lower()), **env}  # this test's own
        rec = Recorder()
        c = bootstrap.build(load_settings(env), clock=clock, workflows=REGISTRY,
                            table_options={"raw_response_hook": rec.table},
                            queue_options={"raw_response_hook": rec.queue})
        c.ensure_resources()
        bootstrap.reset(c)
        made.append(c)
        replies = c.queues.get_queue_client(c.settings.responses_queue,
                                            message_encode_policy=TextBase64EncodePolicy())
        return App(env, c, rec, replies)

    yield make
    for c in made:
        c.close()


def resubmit(order_id: str, reason: str) -> None:
    body = json.dumps({"reason": reason, "force": True}).encode()
    answer = function("resubmit_order")(req=func.HttpRequest(
        method="POST", url=f"/api/orders/{order_id}/resubmit", body=body,
        # The longest name a principal's label keeps: the record holds it with each resubmit.
        # Sent to this machine and JSON, as every operator request off the platform must be.
        headers={**signed_in(RESUBMIT_ROLE, name="n" * 300), "Host": "localhost",
                 "Content-Type": "application/json"},
        route_params={"order_id": order_id}))
    assert answer.status_code == 202, answer.get_body()[:300]


# --- What was written, by kind, and the limit each is held to -----------------------------------


def kind_of(app: App, written: Entity | Message) -> str:
    env, s = app.env, app.container.settings
    if isinstance(written, Message):
        agents = {v.queue for v in app.container.config.services.values()}
        return ("Scheduler command" if written.queue == s.scheduler_queue
                else "Agent request" if written.queue in agents
                else "Agent reply" if written.queue == s.responses_queue
                else "status event")
    pk, rk = written.keys
    tables = {env["StateTableName"]: "order row" if rk == "order" else "state record",
              env["OperatorAlertsTableName"]: "OperatorAlerts row",
              env["RejectedOrdersTableName"]: "RejectedOrders row",
              env["InFlightTableName"]: "due-time index entry" if pk.startswith("due-")
              else "Supervisor's tick log"}
    return tables.get(written.table, written.table)


@dataclass
class Largest:
    """The largest of one kind of thing written: a message's size as sent, or an entity's size,
    property count and each string property's UTF-16 units."""

    bytes: int = 0
    properties: int = 0
    units: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        if not self.units:
            return f"{self.bytes:,} B ({self.bytes / QUEUE_MESSAGE:.0%} of 64 KiB)"
        strings = ", ".join(f"{n} {u:,}" for n, u in sorted(self.units.items(),
                                                            key=lambda x: -x[1]) if u > 200)
        return f"entity {self.bytes:,} B, {self.properties} properties; units: {strings}"


def assert_within_limits(app: App) -> dict[str, Largest]:
    """Every entity and message written is within its limit; the largest of each kind."""
    rec = app.recorder
    assert rec.refused == []
    largest: dict[str, Largest] = {}
    for e in rec.entities:
        what = kind_of(app, e)
        pk, rk = e.keys
        name, longest = e.largest_string()
        assert 2 * units(pk) <= KEY_BYTES and 2 * units(rk) <= KEY_BYTES, what
        assert e.count <= PROPERTIES, what
        assert longest <= STRING_UNITS, f"{what}.{name}: {longest} UTF-16 units"
        assert all(e.value_bytes(n) <= PROPERTY_BYTES for n in e.props), what
        assert e.size <= ENTITY_BYTES, f"{what}: {e.size} bytes"
        seen = largest.setdefault(what, Largest())
        seen.bytes, seen.properties = max(seen.bytes, e.size), max(seen.properties, e.count)
        for n, v in e.props.items():
            if e.is_string(n):
                seen.units[n] = max(seen.units.get(n, 0), units(v))
    for m in rec.messages:
        what = kind_of(app, m)
        assert len(m.text) <= QUEUE_MESSAGE, f"{what}: {len(m.text)} bytes"
        seen = largest.setdefault(what, Largest())
        seen.bytes = max(seen.bytes, len(m.text))
    print("".join(f"\n{what}: {seen}" for what, seen in sorted(largest.items())))  # -s shows
    return largest


# --- The tests ------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "reason"), [(NON_BMP, CJK), (ESCAPED, ESCAPED)],
                         ids=["non-bmp", "escaped"])
def test_everything_written_for_the_widest_order_failing_every_time_fits_its_limit(
        make_app: Callable[[], App], clock: FakeClock, text: str, reason: str) -> None:
    """Each error text at its budget (2,000 units, from a 40,000-character body), the longest
    reason (1,000 characters) on every resubmit, and the widest order in every Agent request.
    ``escaped``: every unit of those texts a control character, stored in JSON as six."""
    app = make_app()
    c = app.container
    service = Service(text * 40_000)
    for agent in c.agents.values():
        agent._client = service  # type: ignore[assignment]
    prefix = c.settings.reply_allow_list.rstrip("*")
    reply_to = f"{prefix}-" + "r" * (62 - len(prefix))  # 63: a queue name's longest
    c.queues.create_queue(reply_to)
    order_id = "o:" + "9" * 126
    order = widest_order(order_id, reply_to)
    # As a sender's JSON library writes it by default: every non-ASCII character escaped.
    sent = json.dumps(order).encode()
    assert len(sent) <= SERVICE_BUS_MESSAGE
    print(f"\norder message: {len(sent):,} B ({len(sent) / SERVICE_BUS_MESSAGE:.0%} of 256 KB)")

    function("intake")(msg=sb_message(sent, message_id=order_id))
    app.pump()
    for generation in range(1, GENERATIONS + 1):
        clock.advance(minutes=5)
        resubmit(order_id, reason * 1_000)
        app.pump()
        record = c.store.get_state(order_id)
        assert record is not None and record.generation == generation
        assert (record.process_state.value, record.compensation) == ("Error", "Failed")
    c.supervisor.tick()
    # The refused take is never undone; the hold's undo is handed the answer its work was
    # given (as large as its step keeps), and is refused.
    assert service.calls[:4] == [HOLD.operation, TAKE.operation, HOLD.compensation,
                                 HOLD.operation]
    assert TAKE.compensation not in service.calls
    assert service.undone_with and all(r is not None and r["pad"] and r["key"].endswith(
        ".hold.do") for r in service.undone_with)

    # The worst case was reached: two errors at their budget in the steps, a full timeline,
    # the widest order in each request.
    record = c.store.get_state(order_id)
    assert record is not None
    full = budget.ERROR_TEXT - 5  # a cut never splits a surrogate pair or a 6-unit escape
    errors = [s.last_error for s in record.steps if s.last_error]
    assert len(errors) == 2 and all(budget.text_units(e) >= full for e in errors)
    kept = record.step(HOLD.name).result
    assert kept is not None and budget.json_bytes(kept) > FLOW.result_budget(HOLD.name) - 6
    assert record.timeline[0]["event"] != "received"  # full: the oldest went first
    requests = [m for m in app.recorder.messages if kind_of(app, m) == "Agent request"]
    assert all(json.loads(m.body)["order"] == {"schema_version": 1, **order} for m in requests)
    replies = [json.loads(m.body) for m in app.recorder.messages
               if kind_of(app, m) == "Agent reply"]
    assert max(budget.text_units(r["error"] or "") for r in replies) >= full

    report = assert_within_limits(app)
    assert set(report) == {"order row", "state record", "due-time index entry",
                           "Supervisor's tick log", "OperatorAlerts row", "status event",
                           "Scheduler command", "Agent request", "Agent reply"}


def test_rejected_intake_at_the_largest_message_service_bus_takes_fits_its_limit(
        make_app: Callable[[], App]) -> None:
    """A body that is no order, as large as Service Bus takes, in four-byte characters and
    control characters; and the widest order again under its id with other content."""
    app = make_app()
    # An error an item (no item is an object), each named in the reason; then filler up to the
    # message's limit.
    wrong = {"order_id": "x", "items": [0] * 100}
    room = SERVICE_BUS_MESSAGE - len(json.dumps({**wrong, "customer_id": ""}).encode())
    filler = (NON_BMP + ESCAPED) * (room // 10)  # ten bytes a pair, as JSON
    invalid = json.dumps({**wrong, "customer_id": filler}, ensure_ascii=False).encode()
    assert SERVICE_BUS_MESSAGE - 10 < len(invalid) <= SERVICE_BUS_MESSAGE
    function("intake")(msg=sb_message(invalid, message_id="m" * 128))
    order_id = "o:" + "9" * 126
    order = widest_order(order_id)
    function("intake")(msg=sb_message(order, message_id=order_id))
    order["customer_id"] = NON_BMP * 128
    function("intake")(msg=sb_message(order, message_id=order_id + "-again"))

    rejected = [e for e in app.recorder.entities if kind_of(app, e) == "RejectedOrders row"]
    assert sorted(e.props["Kind"] for e in rejected) == ["conflict", "invalid"]
    assert all(e.props["BodyTruncated"] for e in rejected)
    # The invalid body's reason names more errors than its budget keeps: it is at its largest.
    (invalid,) = [e for e in rejected if e.props["Kind"] == "invalid"]
    assert invalid.props["Reason"].endswith(" [cut]")
    report = assert_within_limits(app)
    assert {"RejectedOrders row", "OperatorAlerts row"} <= set(report)


@pytest.mark.parametrize(("size", "kept"), [(None, True), (50_000, False)],
                         ids=["at-its-budget", "past-it"])
def test_the_reply_fits_a_queue_message_whatever_the_service_answers(
        make_app: Callable[[], App], size: int | None, kept: bool) -> None:
    """An answer within the step's share of the record goes back whole, in an ok reply; one
    past it (50,000 bytes of JSON: the service's business) is never kept in part: the step is
    refused with a note in its place. Either way the reply fits its queue."""
    app = make_app()
    c = app.container
    limit = FLOW.result_budget(HOLD.name)
    # Four bytes of JSON each, less the object's 16 around them.
    receipt = {"receipt": NON_BMP * (((size or limit) - 16) // 4)}
    assert (budget.json_bytes(receipt) <= limit) is kept
    http = httpx.Client(transport=httpx.MockTransport(
        lambda _: httpx.Response(200, json=receipt)))
    c.agents["alpha"]._client = RemoteServiceClient("http://alpha.test", http)
    function("intake")(msg=sb_message({"order_id": "o-1", "customer_id": "c-1", "items": [
        {"sku": "A", "quantity": 1, "unit_price": "1.00"}]}, message_id="o-1"))
    (request,) = drain(c.config.services["alpha"].queue)
    reply = Reply()
    function(agent_function("alpha"))(msg=queue_message(request), reply=reply)
    http.close()
    assert reply.value is not None
    answered = json.loads(reply.value)
    if kept:
        assert (answered["outcome"], answered["result"]) == ("ok", receipt)
    else:
        assert answered["outcome"] == "permanent_error", f"{reply.value!r:.300}"
        assert f"{limit:,}" in answered["error"] and "result_budget" in answered["error"]
        assert set(answered["result"]) == {"omitted"}  # a note, nothing of the answer
    sent = base64.b64encode(reply.value.encode())
    try:
        app.replies.send_message(reply.value)  # as the host's output binding sends it
    except HttpResponseError as e:
        raise AssertionError(f"the queue refused a reply of {len(sent):,} bytes as sent "
                             f"({getattr(e, 'error_code', e.reason)})") from None
