"""docs/adapting.md as a test: a workflow with a service the app has never had is declared,
and with no other edit it is indexed (its Agent function), deployed (its queue and settings in
the Bicep's input), validated (its settings) and run to the end against Azurite."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import azure.functions as func

from localrun.host.index import functions_of
from shared import bootstrap
from shared.contracts.services import services_document
from shared.domain.workflow import Registry, Step, Workflow
from shared.functions import agents
from shared.settings import load_settings
from shared.workflows import REGISTRY
from shared.workflows.orders.message import Order
from shared.workflows.orders.payment import PAYMENT
from tests.conftest import ROOT
from tests.infra.drift import bicep_names
from tests.integration.helpers import drain_json, order
from tests.integration.test_scheduler import reply

# The walk-through's declaration, in a workflow of its own.
CHECKED = Workflow(name="checked-sale", steps=(
    Step("check_fraud", service="fraud", operation="check", compensation=None,
         budget=timedelta(seconds=20)),
    Step("charge_payment", service="payment", operation="charge", compensation="refund",
         budget=timedelta(seconds=30)),
), message=Order, services=(PAYMENT,))  # the example's payment code, named as it declares
EXTENDED = Registry.of([*REGISTRY.workflows, CHECKED], default=REGISTRY.default)


def test_a_new_service_gets_its_agent_function_on_its_queue_setting() -> None:
    app = func.FunctionApp()
    app.register_functions(agents.agents(EXTENDED.services))
    (agent,) = [f for f in functions_of(app) if f.name == "fraud_agent"]
    assert agent.trigger["type"] == "queueTrigger"
    assert agent.trigger["queueName"] == "%FraudRequestsQueueName%"


def test_a_new_service_is_deployed_from_the_regenerated_services_file(tmp_path: Path) -> None:
    infra = tmp_path / "infra"
    shutil.copytree(ROOT / "infra", infra)
    (infra / "services.json").write_text(json.dumps(services_document(EXTENDED)))
    names = bicep_names(infra)
    assert "fraud-requests" in names.queues
    assert names.app_settings["FraudRequestsQueueName"] == "fraud-requests"
    assert "SimulatorBaseUrl" in names.app_settings  # a demo deployment's fraud URL
    # ... and azd's parameters give a real one from the environment (newcomer walk F2)
    from shared.contracts.__main__ import _parameters

    given = _parameters(json.loads((infra / "main.parameters.json").read_text()),
                        services_document(EXTENDED))["parameters"]["serviceUrls"]["value"]
    assert given["FraudServiceUrl"] == "${FRAUD_SERVICE_URL=}"
    assert given["InventoryServiceUrl"] == "${INVENTORY_SERVICE_URL=}"  # as it was


def test_a_new_service_runs_to_the_end(app_env: Any) -> None:
    env = app_env()
    own = "fraud-" + env["StateTableName"][-10:].lower()  # this test's, like its other queues
    c = bootstrap.build(load_settings({**env, "FraudRequestsQueueName": own}),
                        workflows=EXTENDED)
    c.ensure_resources()
    assert "fraud" in c.agents and c.config.services["fraud"].url.endswith(
        "/api/sim/fraud")
    fraud_queue = c.config.services["fraud"].queue
    c.intake.handle("m-1", json.dumps(order("f-1", workflow="checked-sale")).encode())
    (req,) = drain_json(fraud_queue)
    assert (req["step"], req["action"]) == ("check_fraud", "do")
    c.scheduler.handle_reply(reply(req))
    (req,) = drain_json(env["PaymentRequestsQueueName"])
    c.scheduler.handle_reply(reply(req))
    state = c.store.get_state("f-1")
    assert state is not None and state.process_state.value == "Processed"
    assert (state.workflow, [s.name for s in state.steps]) == (
        "checked-sale", ["check_fraud", "charge_payment"])
    c.close()
