"""The operator routes' role check: who may read, who may resubmit, and what each is told."""

from __future__ import annotations

import base64
import json

import pytest

from shared.handlers.principal import (
    READ_ROLE,
    RESUBMIT_ROLE,
    Forbidden,
    Unauthenticated,
    authorise,
)
from shared.settings import SettingsError, load_settings

OID = "7c1b5d4e-0000-4000-8000-000000000001"
LOCAL = {"host": "127.0.0.1:7071"}
AZURE = {"WEBSITE_SITE_NAME": "orders-app", "WEBSITE_AUTH_ENABLED": "True"}


def principal(*roles: str, name: str = "Jane Operator", oid: str = OID) -> str:
    """As EasyAuth sends it for an Entra ID user: mapped claim types, roles under role_typ."""
    claims = [{"typ": "name", "val": name},
              {"typ": "http://schemas.microsoft.com/identity/claims/objectidentifier", "val": oid},
              *({"typ": "roles", "val": r} for r in roles)]
    doc = {"auth_typ": "aad", "claims": claims, "name_typ": "name", "role_typ": "roles"}
    return base64.b64encode(json.dumps(doc).encode()).decode()


def test_no_principal_is_unauthenticated() -> None:
    with pytest.raises(Unauthenticated, match="sign in"):
        authorise({}, READ_ROLE, AZURE)
    with pytest.raises(Unauthenticated, match="sign in"):
        authorise(LOCAL, READ_ROLE, {})  # locally, without a development principal


def test_a_reader_reads_and_cannot_resubmit() -> None:
    headers = {"x-ms-client-principal": principal(READ_ROLE)}
    p = authorise(headers, READ_ROLE, AZURE)
    assert (p.name, p.oid, p.label()) == ("Jane Operator", OID, f"Jane Operator (oid {OID})")
    with pytest.raises(Forbidden) as e:
        authorise(headers, RESUBMIT_ROLE, AZURE)
    assert str(e.value) == ("Jane Operator lacks the app role 'Orders.Resubmit' this needs "
                            "(has: Orders.Read)")


def test_resubmit_is_its_own_role() -> None:
    headers = {"x-ms-client-principal": principal(RESUBMIT_ROLE)}
    assert authorise(headers, RESUBMIT_ROLE, AZURE).roles == {RESUBMIT_ROLE}
    with pytest.raises(Forbidden, match=r"has: Orders\.Resubmit\)"):
        authorise(headers, READ_ROLE, AZURE)


def test_a_signed_in_user_with_no_roles_is_forbidden_not_unauthenticated() -> None:
    with pytest.raises(Forbidden, match="has: none"):
        authorise({"x-ms-client-principal": principal()}, READ_ROLE, AZURE)


def test_an_application_caller_is_named_by_its_app_id() -> None:
    doc = {"auth_typ": "aad", "name_typ": "name", "role_typ": "roles",
           "claims": [{"typ": "appid", "val": "monitoring-app"}, {"typ": "oid", "val": OID},
                      {"typ": "roles", "val": READ_ROLE}]}
    header = base64.b64encode(json.dumps(doc).encode()).decode()
    assert authorise({"x-ms-client-principal": header}, READ_ROLE, AZURE).name == "monitoring-app"


def test_a_bearer_token_must_be_an_access_token_not_an_id_token() -> None:
    """An ID token names no client application (azp, appid): it says who signed in to the
    app, and is refused as a bearer token; the console's session (no bearer) is not held to it."""
    id_token = principal(READ_ROLE)
    bearer = {"authorization": "Bearer eyJ0eXAi.x.y", "x-ms-client-principal": id_token}
    with pytest.raises(Unauthenticated, match="ID token"):
        authorise(bearer, READ_ROLE, AZURE)
    assert authorise({"x-ms-client-principal": id_token}, READ_ROLE, AZURE).oid == OID
    doc = json.loads(base64.b64decode(id_token))
    doc["claims"].append({"typ": "azp", "val": "04b07795-8ddb-461a-bbee-02f9e1bf7b46"})
    access = base64.b64encode(json.dumps(doc).encode()).decode()
    p = authorise({**bearer, "x-ms-client-principal": access}, READ_ROLE, AZURE)
    assert p.client_app == "04b07795-8ddb-461a-bbee-02f9e1bf7b46"


@pytest.mark.parametrize("header", ["not base64!", base64.b64encode(b"[1]").decode(),
                                    base64.b64encode(b'{"claims": [{"typ": "name", "val": "x"}]}'
                                                     ).decode(),
                                    # nested past the JSON parser's depth (red team R7)
                                    base64.b64encode(b"[" * 5000 + b"]" * 5000).decode()])
