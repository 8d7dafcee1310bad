"""Offline gate: every Bicep resource body matches the ARM schema of its type and API version.

See arm_gate.py for what is checked and how. The mutation tests show that the gate catches each
kind of mistake on a copy of infra/.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.infra.arm_gate import ARMSCHEMAS, MODELS, check, parse

INFRA = ROOT / "infra"


def test_the_model_packages_are_installed() -> None:
    assert (ARMSCHEMAS / ".installed").exists(), "'make install' unpacks them there"


def test_every_resource_matches_its_arm_schema() -> None:
    assert check(INFRA) == []


def test_every_type_and_version_in_the_bicep_has_a_model() -> None:
    used = {f"{r['type']}@{r['api_version']}" for p in INFRA.rglob("*.bicep")
            for r in parse(p).get("resources", {}).values()}
    assert used <= set(MODELS), used - set(MODELS)
    assert not any(v.endswith("-preview") for v in used
                   if not v.startswith("Microsoft.Insights/diagnosticSettings@")), (
        "a preview API version where a GA one exists")


@pytest.mark.parametrize(("file", "old", "new", "expected"), [
    ("app/storage.bicep", "    minimumTlsVersion: 'TLS1_2'\n", "    minimumTlsVersoin: 'TLS1_2'\n",
     "minimumTlsVersoin is not a property here"),
    ("app/storage.bicep", "  kind: 'StorageV2'\n", "  kind: 'StorageV3'\n",
     "'StorageV3' is not one of"),
    ("app/servicebus.bicep", "  maxDeliveryCount: 10\n", "  maxDeliveryCount: '10'\n",
     "the string '10' where the schema has integer"),
    ("app/function.bicep", "    httpsOnly: true\n", "    httpsOnly: 'yes'\n",
     "the string 'yes' where the schema has boolean"),
    ("app/servicebus.bicep", "    minimumTlsVersion: '1.2'\n", "    minimumTlsVersion: 1\n",
     "a number where the schema has string"),
    ("app/storage.bicep", "  location: location\n", "",
     "the required property location is missing"),
    # authsettingsV2 is checked as App Service Authentication, not as app settings.
    ("app/function.bicep", "      unauthenticatedClientAction: 'AllowAnonymous'\n",
     "      unauthenticatedClientAction: 'Allow'\n", "'Allow' is not one of"),
    ("main.bicep", "    name: 'id-${prefix}'\n", "    nmae: 'id-${prefix}'\n",
     "module identity passes nmae, which app/identity.bicep does not declare"),
    ("main.bicep", "monitoring.outputs.connectionString", "monitoring.outputs.connString",
     "monitoring.outputs.connString is not an output"),
])
def test_a_broken_resource_is_caught(tmp_path: Path, file: str, old: str, new: str,
                                     expected: str) -> None:
    copy = tmp_path / "infra"
    shutil.copytree(INFRA, copy)
    target = copy / file
    text = target.read_text()
    assert old in text, "the mutation no longer applies: update this test"
    target.write_text(text.replace(old, new, 1))
    problems = check(copy)
    assert any(expected in p for p in problems), problems
