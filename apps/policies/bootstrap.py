"""The first IT admin and the estate from a YAML file, for unattended installs (``manage.py bootstrap``,
docs/deploy.md, "The first admin and the estate").

Every object is written through the services the admin uses (``apps.pools.services``,
``apps.accounts.services``, ``apps.policies.services``), so the same rules apply. A run is
idempotent: an item that exists (GPU types, pools and profiles by name, groups by slug, policies by
group) is changed only in the fields the file gives that differ; profile pools and compute
resources missing are added, none is removed. The caller runs ``load`` and ``ensure_admin`` in one
transaction: a refused item writes nothing.
"""

from collections import Counter
from decimal import Decimal

from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import models

from apps.accounts import services as accounts
from apps.accounts.models import Group, Membership, User
from apps.core.writes import validated_save
from apps.policies import services as policies
from apps.policies.models import ComputeResource, PolicyChange, Profile, ResourcePolicy
from apps.pools import services as pools
from apps.pools.models import GpuType, Pool

# section: (model, key field, fields the file may give, references {field: (model, key)}, lists)
SECTIONS = {
    "gpu_types": (GpuType, "name", ("memory_gb", "generation"), {}, ()),
    "groups": (Group, "slug", ("name", "kind", "parent", "cost_centre"), {"parent": (Group, "slug")}, ()),
    "pools": (
        Pool,
        "name",
        ("kind", "gpu_type", "capacity", "region", "country", "enabled"),
        {"gpu_type": (GpuType, "name")},
        (),
    ),
    "profiles": (
        Profile,
        "name",
        (
            "gpus",
            "time_weight",
            "size_from_task",
            "description",
            "sovereign_country",
            "min_gpu_memory_gb",
            "min_gpu_generation",
            "starvation_s",
            "default_priority",
            "max_priority",
        ),
        {},
        ("pools",),
    ),
    "policies": (
        ResourcePolicy,
        "group",
        ResourcePolicy.SETTINGS,
        {"group": (Group, "slug")},
        ("budgets", "compute_resources"),
    ),
}


class EstateError(Exception):
    """A refused item: the message names the file, the item and the field."""


def messages_of(error: Exception) -> str:
    """'field: message; ...' of a ValidationError (or the text of another error)."""
    if isinstance(error, ValidationError) and hasattr(error, "error_dict"):
        parts = []
        for field, errors in error.message_dict.items():
            text = " ".join(errors)
            parts.append(text if field == "__all__" else f"{field}: {text}")
        return "; ".join(parts)
    if isinstance(error, ValidationError):
        return " ".join(error.messages)
    return str(error)