def test_an_unreadable_principal_is_unauthenticated(header: str) -> None:
    with pytest.raises(Unauthenticated):
        authorise({"x-ms-client-principal": header}, READ_ROLE, AZURE)


def test_in_azure_without_platform_authentication_a_header_is_not_trusted() -> None:
    # With EasyAuth off the platform does not strip client-sent X-MS-* headers: anyone could
    # write this one.
    with pytest.raises(Unauthenticated, match="App Service Authentication is off"):
        authorise({"x-ms-client-principal": principal(RESUBMIT_ROLE)}, RESUBMIT_ROLE,
                  {"WEBSITE_SITE_NAME": "orders-app"})


def test_the_development_principal_is_local_only() -> None:
    dev = authorise(LOCAL, RESUBMIT_ROLE, {}, f"{READ_ROLE}, {RESUBMIT_ROLE}")
    assert dev.label() == "local developer (oid development)"
    with pytest.raises(Forbidden):
        authorise(LOCAL, RESUBMIT_ROLE, {}, READ_ROLE)
    # A request's own principal wins over it, so a test can act as a reader.
    with pytest.raises(Forbidden):
        authorise({**LOCAL, "x-ms-client-principal": principal(READ_ROLE)}, RESUBMIT_ROLE, {},
                  RESUBMIT_ROLE)
    with pytest.raises(Unauthenticated):  # ignored in Azure, even if start-up were skipped
        authorise({}, READ_ROLE, AZURE, READ_ROLE)


@pytest.mark.parametrize("host", ["127.0.0.1:7071", "localhost", "LocalHost:80", "[::1]:7071",
                                  "localhost.:7071", "127.0.0.2", "[::ffff:127.0.0.1]:7071"])
def test_off_the_platform_a_request_to_and_from_this_machine_is_taken_at_its_word(
        host: str) -> None:
    for headers in ({"Host": host}, {"host": host, "X-Forwarded-For": "127.0.0.1, ::1"},
                    {"host": host, "X-Forwarded-For": "[::1]:5555, 127.0.0.1:80"}):
        assert authorise(headers, READ_ROLE, {}, READ_ROLE).name == "local developer"
        assert authorise({**headers, "x-ms-client-principal": principal(READ_ROLE)},
                         READ_ROLE, {}).roles == {READ_ROLE}


@pytest.mark.parametrize("headers", [
    {},  # no Host at all
    {"host": "evil.example"},  # a page elsewhere, its name rebound to this machine
    {"host": "orders.internal:7071"},  # a container's name, reached from elsewhere
    {"host": "10.0.0.5"},
    {"host": "127.0.0.1.example"},
    {"host": "localhost", "x-forwarded-for": "203.0.113.7"},  # a proxy says: from elsewhere
    {"host": "localhost", "x-forwarded-for": "127.0.0.1, 203.0.113.7"},
    {"host": "localhost", "x-forwarded-for": "[::1]evil"},  # no address a proxy would write
    {"host": "[::ffff:10.0.0.5]"},
])
def test_off_the_platform_nothing_else_is(headers: dict[str, str]) -> None:
    """Off App Service no platform vouches for X-MS-CLIENT-PRINCIPAL, and a func start or a
    container may be reached from elsewhere: neither the development principal nor a client's
    own header makes anyone an operator there."""
    with pytest.raises(Unauthenticated, match="only requests from and to this machine"):
        authorise(headers, READ_ROLE, {}, READ_ROLE)
    with pytest.raises(Unauthenticated, match="only requests from and to this machine"):
        authorise({**headers, "x-ms-client-principal": principal(READ_ROLE, RESUBMIT_ROLE)},
                  RESUBMIT_ROLE, {})
    # In Azure the platform sets the header and strips a client's: the Host is the site's.
    assert authorise({**headers, "x-ms-client-principal": principal(READ_ROLE)}, READ_ROLE,
                     AZURE).roles == {READ_ROLE}


def test_start_up_refuses_a_development_principal_in_azure() -> None:
    env = {"AzureWebJobsStorage": "UseDevelopmentStorage=true",
           "OperatorDevelopmentRoles": READ_ROLE}
    assert load_settings(env).operator_development_roles == READ_ROLE
    with pytest.raises(SettingsError, match="OperatorDevelopmentRoles is set, and this app runs "
                                            "in Azure"):
        load_settings({**env, "WEBSITE_INSTANCE_ID": "abc123"})


def test_the_label_kept_in_history_is_bounded() -> None:
    p = authorise({"x-ms-client-principal": principal(READ_ROLE, name="n" * 300, oid="o" * 100)},
                  READ_ROLE, AZURE)
    assert p.label() == f"{'n' * 63}… (oid {'o' * 39}…)"
