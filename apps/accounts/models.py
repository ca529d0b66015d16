"""People and the group tree: users, groups (organisation > business unit > department > team),
memberships with roles, and projects that usage is recorded against."""

from decimal import Decimal

from django.contrib.auth.models import AbstractUser
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone


class User(AbstractUser):
    """A person or an agent's owner. Roles come from memberships, never from flags on the user."""

    class Meta:
        ordering = ["username"]


class Group(models.Model):
    class Kind(models.TextChoices):
        ORGANISATION = "organisation", "Organisation"
        BUSINESS_UNIT = "business_unit", "Business unit"
        DEPARTMENT = "department", "Department"
        TEAM = "team", "Team"
        PROJECT = "project", "Project group"

    name = models.CharField(max_length=120)
    slug = models.SlugField(max_length=120, unique=True)
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.TEAM)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    cost_centre = models.CharField(
        max_length=40,
        blank=True,
        help_text="The finance cost centre code for chargeback; empty: the parent's "
        "(apps.accounts.selectors.cost_centres).",
    )
    # What a move of the group (its subtree with it) under another parent would break, from the
    # apps whose rules hang on the tree (policies' envelopes), registered from their AppConfig.ready:
    # each check takes (group, new_parent) and returns messages; the admin's group form runs them.
    move_checks: list = []

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["parent", "name"], name="group_name_unique_under_parent"),
        ]

    def __str__(self) -> str:
        return self.name

    def ancestors(self) -> list["Group"]:
        """Nearest first. Trees are shallow (four or five levels), so one query per level is fine."""
        chain, node, seen = [], self.parent, {self.pk}
        while node is not None and node.pk not in seen:
            chain.append(node)
            seen.add(node.pk)
            node = node.parent
        return chain

    def clean(self) -> None:
        if self.parent_id is not None and self.pk is not None:
            if self.parent_id == self.pk or any(a.pk == self.pk for a in self.parent.ancestors()):
                raise ValidationError({"parent": "A group cannot be placed under itself or its own subtree."})


class Membership(models.Model):
    class Role(models.TextChoices):
        IT_ADMIN = "it_admin", "IT admin"
        TENANT_ADMIN = "tenant_admin", "Tenant admin"
        LEADERSHIP = "leadership", "CIO / IT leadership"
        FINANCE = "finance", "Finance"
        DEPARTMENT_HEAD = "department_head", "Department head"
        TEAM_LEAD = "team_lead", "Team lead"
        MEMBER = "member", "Member"

    class Source(models.TextChoices):
        KLIQUE = "klique", "Granted in Klique"
        IDP = "idp", "Identity provider"

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="memberships")
    group = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)
    source = models.CharField(
        max_length=10,
        choices=Source.choices,
        default=Source.KLIQUE,
        editable=False,
        help_text="Granted in Klique, or synced from the identity provider at each SSO login.",
    )

    class Meta:
        ordering = ["group__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "group", "role"], name="membership_unique_role"),
        ]

    def __str__(self) -> str:
        return f"{self.user} · {self.get_role_display()} · {self.group}"


class Project(models.Model):
    """A project inside a group; usage is recorded against the user, the project and the group."""

    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="projects")
    name = models.CharField(max_length=120)
    priority = models.PositiveSmallIntegerField(
        default=100, help_text="Lower runs first among the group's projects. Set by the team lead."
    )

    class Meta:
        ordering = ["group__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["group", "name"], name="project_name_unique_in_group"),
        ]

    def __str__(self) -> str:
        return f"{self.group} / {self.name}"


