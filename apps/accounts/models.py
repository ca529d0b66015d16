"""People and the group tree: users, groups (organisation > business unit > department > team),
memberships with roles, and projects that usage is recorded against."""

from django.contrib.auth.models import AbstractUser
from django.core.exceptions import ValidationError
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
