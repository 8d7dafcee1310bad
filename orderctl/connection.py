"""Where the CLI reaches the pipeline: storage, through the app's own container built from the
settings (the global options, else the environment and local.settings.json), and the operator
API over HTTP, its refusals said as it said them."""

from __future__ import annotations

import json
import os
import ssl
from pathlib import Path
from typing import Any

import httpx

from orderctl.errors import CliError, first_line
from orderctl.output import inert
from shared import bootstrap
from shared.handlers.failures import without_python
from shared.settings import load_settings, secure_url
from shared.workflows import REGISTRY

ROOT = Path(__file__).resolve().parent.parent


class _Options:
    storage: str | None = None
    account: str | None = None
    settings_file: Path = ROOT / "local.settings.json"
    api: str | None = None
    token: str | None = None
    _container: bootstrap.Container | None = None

    def configure(self, storage: str | None, account: str | None, settings_file: Path,
                  api: str | None, token: str | None) -> None:
        self.storage, self.account, self.settings_file = storage, account, settings_file
        self.api, self.token = api, token
        self._container = None

    def env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        if self.settings_file.exists():
            env.update({k: str(v) for k, v in
                        json.loads(self.settings_file.read_text()).get("Values", {}).items()})
        env.update(os.environ)
        if self.storage:
            env["AzureWebJobsStorage"] = self.storage
            env.pop("AzureWebJobsStorage__accountName", None)
        elif self.account:
            env["AzureWebJobsStorage__accountName"] = self.account
            env.pop("AzureWebJobsStorage", None)
        elif not env.get("AzureWebJobsStorage") and not env.get(
                "AzureWebJobsStorage__accountName"):
            env["AzureWebJobsStorage"] = "UseDevelopmentStorage=true"
        return env

    def container(self) -> bootstrap.Container:
        if self._container is None:
            try:
                settings = load_settings(self.env())
                # One quick retry: a CLI should say "unreachable" in seconds, not minutes.
                # (The queue client's own retry policy waits 15 s before its first retry.)
                self._container = bootstrap.build(
                    settings, workflows=REGISTRY,
                    table_options={"retry_total": 1, "retry_backoff_factor": 0.2},
                    queue_options={"retry_total": 1, "initial_backoff": 0.5,
                                   "increment_base": 2})
            except ValueError as e:
                raise CliError(f"storage connection string is malformed: {e}", 2) from None
        return self._container

    def close(self) -> None:
        if self._container is not None:
            self._container.close()
            self._container = None


opts = _Options()


def call_api(method: str, path: str, body: Any = None,
             ok: tuple[int, ...] = (200,)) -> dict[str, Any]:
    """One call to the operator API as the token's holder: the answer's JSON, or a CliError
    saying what the API said (its error text, one line), never the HTTP client's internals."""
    assert opts.api
    try:
        secure_url(opts.api)
    except ValueError:
        # The token is the operator's: in clear over a network, anyone on the path holds it.
        raise CliError(f"--api {inert(opts.api[:100])!r}: give an https URL (plain http only "
                       "to this machine: 127.0.0.1, localhost, ::1), or your token crosses the "
                       "network in clear", 2) from None
    headers = {"Authorization": f"Bearer {opts.token}"} if opts.token else {}
    try:
        # trust_env=False: no proxy from the environment, which would read the token in clear
        # on its way to http://localhost.
        r = httpx.request(method, opts.api.rstrip("/") + path, json=body, headers=headers,
                          timeout=30, follow_redirects=False, trust_env=False)
    except httpx.ConnectError as e:
        if _tls_failed(e):  # an answer, but not one to trust: say why (a certificate, say)
            raise CliError(f"cannot reach the operator API at {opts.api}: its TLS handshake "
                           f"failed: {without_python(first_line(e))}", 2) from None
        # Refused, or no such host: an errno says nothing more.
        raise CliError(f"cannot reach the operator API at {opts.api}: nothing answers there "
                       "(is the app running, and is this its address?)", 2) from None
    except httpx.TimeoutException:
        raise CliError(f"the operator API at {opts.api} did not answer within 30 s"
                       + ("" if method == "GET" else ": what you asked may have been done; "
                          "look before asking again"), 2) from None
    except httpx.HTTPError as e:
        raise CliError(f"cannot reach the operator API at {opts.api}: "
                       f"{without_python(first_line(e)) or 'no connection'}", 2) from None
    try:
        answer = r.json()
    except ValueError:
        answer = None
    message = answer.get("error") if isinstance(answer, dict) else None
    if r.status_code in ok and isinstance(answer, dict):
        return answer
    if r.status_code == 401:
        hint = "" if opts.token else (
            " (no token given: pass --token or set ORDERS_API_TOKEN to an access token for "
            "api://<client id>)")
        raise CliError(f"not signed in: {message or 'the operator API refused the request'}"
                       f"{hint}", 2)
    if r.status_code in (400, 403):
        raise CliError(message or f"the operator API answered HTTP {r.status_code}", 2)
    raise CliError(message or f"the operator API answered HTTP {r.status_code}")


def _tls_failed(e: BaseException) -> bool:
    """Whether ``e`` or what caused it is a TLS failure (httpx reports one as a ConnectError)."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
