"""The OIDC settings of `warden checkpoint serve` and `warden audit serve`: the same flags, so
both doors accept the same identity tokens (warden/oidc.py says what is checked)."""

from __future__ import annotations

import argparse
from typing import Any


def add_oidc_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--oidc-issuer", metavar="URL",
                        help="accept OIDC identity tokens of this issuer (its `iss`) for approvers and auditors")
    parser.add_argument("--oidc-audience", metavar="NAME", help="the audience (`aud`) the tokens must name")
    parser.add_argument("--oidc-jwks", metavar="FILE|URL",
                        help="the issuer's public keys (JWKS): a file, or an https URL fetched and cached")
    parser.add_argument("--oidc-name-claim", default="sub", metavar="CLAIM",
                        help="the claim that names the person, as tenant roles name them (default sub)")
    parser.add_argument("--oidc-roles-claim", metavar="CLAIM",
                        help="a claim listing the person's groups or roles (e.g. groups); with it, a token must "
                        "carry a value that --oidc-role maps")
    parser.add_argument("--oidc-role", action="append", default=[], metavar="VALUE=ROLE",
                        help="a value of the roles claim and the role it stands for: approver or auditor; repeat")


def oidc_verifier(args: argparse.Namespace) -> Any:
    """The verifier the flags describe, or None when no OIDC flag is given. Raises
    OidcConfigError (a ValueError) for settings that cannot work."""
    if not (args.oidc_issuer or args.oidc_audience or args.oidc_jwks):
        if args.oidc_roles_claim or args.oidc_role:
            from warden.oidc import OidcConfigError

            raise OidcConfigError("OIDC role settings without --oidc-issuer, --oidc-audience and --oidc-jwks")
        return None
    from warden.oidc import OidcSettings, OidcVerifier, parse_role_map

    settings = OidcSettings(
        issuer=args.oidc_issuer or "", audience=args.oidc_audience or "", jwks=args.oidc_jwks or "",
        name_claim=args.oidc_name_claim or "sub", roles_claim=args.oidc_roles_claim or "",
        role_map=parse_role_map(args.oidc_role),
    )
    return OidcVerifier(settings)
