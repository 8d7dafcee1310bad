"""A reader of the state table cannot answer for an Agent: once an attempt's request is sent,
the record keeps only the digest of its token, and a reply is held to that digest."""

from __future__ import annotations

import json
from collections.abc import Callable

from shared import bootstrap
from shared.domain.messages import AgentReply
from tests.integration.helpers import drain_json, entities, function, order, sb_message
from tests.integration.test_scheduler import reply

intake = function("intake")


def test_the_record_keeps_no_token_a_reader_of_the_table_could_echo(
        app_env: Callable[..., dict[str, str]]) -> None:
    env = app_env()
    intake(msg=sb_message(order("o-1")))
    (request,) = drain_json(env["InventoryRequestsQueueName"])
    token = request["token"]
    (entity,) = entities(env["StateTableName"], "RowKey eq 'state'")
    assert not [k for k, v in entity.items() if isinstance(v, str) and token in v]
    (step, *_) = json.loads(entity["Steps"])
    assert step["token"] is None and len(step["token_digests"]) == 1
    # What a reader of the record has is no token: a reply echoing it is refused.
    s = bootstrap.container().scheduler
    forged = json.loads(reply(request))
    forged["token"] = step["token_digests"][0]
    s.handle_reply(AgentReply.model_validate(forged).to_json())
    assert drain_json(env["PaymentRequestsQueueName"]) == []
    # The request's own token moves the order on.
    s.handle_reply(reply(request))
    (nxt,) = drain_json(env["PaymentRequestsQueueName"])
    assert nxt["step"] == "charge_payment" and nxt["token"] != token