class Notification(models.Model):
    """Something a person should see in the portal: a budget alert, a preemption of their work."""

    class Kind(models.TextChoices):
        BUDGET_ALERT = "budget_alert", "Budget alert"
        BUDGET_USED_UP = "budget_used_up", "Budget used up"
        PREEMPTED = "preempted", "Work preempted"
        SCHEDULE_STOPPED = "schedule_stopped", "Schedule stopped"
        SESSION_IDLE = "session_idle", "Session idle"
        CHANGE_REQUEST = "change_request", "Change request"
        AGENT_STOPPED = "agent_stopped", "Agent stopped"
        OWNER_DEACTIVATED = "owner_deactivated", "Owner of running work deactivated"

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    message = models.TextField()
    link = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} for {self.user}"


def agent_label(owner: str, agent: str) -> str:
    """How an agent's work is named in every report, export and page: the one owner of the wording."""
    return f"{owner} via agent {agent}"


def _cap(verbose_name: str, max_digits: int, decimal_places: int, help_text: str) -> models.DecimalField:
    """One of an agent's caps: a number of at least 0, or empty for no cap of its own."""
    return models.DecimalField(
        verbose_name,
        max_digits=max_digits,
        decimal_places=decimal_places,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text=help_text,
    )


class Agent(models.Model):
    """An agent acting for its owner (an MCP client, a pipeline bot), with a token of its own and
    caps of its own. Its work counts against its owner's group policy as the owner's own does; its
    caps only narrow what the owner may do. Empty caps: no cap of its own. ``lead_*`` caps are set
    by a team lead of the owner's team: a ceiling the owner cannot raise (docs/governance.md)."""

    name = models.CharField(max_length=100)
    owner = models.ForeignKey(User, on_delete=models.CASCADE, related_name="agents")
    purpose = models.TextField(blank=True, help_text="What the agent is for, e.g. nightly evaluation runs.")
    created_at = models.DateTimeField(auto_now_add=True)
    stopped_at = models.DateTimeField(
        null=True, blank=True, help_text="Set by the kill switch: its token is refused and its work stopped."
    )
    stopped_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    max_gpus = _cap("max GPUs at once", 9, 3, "GPUs (x nodes) its work may hold at once.")
    max_gpu_hours_per_day = _cap("max GPU-hours per day", 12, 3, "GPU-hours per UTC day.")
    max_budget_hours_per_day = _cap(
        "max budget hours per day", 12, 3, "Time-budget hours (time x the profile's time weight) per UTC day."
    )
    max_money_per_month = _cap(
        "max money per month",
        14,
        2,
        "Cost per UTC month in the estate's currency; inert while its GPU types have no price.",
    )
    lead_caps = models.JSONField(
        default=dict, blank=True, help_text="Caps set by a team lead: {cap: value}, a ceiling for the owner."
    )

    CAPS = ("max_gpus", "max_gpu_hours_per_day", "max_budget_hours_per_day", "max_money_per_month")

    class Meta:
        ordering = ["owner__username", "name"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "name"], name="agent_name_unique_per_owner"),
        ]

    def __str__(self) -> str:
        return self.label

    @property
    def label(self) -> str:
        return agent_label(self.owner.username, self.name)

    @property
    def stopped(self) -> bool:
        return self.stopped_at is not None

    def cap(self, name: str) -> Decimal | None:
        """The cap in force: the lower of the owner's and the lead's; None for no cap."""
        own = getattr(self, name)
        lead = self.lead_caps.get(name)
        values = [Decimal(v) for v in (own, lead) if v is not None]
        return min(values) if values else None


class ApiToken(models.Model):
    """A personal API token: the SDK, the CLI and agents over MCP act as its user.

    Only a SHA-256 of the token is stored; the token itself is shown once, when it is created.
    ``prefix`` (the first characters) lets the user tell tokens apart.
    """

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="What the token is for, e.g. laptop or pipeline.")
    prefix = models.CharField(max_length=16, editable=False)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never expires.")
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    agent = models.ForeignKey(
        Agent,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="tokens",
        help_text="Set: an agent's token; it acts as its user (the owner) on the agent's behalf.",
    )

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…) of {self.user}"

    def status_at(self, now) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"

    @property
    def status(self) -> str:
        return self.status_at(timezone.now())
