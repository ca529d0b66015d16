"""Compute resources in the SDK: the ones of the user's groups, which the user may submit to,
with their sizes, reservations, limits and waiting and running counts."""

from dataclasses import dataclass
from decimal import Decimal

from klique.client.sdk.records import build


@dataclass(frozen=True)
class ComputeResource:
    id: int
    name: str
    group: str
    group_name: str
    profile: str
    gpus: Decimal
    size_from_task: bool
    time_weight: Decimal
    reservation: Decimal
    limit: Decimal
    enabled: bool
    waiting: int
    running: int
    default_time_limit_s: int | None = None
    max_time_limit_s: int | None = None

    @classmethod
    def from_api(cls, data: dict) -> "ComputeResource":
        group = data["group"]
        return build(cls, {**data, "group": group["slug"], "group_name": group["name"]})


class ResourcesApi:
    """The compute resource endpoints of ``Client`` (``compute-resources/``)."""

    def compute_resources(
        self, *, group: str | None = None, profile: str | None = None
    ) -> list[ComputeResource]:
        """The compute resources of your groups: the ones you may submit to; ``group`` is a group
        slug, ``profile`` a profile name."""
        params = {k: v for k, v in {"group": group, "profile": profile}.items() if v is not None}
        return [ComputeResource.from_api(r) for r in self._all_pages("compute-resources/", params)]

    def compute_resource(self, resource_id: int) -> ComputeResource:
        """One compute resource you may submit to, with its waiting and running counts."""
        return ComputeResource.from_api(self._request("GET", f"compute-resources/{int(resource_id)}/"))
