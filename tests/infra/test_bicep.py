"""Offline infrastructure gates: the Bicep parses, scans clean, and matches the code."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from shared import tracing
from tests.conftest import ROOT
from tests.infra.drift import bicep_names, drift, parse

INFRA = ROOT / "infra"
BICEP_FILES = sorted(INFRA.rglob("*.bicep"))


@pytest.mark.parametrize("path", BICEP_FILES, ids=lambda p: str(p.relative_to(INFRA)))
def test_every_bicep_file_parses(path: Path) -> None:
    assert parse(path)["resources"] or parse(path).get("modules")


def test_bicep_and_code_name_the_same_queues_tables_and_settings() -> None:
    assert drift(INFRA) == []


def test_bicep_reads_what_we_expect() -> None:
    names = bicep_names(INFRA)
    assert "scheduler-commands" in names.queues and names.poison_queues
    assert "OrderState" in names.tables
    assert names.service_bus_queue == "orders"
    assert names.app_settings["AzureWebJobsStorage__credential"] == "managedidentity"


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("  SchedulerQueueName: queues.scheduler\n", "  SchedulerQueue: queues.scheduler\n",
     "SchedulerQueueName is bound in function_app.py but not set"),
    ("concat([queues.scheduler, queues.responses]", "concat([queues.scheduler]",
     "AgentResponsesQueueName='agent-responses' is not a queue the Bicep creates"),
    ("  StateTableName: tables.state\n", "  StateTableName: 'OrderStates'\n",
     "StateTableName='OrderStates' is not a table the Bicep creates"),
    ("  FailureThreshold: '3'\n", "  FailureTreshold: '3'\n",
     "FailureTreshold is set in the Bicep but nothing reads it"),
    ("  ReplyQueueAllowList: join(replyQueuePrefixes, ',')\n", "",
     "ReplyQueueAllowList is read by the code but not set in the Bicep"),
])
def test_a_broken_name_in_the_bicep_is_caught(tmp_path: Path, old: str, new: str,
                                              expected: str) -> None:
    copy = tmp_path / "infra"
    shutil.copytree(INFRA, copy)
    main = copy / "main.bicep"
    text = main.read_text()
    assert old in text, "the mutation no longer applies: update this test"
    main.write_text(text.replace(old, new, 1))
    assert any(expected in p for p in drift(copy)), drift(copy)


def test_a_service_the_bicep_was_not_given_is_caught(tmp_path: Path) -> None:
    """The Bicep creates each service's queue and settings from infra/services.json: a stale
    file (a service added to a workflow, the contracts not regenerated) is drift."""
    copy = tmp_path / "infra"
    shutil.copytree(INFRA, copy)
    listed = json.loads((copy / "services.json").read_text())
    listed["services"] = [s for s in listed["services"] if s["name"] != "payment"]
    listed["queues"].remove("payment-requests")
    del listed["queueSettings"]["PaymentRequestsQueueName"]
    (copy / "services.json").write_text(json.dumps(listed))
    problems = drift(copy)
    assert "PaymentRequestsQueueName is bound in function_app.py but not set in the Bicep" \
        in problems, problems
    assert "queue 'payment-requests' is created by the Bicep but no setting names it" \
        not in problems  # nor created: the file is what both read


def test_checkov_reports_no_failed_checks(tmp_path: Path) -> None:
    checkov = ROOT / ".venv-checkov" / "bin" / "checkov"
    assert checkov.exists(), "checkov is installed by 'make install' into .venv-checkov"
    out = subprocess.run(
        [str(checkov), "-d", str(INFRA), "--framework", "bicep", "--skip-download", "--quiet",
         "--compact", "-o", "json"], capture_output=True, text=True, timeout=600)
    report = json.loads(out.stdout)
    summary = (report[0] if isinstance(report, list) else report)["summary"]
    assert summary["parsing_errors"] == 0
    assert summary["failed"] == 0, out.stdout[:5000]
    assert summary["passed"] > 0


def test_every_checkov_skip_gives_a_reason() -> None:
    for path in BICEP_FILES:
        for line in path.read_text().splitlines():
            if "checkov:skip=" in line:
                check, _, reason = line.split("checkov:skip=", 1)[1].partition(":")
                assert check.startswith("CKV") and len(reason.strip()) > 15, (path, line)


def test_functions_doctor_reports_no_failures(tmp_path: Path) -> None:
    doctor = shutil.which("azure-functions-doctor", path=str(ROOT / ".venv" / "bin"))
    assert doctor, "azure-functions-doctor is installed by requirements-dev.txt"
    summary = tmp_path / "summary.json"
    subprocess.run([doctor, "doctor", "--path", str(ROOT), "--format", "json",
                    "--summary-json", str(summary), "--output", str(tmp_path / "out.json")],
                   capture_output=True, text=True, timeout=300, check=False)
    counts = json.loads(summary.read_text())
    assert counts["failed"] == 0 and counts["passed"] > 0, counts


def test_no_keys_or_connection_strings_in_the_infrastructure() -> None:
    for path in BICEP_FILES:
        text = path.read_text()
        for forbidden in ("listKeys(", "AccountKey", "SharedAccessKey", "InstrumentationKey"):
            assert forbidden not in text, (path, forbidden)


def test_flex_consumption_settings_the_platform_rejects_are_not_set() -> None:
    settings = bicep_names(INFRA).app_settings
    assert not {"FUNCTIONS_WORKER_RUNTIME", "FUNCTIONS_EXTENSION_VERSION"} & set(settings)


def test_the_worker_exports_telemetry_without_the_sdks_own_spans() -> None:
    """In Azure the worker, not the app, sets up the exporter: the Bicep must turn that on, turn
    the host's own forwarding of the app's logs off (telemetryMode), and give the worker the
    app's list of libraries not to instrument (or every storage request becomes a dependency)."""
    settings = bicep_names(INFRA).app_settings
    assert settings["PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY"] == "true"
    disabled = settings["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"].split(",")
    assert sorted(disabled) == sorted(tracing.NOT_INSTRUMENTED)
    # Whole traces, every order: the app's own choice when it sets the exporter up itself.
    assert (settings["OTEL_TRACES_SAMPLER"],
            settings["OTEL_TRACES_SAMPLER_ARG"]) == tracing.TRACES_SAMPLER
    assert json.loads((ROOT / "host.json").read_text())["telemetryMode"] == "OpenTelemetry"


