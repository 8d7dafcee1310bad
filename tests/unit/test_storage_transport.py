"""The storage clients' HTTP session: the environment read once, not on every request."""

from __future__ import annotations

import pytest

from shared.adapters.storage import pooled_transport

_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY",
         "ALL_PROXY", "NO_PROXY", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")


@pytest.fixture(autouse=True)
def bare_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in _VARS:
        monkeypatch.delenv(k, raising=False)


def test_without_a_proxy_the_session_does_not_search_the_environment_per_request() -> None:
    session = pooled_transport().session
    assert session is not None
    assert session.trust_env is False  # no ~/.netrc lookup, no proxy scan per request
    assert session.verify is True


def test_a_ca_bundle_in_the_environment_is_still_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/corporate.pem")
    session = pooled_transport().session
    assert session is not None and session.verify == "/etc/ssl/corporate.pem"


@pytest.mark.parametrize("var", ["HTTPS_PROXY", "https_proxy", "NO_PROXY"])
def test_a_proxy_setting_keeps_the_environment_trusted(monkeypatch: pytest.MonkeyPatch,
                                                       var: str) -> None:
    monkeypatch.setenv(var, "http://proxy.example:3128")
    session = pooled_transport().session
    assert session is not None and session.trust_env is True
