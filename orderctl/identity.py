"""Who acts, as the CLI records it when it writes to storage itself (a resubmit, an alert's
acknowledgement)."""

from __future__ import annotations

import getpass
import json

from orderctl.connection import opts
from orderctl.errors import CliError, first_line


def cli_operator() -> str:
    """Who acts, for the order's history or the alert: with Entra ID (--account, or the
    setting's account name), the signed-in identity from its token; with a storage key or
    connection string (Azurite, say), the key is all storage knows, so the login name is
    recorded as no more than that."""
    env = opts.env()
    if env.get("AzureWebJobsStorage") or not env.get("AzureWebJobsStorage__accountName"):
        return f"{getpass.getuser()} (orders CLI, storage key: not an identity)"
    from azure.identity import DefaultAzureCredential

    try:
        token = DefaultAzureCredential().get_token("https://storage.azure.com/.default").token
    except Exception as e:  # the SDK has many ways of saying "not signed in"
        raise CliError(f"cannot tell who you are (az login?): {first_line(e)}", 2) from None
    return identity_of(token)


def identity_of(token: str) -> str:
    """The signed-in identity an Entra ID access token names (its name, sign-in name and object
    id), as the operator API records a principal. The token is the one the SDK was just given
    for this user; storage checks it, so it is read here without checking it again."""
    import base64

    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        raise CliError("the access token names nobody: cannot record who acts", 2) from None
    who = claims.get("upn") or claims.get("preferred_username") or claims.get("unique_name")
    name = claims.get("name") or who or "an Entra ID identity"
    return f"{name} ({who or 'app'}; oid {claims.get('oid', '?')}; orders CLI, storage)"