def test_parameters_file_names_only_parameters_main_bicep_declares() -> None:
    declared = set(parse(INFRA / "main.bicep")["parameters"])
    given = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]
    assert set(given) <= declared
    required = {"environmentName", "location"}
    assert required <= set(given)


def test_operators_sign_in_with_entra_id_and_the_app_roles_are_the_ones_the_code_checks() -> None:
    """Issue 32: App Service Authentication in front of the operator API (docs/security-
    operators.md). The platform signs in and hands the app the principal; the app checks the
    roles, so the roles an operator can be given must be the very names the code checks."""
    from shared.handlers.principal import CANCEL_ROLE, PAUSE_ROLE, READ_ROLE, RESUBMIT_ROLE

    auth = parse(INFRA / "app" / "function.bicep")["resources"]["authSettings"]["config"]
    assert auth["name"] == "authsettingsV2" and auth["parent"] == "app"
    p = auth["properties"]
    on = {"operator": {"type": "not", "operands": {"bool_value": {"function": {
        "type": "empty", "parameters": {"item_to_test": "operatorAuthClientId"}}}}}}
    assert p["platform"]["enabled"] == on  # on whenever there is an app registration
    aad = p["identityProviders"]["azureActiveDirectory"]
    assert aad["enabled"] == on and aad["registration"]["clientId"] == "operatorAuthClientId"
    assert aad["registration"]["openIdIssuer"].endswith("${operatorAuthTenantId}/v2.0")
    assert "api://${operatorAuthClientId}" in aad["validation"]["allowedAudiences"]
    # Tokens from the console's sign-in and the named clients only (the Azure CLI's by default).
    allowed = aad["validation"]["defaultAuthorizationPolicy"]["allowedApplications"]
    assert "operatorAuthClientId" in str(allowed) and "operatorClientApps" in str(allowed)
    assert "clientSecretSettingName" not in aad["registration"]  # no secret to keep
    # Unauthenticated requests reach the app, which refuses them on every operator route; the
    # machine routes (health, simulated services) take a function key.
    assert p["globalValidation"] == {"requireAuthentication": False,
                                     "unauthenticatedClientAction": "AllowAnonymous"}
    assert p["httpSettings"]["requireHttps"] is True
    assert p["login"]["tokenStore"]["enabled"] is False
    # main.bicep gives it the registration, azd from OPERATOR_AUTH_CLIENT_ID.
    main = parse(INFRA / "main.bicep")
    assert main["parameters"]["operatorAuthClientId"]["default"] == ""
    given = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]
    assert given["operatorAuthClientId"]["value"] == "${OPERATOR_AUTH_CLIENT_ID=}"

    roles = json.loads((INFRA / "operator-app-roles.json").read_text())
    assert {r["value"] for r in roles} == {READ_ROLE, RESUBMIT_ROLE, CANCEL_ROLE, PAUSE_ROLE}
    assert len({r["id"] for r in roles}) == len(roles) and all(r["isEnabled"] for r in roles)
    # People sign in to the console; tools (a monitor, a script) get the role as applications.
    assert all(set(r["allowedMemberTypes"]) == {"User", "Application"} for r in roles)


def test_a_demo_deployment_calls_its_simulated_services_over_https() -> None:
    """Issue 32: the app refuses a service URL over plain http to another machine; the demo's
    SimulatorBaseUrl (the app's own host) must be one it takes."""
    from shared.settings import secure_url

    base = bicep_names(INFRA).app_settings["SimulatorBaseUrl"]
    assert base == "https://${app.properties.defaultHostName}/api/sim"
    assert secure_url(base.replace("${app.properties.defaultHostName}", "func-x.azurewebsites.net"))
