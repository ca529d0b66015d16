"""The SAML 2.0 identity provider of the portal's login, built from the environment by
klique/settings/base.py (docs/governance.md, "Connecting an identity provider")."""

from collections.abc import Mapping

SAML_UID_ATTRIBUTES = [
    "urn:oasis:names:tc:SAML:attribute:subject-id",
    "http://schemas.microsoft.com/identity/claims/objectidentifier",
]
SAML_EMAIL_ATTRIBUTES = [
    "urn:oid:0.9.2342.19200300.100.1.3",
    "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/emailaddress",
]


def saml_apps(env: Mapping[str, str]) -> list[dict]:
    """The SAML 2.0 identity provider of SAML_IDP_METADATA_URL and SAML_ENTITY_ID (Klique's entity
    ID at the IdP), or none when either is unset. The IdP's signing certificate comes from its
    metadata; an assertion without a valid signature is refused (docs/governance.md)."""
    if not (env.get("SAML_IDP_METADATA_URL") and env.get("SAML_ENTITY_ID")):
        return []
    return [
        {
            "provider_id": "saml",
            "client_id": env.get("SAML_ORGANIZATION", "sso"),  # in the URLs: /accounts/saml/sso/acs/
            "name": env.get("SAML_PROVIDER_NAME", "Single sign-on (SAML)"),
            "settings": {
                "idp": {
                    "metadata_url": env["SAML_IDP_METADATA_URL"],
                    "entity_id": env.get("SAML_IDP_ENTITY_ID") or None,
                    "metadata_cache_timeout": int(env.get("SAML_METADATA_CACHE_SECONDS", "3600")),
                },
                "sp": {"entity_id": env["SAML_ENTITY_ID"]},
                "attribute_mapping": {
                    "uid": [env.get("SAML_UID_ATTRIBUTE", "uid"), *SAML_UID_ATTRIBUTES],
                    "email": [env.get("SAML_EMAIL_ATTRIBUTE", "email"), *SAML_EMAIL_ATTRIBUTES],
                    "username": [env.get("SAML_USERNAME_ATTRIBUTE", "username")],
                    "first_name": [
                        "first_name",
                        "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/givenname",
                    ],
                    "last_name": [
                        "last_name",
                        "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/surname",
                    ],
                },
                "advanced": {
                    "strict": True,
                    "want_assertion_signed": True,
                    "want_message_signed": env.get("SAML_WANT_MESSAGES_SIGNED", "") in {"1", "true", "yes"},
                    "reject_idp_initiated_sso": True,
                },
            },
        }
    ]
