"""Sessions: notebooks and IDE servers on GPUs. A session is a task of kind ``session``; its row
here holds what the daemon reports (URL, activity) and since when each idle condition holds."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

MAX_LIMIT_S = 30 * 24 * 3600
MAX_COMMAND_ARGS = 64
MAX_URL_CHARS = 2000
DEFAULT_BELOW_PCT = 5.0
PLACEHOLDERS = ("{port}", "{base_url}", "{host}")  # filled in by the worker (klique.worker.sessions)


def limit_field(verbose_name: str, help_text: str) -> models.PositiveIntegerField:
    return models.PositiveIntegerField(
        verbose_name,
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_LIMIT_S)],
        help_text=f"{help_text} Seconds, 1 to {MAX_LIMIT_S} (30 days).",
    )


def percent_field(verbose_name: str, help_text: str) -> models.FloatField:
    return models.FloatField(
        verbose_name,
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0), MaxValueValidator(100.0)],
        help_text=f"{help_text} Percent, 0 to 100; empty: {DEFAULT_BELOW_PCT:g}.",
    )


def validate_argv(value) -> None:
    if not isinstance(value, list) or not all(isinstance(a, str) and a for a in value):
        raise ValidationError('Give the command as a JSON list of non-empty strings, e.g. ["code-server"].')
    if len(value) > MAX_COMMAND_ARGS:
        raise ValidationError(f"At most {MAX_COMMAND_ARGS} arguments.")


class SessionKind(models.Model):
    """What IT offers as a session: Jupyter Server, or a command listening on a port (an IDE)."""

    class Type(models.TextChoices):
        JUPYTER = "jupyter", "Jupyter Server / JupyterLab"
        PORT = "port", "Command listening on a port"

    name = models.CharField(max_length=80, unique=True)
    type = models.CharField(max_length=10, choices=Type.choices, default=Type.JUPYTER)
    command = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_argv],
        help_text='Port kind only: the server\'s argv as a JSON list, e.g. ["code-server", "--bind-addr", '
        '"0.0.0.0:{port}"]; the worker fills in ' + ", ".join(PLACEHOLDERS) + " (the port it chose, the "
        "session's base URL, the address to bind). {port} is required.",
    )
    ready_path = models.CharField(
        max_length=200,
        blank=True,
        help_text="The path under the session's base URL that answers once the server is up; "
        "empty: /api/status for Jupyter, / for a port kind.",
    )
    open_path = models.CharField(
        max_length=200,
        blank=True,
        help_text="The page the Open link shows, under the session's base URL: e.g. lab for JupyterLab, "
        "vnc.html?autoconnect=1&path={base_path}websockify for noVNC ({base_path}: the base URL without "
        "its first /). Empty: the base URL itself.",
    )
    strip_base_url = models.BooleanField(
        default=False,
        help_text="The server serves at / and knows no base URL (noVNC's websockify): the worker's tunnel "
        "takes the base URL off each path. Only through the session gateway.",
    )
    description = models.CharField(max_length=300, blank=True)
    enabled = models.BooleanField(default=True, help_text="Offered for new sessions.")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self):
        if self.type == self.Type.PORT and not self.command:
            raise ValidationError({"command": "A port kind needs the command that starts its server."})
        if self.type == self.Type.PORT and not any(PLACEHOLDERS[0] in arg for arg in self.command):
            raise ValidationError(
                {"command": "Put {port} where the server takes its port: the worker chooses the port."}
            )
        if self.type == self.Type.JUPYTER and self.command:
            raise ValidationError({"command": "A Jupyter kind runs jupyter-server; leave the command empty."})
        if self.ready_path and not self.ready_path.startswith("/"):
            raise ValidationError({"ready_path": "Start the path with /, e.g. /api/status."})
        if (
            self.open_path.startswith("/")
            or "//" in self.open_path
            or any(c.isspace() for c in self.open_path)
        ):
            raise ValidationError({"open_path": "A path under the base URL, without a first /: e.g. lab."})

    @property
    def readiness_path(self) -> str:
        return self.ready_path or ("/api/status" if self.type == self.Type.JUPYTER else "/")


class IdleLimits(models.Model):
    """The idle limits of a session; each empty one is off (on a profile) or the profile's (on a
    compute resource)."""

    max_lifetime_s = limit_field("max lifetime", "The session stops this long after it started.")
    cpu_idle_s = limit_field("CPU idle time", "Stop after the CPU stayed below its threshold this long.")
    cpu_below_pct = percent_field("CPU idle below", "The session's processes use less CPU than this.")
    gpu_idle_s = limit_field(
        "GPU idle time", "Stop after GPU utilisation stayed below its threshold this long."
    )
    gpu_below_pct = percent_field("GPU idle below", "The session's GPUs are used less than this.")
    net_idle_s = limit_field(
        "network idle time", "Stop after no connection and no traffic to the server this long."
    )
    jupyter_idle_s = limit_field(
        "Jupyter idle time", "Jupyter kinds: stop when Jupyter's own last activity is older than this."
    )

    LIMITS = ("max_lifetime_s", "cpu_idle_s", "gpu_idle_s", "net_idle_s", "jupyter_idle_s")
    THRESHOLDS = ("cpu_below_pct", "gpu_below_pct")

    class Meta:
        abstract = True


class ProfileIdleLimits(IdleLimits):
    profile = models.OneToOneField("policies.Profile", on_delete=models.CASCADE, related_name="idle_limits")

    class Meta:
        verbose_name = "profile idle limits"
        verbose_name_plural = "profile idle limits"

    def __str__(self) -> str:
        return f"idle limits of profile {self.profile}"


class ResourceIdleLimits(IdleLimits):
    compute_resource = models.OneToOneField(
        "policies.ComputeResource", on_delete=models.CASCADE, related_name="idle_limits"
    )

    class Meta:
        verbose_name = "compute resource idle limits"
        verbose_name_plural = "compute resource idle limits"

    def __str__(self) -> str:
        return f"idle limits of {self.compute_resource}"


class Session(models.Model):
    """The session side of a task of kind ``session``: what its daemon last reported and since when
    each idle condition has held without a break (empty: it does not hold)."""

    task = models.OneToOneField(
        "tasks.Task", on_delete=models.CASCADE, primary_key=True, related_name="session"
    )
    kind = models.ForeignKey(SessionKind, on_delete=models.PROTECT, related_name="sessions")
    url = models.CharField(max_length=MAX_URL_CHARS, blank=True, help_text="Where it answers, once ready.")
    ready = models.BooleanField(default=False)
    ready_at = models.DateTimeField(null=True, blank=True)
    cpu_percent = models.FloatField(null=True, blank=True)
    gpu_util = models.FloatField(null=True, blank=True)
    net_bytes = models.BigIntegerField(null=True, blank=True)
    connections = models.IntegerField(null=True, blank=True)
    last_activity = models.DateTimeField(null=True, blank=True, help_text="Jupyter's own last activity.")
    sampled_at = models.DateTimeField(null=True, blank=True)
    cpu_idle_since = models.DateTimeField(null=True, blank=True)
    gpu_idle_since = models.DateTimeField(null=True, blank=True)
    net_idle_since = models.DateTimeField(null=True, blank=True)
    warned = models.JSONField(default=list, blank=True, help_text="The limits its owner was warned of.")
    stopped_by = models.CharField(max_length=20, blank=True, help_text="The idle limit that stopped it.")
    shared_with = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        blank=True,
        related_name="shared_sessions",
        help_text="Who else may open it through the session gateway (its owner always may).",
    )

    class Meta:
        ordering = ["-task"]

    def __str__(self) -> str:
        return f"session {self.task_id} ({self.kind})"
