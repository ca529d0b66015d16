from django.apps import AppConfig


class WorkersConfig(AppConfig):
    """The worker daemons' protocol: enrolment, heartbeats, claims, reports, sync and the sweep, the
    worker API at /api/v1/workers/. It moves tasks and sessions through their lifecycle, so it
    stands at the top of the work layer; the rows it keeps (workers, enrolment tokens, task logs)
    are the estate's, in apps.pools (docs/architecture.md)."""

    name = "apps.workers"
    label = "workers"
    verbose_name = "Worker daemons"
