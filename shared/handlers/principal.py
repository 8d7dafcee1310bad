"""Who is calling an operator route, and may they.

In Azure, App Service Authentication (EasyAuth, Entra ID) signs the operator in, validates the
token or session cookie, and hands the app the caller as ``X-MS-CLIENT-PRINCIPAL``: base64 JSON
``{"auth_typ", "claims": [{"typ", "val"}], "name_typ", "role_typ"}``. The platform strips any
``X-MS-*`` header a client sends, but only while authentication is on, so the app trusts the
header only where the platform says it is on (``WEBSITE_AUTH_ENABLED``); with it off the
operator routes answer no one. Authorisation is the app's: an app role per power (read, and
resubmit), checked here, per route.

Locally there is no platform: ``OperatorDevelopmentRoles`` gives requests that carry no principal
a development one with those roles (refused at start-up in Azure, see shared/settings.py), and a
request may carry its own ``X-MS-CLIENT-PRINCIPAL`` (as a test does, to act as a reader): the same
decoding and the same role check as in Azure. Either only for a request to and from this machine
(shared/platform.py, not_local): nothing else vouches for it.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.platform import header as header_of
from shared.platform import not_local, running_in_azure

READ_ROLE = "Orders.Read"
RESUBMIT_ROLE = "Orders.Resubmit"
CANCEL_ROLE = "Orders.Cancel"
PAUSE_ROLE = "Orders.Pause"
HEADER = "x-ms-client-principal"

# Where the claims are, under the claim-type names EasyAuth maps them to (and the raw ones).
_ROLE_TYPES = ("roles", "role", "http://schemas.microsoft.com/ws/2008/06/identity/claims/role")
_NAME_TYPES = ("name", "preferred_username",
               "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name",
               "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/upn", "appid", "azp")
_OID_TYPES = ("http://schemas.microsoft.com/identity/claims/objectidentifier", "oid")
# The client application an access token was issued to (v2: azp; v1: appid). An ID token names
# none: it says who signed in to the app, and is not for calling an API with.
_CLIENT_APP_TYPES = ("azp", "appid")

DEVELOPMENT_NAME = "local developer"
DEVELOPMENT_OID = "development"


class Unauthenticated(Exception):
    """No principal, or one the app cannot read: 401."""


class Forbidden(Exception):
    """A principal without the role the route needs: 403."""


@dataclass(frozen=True)
class Principal:
    name: str
    oid: str
    roles: frozenset[str]
    # The client application its token was issued to (None: not an access token's principal).
    client_app: str | None = None

    def label(self) -> str:
        """As kept in an order's history: who, and the object id that stays when names change.
        Bounded (an Entra display name may run to 256 characters; an oid is 36), so each
        resubmission adds a known size to the record."""
        return f"{_clip(self.name, MAX_NAME)} (oid {_clip(self.oid, MAX_OID)})"


MAX_NAME, MAX_OID = 64, 40


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def development_principal(roles: str) -> Principal | None:
    given = frozenset(r.strip() for r in roles.split(",") if r.strip())
    return Principal(DEVELOPMENT_NAME, DEVELOPMENT_OID, given) if given else None


def decode(header: str) -> Principal:
    """The principal in an ``X-MS-CLIENT-PRINCIPAL`` value; Unauthenticated if unreadable."""
    try:
        doc: Any = json.loads(base64.b64decode(header, validate=True))
    except (binascii.Error, ValueError, RecursionError):
        raise Unauthenticated("the client principal is not base64 JSON") from None
    claims = doc.get("claims") if isinstance(doc, dict) else None
    if not isinstance(claims, list):
        raise Unauthenticated("the client principal has no claims")
    by_type: dict[str, list[str]] = {}
    for c in claims:
        if isinstance(c, dict) and isinstance(c.get("typ"), str) and isinstance(c.get("val"), str):
            by_type.setdefault(c["typ"], []).append(c["val"])

    def first(types: tuple[str, ...]) -> str | None:
        return next((by_type[t][0] for t in types if by_type.get(t)), None)

    role_types = (doc.get("role_typ"), *_ROLE_TYPES)
    roles = frozenset(v for t in role_types if isinstance(t, str) for v in by_type.get(t, []))
    oid = first(_OID_TYPES)
    name_typ = doc.get("name_typ")
    name = first(((name_typ,) if isinstance(name_typ, str) else ()) + _NAME_TYPES)
    if not oid:
        raise Unauthenticated("the client principal has no object id (oid)")
    return Principal(name or oid, oid, roles, first(_CLIENT_APP_TYPES))


def authorise(headers: Mapping[str, str], role: str, environ: Mapping[str, str],
              development_roles: str = "") -> Principal:
    """The caller, if they hold ``role``; raises Unauthenticated or Forbidden with a message
    an operator can act on."""
    in_azure = running_in_azure(environ)
    if in_azure and environ.get("WEBSITE_AUTH_ENABLED", "").lower() != "true":
        # Without the platform's authentication a client could write the header itself.
        raise Unauthenticated("App Service Authentication is off for this app: the operator "
                              "API answers only signed-in operators (see "
                              "docs/security-operators.md)")
    if not in_azure and (why := not_local(headers)) is not None:
        # No platform vouches for the header or signs anyone in: a request is taken for its
        # word (its own principal, or the development one) only from and to this machine.
        raise Unauthenticated(f"off the platform, the operator API answers only requests from "
                              f"and to this machine, and {why}")
    header = header_of(headers, HEADER)
    if header:
        principal = decode(header)
        bearer = (header_of(headers, "authorization") or "").lower().startswith("bearer ")
        if bearer and principal.client_app is None:
            # The platform validated the token, and takes an ID token as a bearer one too.
            raise Unauthenticated("the bearer token is an ID token: call the API with an access "
                                  "token for it (az account get-access-token --resource "
                                  "api://<client id>: docs/security-operators.md)")
    else:
        dev = None if in_azure else development_principal(development_roles)
        if dev is None:
            raise Unauthenticated("sign in: this route needs an operator identity "
                                  "(no client principal came with the request)")
        principal = dev
    if role not in principal.roles:
        raise Forbidden(f"{principal.name} lacks the app role {role!r} this needs "
                        f"(has: {', '.join(sorted(principal.roles)) or 'none'})")
    return principal