class Loader:
    """Loads one parsed estate file; ``counts`` says what it created, changed and left."""

    def __init__(self, source: str):
        self.source = source
        self.counts: Counter = Counter()
        self.where = ""

    def fail(self, message: str):
        raise EstateError(f"{self.source}: {self.where}: {message}")

    def load(self, data) -> Counter:
        if data is None:
            return self.counts
        if not isinstance(data, dict):
            raise EstateError(f"{self.source}: the file must be a mapping of {', '.join(SECTIONS)}")
        unknown = sorted(set(data) - set(SECTIONS))
        if unknown:
            raise EstateError(
                f"{self.source}: unknown section {unknown[0]!r}; the sections are {', '.join(SECTIONS)}"
            )
        for section in SECTIONS:
            items = data.get(section) or []
            if not isinstance(items, list):
                raise EstateError(f"{self.source}: {section} must be a list")
            for index, item in enumerate(items):
                self.where = f"{section}[{index}]"
                self.item(section, item)
        return self.counts

    def item(self, section: str, item) -> None:
        model, key, fields, references, lists = SECTIONS[section]
        if not isinstance(item, dict):
            self.fail("must be a mapping of fields")
        if item.get(key) in (None, ""):
            self.fail(f"{key}: required")
        self.where += f" {item[key]!r}"
        unknown = sorted(set(item) - {key, *fields, *lists})
        if unknown:
            self.fail(f"{unknown[0]}: not a field here; the fields are {', '.join((key, *fields, *lists))}")
        values = {}
        for name in (key, *fields):
            if name in item:
                values[name] = self.value(model, name, item[name], references)
        try:
            getattr(self, section)(values, {name: item[name] for name in lists if name in item})
        except EstateError:
            raise
        except (ValidationError, ValueError, TypeError) as error:
            self.fail(messages_of(error))

    def value(self, model, name: str, raw, references):
        """The model's value of a field given in the file (a referenced object for a reference)."""
        if name in references:
            if raw is None:
                return None
            target, key = references[name]
            found = target.objects.filter(**{key: raw}).first()
            if found is None:
                self.fail(f"{name}: no {target._meta.verbose_name} with {key} {raw!r} (list it before)")
            return found
        if isinstance(raw, dict | list):
            self.fail(f"{name}: a single value is expected, not {type(raw).__name__}")
        field = model._meta.get_field(name)
        if raw is None and field.null:
            return None
        if raw is None:
            self.fail(f"{name}: a value is required")
        if isinstance(field, models.DecimalField) and isinstance(raw, float):
            raw = str(raw)  # 0.1, not 0.1000000000000000055511151231257827
        try:
            return field.to_python(raw)
        except ValidationError as error:
            self.fail(f"{name}: {' '.join(error.messages)}")

    def changed(self, obj, values: dict) -> dict:
        """The fields of ``values`` that differ from ``obj``'s."""
        return {name: value for name, value in values.items() if getattr(obj, name) != value}

    def note(self, kind: str, created: bool, changed: dict | bool) -> None:
        self.counts[f"{kind} {'created' if created else 'changed' if changed else 'unchanged'}"] += 1

    def names(self, raw, what: str, target, key: str = "name") -> list:
        if not isinstance(raw, list) or not all(isinstance(name, str) for name in raw):
            self.fail(f"{what}: a list of names is expected")
        found = []
        for name in raw:
            obj = target.objects.filter(**{key: name}).first()
            if obj is None:
                self.fail(f"{what}: no {target._meta.verbose_name} named {name!r} (list it before)")
            found.append(obj)
        return found

    def gpu_types(self, values: dict, lists: dict) -> None:
        gpu_type = GpuType.objects.filter(name=values["name"]).first()
        if gpu_type is None:
            pools.create_gpu_type(**values)
            return self.note("GPU types", True, False)
        changed = self.changed(gpu_type, values)
        if changed:
            pools.update_gpu_type(gpu_type, **changed)
        self.note("GPU types", False, changed)

    def groups(self, values: dict, lists: dict) -> None:
        group = Group.objects.filter(slug=values["slug"]).first()
        if group is None:
            values.setdefault("name", values["slug"])
            accounts.create_group(**values)
            return self.note("groups", True, False)
        changed = self.changed(group, values)
        if changed:
            validated_save(group, **changed)  # as the admin's group form saves it
        self.note("groups", False, changed)

    def pools(self, values: dict, lists: dict) -> None:
        pool = Pool.objects.filter(name=values["name"]).first()
        if pool is None:
            for required in ("kind", "gpu_type", "capacity"):
                if required not in values:
                    self.fail(f"{required}: required for a new pool")
            pools.create_pool(**values, reason="bootstrap")
            return self.note("pools", True, False)
        changed = self.changed(pool, values)
        if changed:
            pools.update_pool(pool, reason="bootstrap", **changed)
        self.note("pools", False, changed)

    def profiles(self, values: dict, lists: dict) -> None:
        linked = self.names(lists.get("pools", []), "pools", Pool)
        profile = Profile.objects.filter(name=values["name"]).first()
        if profile is None:
            policies.create_profile(**values, pools=linked)
            return self.note("profiles", True, False)
        changed = self.changed(profile, values)
        if changed:
            policies.update_profile(profile, **changed)
        have = set(profile.pool_links.values_list("pool_id", flat=True))
        for pool in linked:
            if pool.pk not in have:
                policies.link_pool(profile, pool)
                changed = True
        self.note("profiles", False, changed)

    def policies(self, values: dict, lists: dict) -> None:
        budgets = lists.get("budgets")
        if budgets is not None and not isinstance(budgets, dict):
            self.fail("budgets: a mapping of period to budget hours is expected, e.g. {week: 40}")
        resources = self.names(lists.get("compute_resources", []), "compute_resources", Profile)
        group = values.pop("group")
        policy = ResourcePolicy.objects.filter(group=group).first()
        created = policy is None
        changed: dict | bool = {}
        if created:
            policy = policies.create_policy(group=group, **values)
        else:
            changed = self.changed(policy, values)
            if changed:
                policies.update_policy(policy, via=PolicyChange.Via.ADMIN, **changed)
        if budgets is not None:
            windows = {str(period): Decimal(str(hours)) for period, hours in budgets.items()}
            version = policy.version
            policies.set_budget_windows(policy, windows, via="" if created else PolicyChange.Via.ADMIN)
            changed = changed or policy.version != version
        for profile in resources:
            if not ComputeResource.objects.filter(policy=policy, profile=profile).exists():
                policies.connect(policy=policy, profile=profile)
                changed = changed or not created
        self.note("policies", created, changed)


def ensure_admin(
    *, username: str, email: str, password: str | None, group: Group | None, superuser: bool
) -> tuple[User, bool]:
    """The first IT admin: created with ``password`` (checked by the password validators) when
    missing; an existing one keeps its password. IT admin of ``group`` (staff with the "IT
    admins" permissions), and a superuser with ``superuser``. Returns (user, created)."""
    user = User.objects.filter(username=username).first()
    created = user is None
    if created:
        if not password:
            raise EstateError("admin: a new admin needs a password (--admin-password-file)")
        user = User(username=username, email=email)
        try:
            validate_password(password, user)
        except ValidationError as error:
            raise EstateError(f"admin password: {' '.join(error.messages)}") from error
        user.set_password(password)
        try:
            user.full_clean()
        except ValidationError as error:
            raise EstateError(f"admin {username!r}: {messages_of(error)}") from error
        user.save()
    if superuser and not (user.is_superuser and user.is_staff):
        user.is_superuser = user.is_staff = True
        user.save(update_fields=["is_superuser", "is_staff"])
    if group is not None:
        accounts.add_membership(user=user, group=group, role=Membership.Role.IT_ADMIN)
    return user, created


def root_group(slug: str | None) -> Group | None:
    """The group named by ``slug``, or the only group without a parent (None when there is none)."""
    if slug:
        group = Group.objects.filter(slug=slug).first()
        if group is None:
            raise EstateError(f"--admin-group: no group with slug {slug!r}")
        return group
    roots = list(Group.objects.filter(parent=None)[:2])
    if len(roots) > 1:
        raise EstateError("--admin-group: several groups have no parent; name the admin's group")
    return roots[0] if roots else None
