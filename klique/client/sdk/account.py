"""The user's own account in the SDK: who the token acts as, with roles and group memberships."""

from dataclasses import dataclass

from klique.client.sdk.records import build


@dataclass(frozen=True)
class Me:
    username: str
    email: str
    roles: list[str]
    memberships: list[dict]

    @classmethod
    def from_api(cls, data: dict) -> "Me":
        return build(cls, data)


class AccountApi:
    """The account endpoint of ``Client`` (``me/``)."""

    def me(self) -> Me:
        return Me.from_api(self._request("GET", "me/"))
