"""The local settings template is what a new user copies: it must be complete and valid."""

from __future__ import annotations

import json
import re

import function_app
from localrun.host.index import functions_of
from shared.settings import Settings, load_settings
from tests.conftest import ROOT

TEMPLATE = json.loads((ROOT / "local.settings.template.json").read_text())["Values"]


def test_template_names_every_setting_a_binding_resolves() -> None:
    # The host resolves %Name% from app settings only: a missing one stops the function.
    wanted = {m for f in functions_of(function_app.app) for b in f.bindings
              for v in b.values() if isinstance(v, str) for m in re.findall(r"%([^%]+)%", v)}
    assert wanted and wanted <= set(TEMPLATE)


def test_template_names_every_setting_the_code_reads() -> None:
    code = {f.alias for f in Settings.model_fields.values() if f.alias}
    identity_only = {a for a in code if "__" in a} | {"SchedulerInstanceId"}
    assert code - identity_only <= set(TEMPLATE)


def test_template_is_valid() -> None:
    load_settings(TEMPLATE)
