"""Prometheus metrics, read from the database at scrape time so that every web process answers
the same: the pass totals, queues, GPUs in use, placements, preemptions, budgets and worker daemons
(the dashboard and alert rules of deploy/grafana and deploy/prometheus use them: docs/operations.md).
With Redis as Celery's broker, the length of each routed queue is read from Redis at scrape time
too (one pipeline of LLENs). The HTTP metrics are apps/core/http_metrics.py's."""

import logging
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Min, Sum
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from apps.engine.models import PASS_BUCKETS_MS

SKIP_REASONS = ("another pass running", "disabled")
# kombu's Redis transport keeps a queue's messages of priority 3, 6 and 9 in lists of their own,
# named with this separator (priority 0, the default, is the queue's own name).
PRIORITY_SEPARATOR = "\x06\x16"
PRIORITY_STEPS = (3, 6, 9)
BROKER_TIMEOUT_S = 1.0
GUARANTEE_WINDOW = timedelta(hours=1)
log = logging.getLogger("klique.metrics")


def celery_queues() -> list[str]:
    """Every queue Klique routes tasks to: the default, the routes' and the beat schedule's."""
    queues = {getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", "celery")}
    queues |= {route.get("queue") for route in settings.CELERY_TASK_ROUTES.values()}
    queues |= {entry.get("options", {}).get("queue") for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    return sorted(queue for queue in queues if queue)


class KliqueCollector:
    def collect(self):
        yield from self._passes()
        yield from self._queues_and_use()
        yield from self._preemptions()
        yield from self._budgets()
        yield from self._guarantees()
        yield from self._fair_shares()
        yield from self._workers()
        yield from self._celery_queues()

    def _passes(self):
        """The pass counters come from the running totals, which only grow (the pass log they
        were once read from is pruned after ``PASS_LOG_DAYS``)."""
        from apps.engine.models import PassTotals

        totals = {row.name: row for row in PassTotals.objects.all()}
        ran = totals.get(PassTotals.RAN) or PassTotals(name=PassTotals.RAN)
        histogram = HistogramMetricFamily(
            "klique_engine_pass_duration_seconds", "Duration of engine passes (passes that ran)."
        )
        buckets = [(str(b / 1000), getattr(ran, f"le_{b}")) for b in PASS_BUCKETS_MS]
        buckets.append(("+Inf", ran.count))
        histogram.add_metric([], buckets, sum_value=ran.duration_ms / 1000)
        yield histogram
        skipped = CounterMetricFamily(
            "klique_engine_passes_skipped",
            "Passes skipped, by reason (another pass running, or the engine disabled).",
            labels=["reason"],
        )
        reasons = {PassTotals.skipped_name(reason): reason for reason in SKIP_REASONS}
        reasons |= {name: name.split(": ", 1)[1] for name in totals if name.startswith("skipped: ")}
        for name, reason in sorted(reasons.items()):
            skipped.add_metric([reason], totals[name].count if name in totals else 0)
        yield skipped
        from apps.engine.models import PassRecord

        last = PassRecord.objects.filter(skipped=False).values_list("started_at", flat=True).first()
        if last is not None:
            yield GaugeMetricFamily(
                "klique_engine_last_pass_timestamp_seconds",
                "When the engine's last pass that ran began (Unix time).",
                value=last.timestamp(),
            )

    def _queues_and_use(self):
        from apps.ledger.models import UsageInterval
        from apps.tasks.models import Task

        waiting = GaugeMetricFamily(
            "klique_tasks_waiting", "Tasks waiting per compute resource.", labels=["compute_resource"]
        )
        for row in (
            Task.objects.filter(state=Task.State.QUEUED)
            .values("compute_resource__name")
            .annotate(n=Count("pk"))
            .order_by()
        ):
            waiting.add_metric([row["compute_resource__name"]], row["n"])
        yield waiting
        open_intervals = UsageInterval.objects.filter(end__isnull=True)
        per_policy = GaugeMetricFamily(
            "klique_policy_gpus_in_use", "GPUs held per policy.", labels=["policy"]
        )
        for row in open_intervals.values("group__slug").annotate(g=Sum("gpus")).order_by():
            per_policy.add_metric([row["group__slug"]], float(row["g"]))
        yield per_policy
        per_pool = GaugeMetricFamily("klique_pool_gpus_in_use", "GPUs held per pool.", labels=["pool"])
        for row in open_intervals.values("pool__name").annotate(g=Sum("gpus")).order_by():
            per_pool.add_metric([row["pool__name"]], float(row["g"]))
        yield per_pool

    def _preemptions(self):
        from apps.tasks.models import TaskEvent

        counter = CounterMetricFamily("klique_preemptions", "Preemptions by reason.", labels=["reason"])
        for row in (
            TaskEvent.objects.filter(kind=TaskEvent.Kind.PREEMPTED)
            .values("reason")
            .annotate(n=Count("pk"))
            .order_by()
        ):
            counter.add_metric([row["reason"]], row["n"])
        yield counter
        placed = TaskEvent.objects.filter(kind=TaskEvent.Kind.PLACED).count()
        yield CounterMetricFamily("klique_placements", "Tasks placed on a pool by the engine.", value=placed)

    def _budgets(self):
        from apps.ledger.budgets import budget_status
        from apps.policies.models import ResourcePolicy

        budgeted = ResourcePolicy.objects.filter(budget_hours__isnull=False).select_related("group")
        slugs = {p.pk: p.group.slug for p in budgeted}
        used = GaugeMetricFamily(
            "klique_budget_hours_used",
            "Budget hours used this period (the binding window's).",
            labels=["policy"],
        )
        left = GaugeMetricFamily(
            "klique_budget_hours_left",
            "Budget hours left this period (the binding window's).",
            labels=["policy"],
        )
        window_used = GaugeMetricFamily(
            "klique_budget_window_hours_used",
            "Budget hours used this period, per time budget window.",
            labels=["policy", "period"],
        )
        window_left = GaugeMetricFamily(
            "klique_budget_window_hours_left",
            "Budget hours left this period, per time budget window.",
            labels=["policy", "period"],
        )
        for pk, status in budget_status(budgeted).items():
            used.add_metric([slugs[pk]], float(status.used_hours))
            left.add_metric([slugs[pk]], float(status.left_hours))
            for window in status.windows:
                window_used.add_metric([slugs[pk], window.period], float(window.used_hours))
                window_left.add_metric([slugs[pk], window.period], float(window.left_hours))
        yield used
        yield left
        yield window_used
        yield window_left
        yield from self._money_budgets()

    def _money_budgets(self):
        """Each money budget window's spend and what is left this period, in its currency."""
        from apps.ledger.budgets import money_status
        from apps.policies.selectors import priced_policies

        priced = list(priced_policies())
        spent = GaugeMetricFamily(
            "klique_money_budget_spent",
            "Spend this period per money budget window, in its currency.",
            labels=["policy", "period", "currency"],
        )
        left = GaugeMetricFamily(
            "klique_money_budget_left",
            "Money left this period per money budget window, in its currency.",
            labels=["policy", "period", "currency"],
        )
        statuses = money_status(priced) if priced else {}
        for policy in priced:
            for window in statuses.get(policy.pk, ()):
                labels = [policy.group.slug, window.period, window.currency]
                spent.add_metric(labels, float(window.spent))
                left.add_metric(labels, float(window.left))
        yield spent
        yield left

    def _guarantees(self):
        """Each reservation as a measured guarantee over the last hour (``apps.tasks.guarantees``):
        the runs within it and those on time, the wait percentiles and the misses by cause."""
        from apps.policies.models import ResourcePolicy
        from apps.tasks.guarantee_selectors import guarantees_of

        reserved = list(ResourcePolicy.objects.filter(reservation__gt=0).select_related("group"))
        now = timezone.now()
        measured = guarantees_of(reserved, now - GUARANTEE_WINDOW, now + timedelta(seconds=1))
        runs = GaugeMetricFamily(
            "klique_reservation_runs",
            "Work within the reservation in the last hour: runs started, and work waiting past its time.",
            labels=["policy"],
        )
        on_time = GaugeMetricFamily(
            "klique_reservation_runs_on_time",
            "Runs within the reservation in the last hour that started within the policy's guarantee.",
            labels=["policy"],
        )
        waits = GaugeMetricFamily(
            "klique_reservation_start_seconds",
            "Time from queue entry to start of the last hour's runs within the reservation.",
            labels=["policy", "quantile"],
        )
        misses = GaugeMetricFamily(
            "klique_reservation_misses",
            "The last hour's misses of the guarantee, by cause (a wait reason, start or unknown).",
            labels=["policy", "cause"],
        )
        for policy in reserved:
            figures, slug = measured[policy.pk], policy.group.slug
            runs.add_metric([slug], figures.count)
            on_time.add_metric([slug], figures.kept)
            for quantile, value in (("0.5", figures.p50_s), ("0.95", figures.p95_s)):
                if value is not None:
                    waits.add_metric([slug, quantile], value)
            causes: dict[str, int] = {}
            for miss in figures.misses:
                causes[miss.cause] = causes.get(miss.cause, 0) + 1
            for cause, count in sorted(causes.items()):
                misses.add_metric([slug, cause], count)
        yield runs
        yield on_time
        yield waits
        yield misses

    def _fair_shares(self):
        """Each child of a policy lending "fair": its fair share of the GPUs borrowed above
        reservations, and what it borrows now (``apps.tasks.fair_share``)."""
        from apps.policies.models import ResourcePolicy
        from apps.tasks.fair_share import fair_shares_now

        shares = fair_shares_now()
        slugs = dict(ResourcePolicy.objects.filter(pk__in=list(shares)).values_list("pk", "group__slug"))
        share = GaugeMetricFamily(
            "klique_policy_fair_share_gpus",
            "Fair share of borrowed GPUs per policy whose parent lends fair.",
            labels=["policy"],
        )
        borrowed = GaugeMetricFamily(
            "klique_policy_borrowed_gpus",
            "GPUs borrowed above the reservation per policy whose parent lends fair.",
            labels=["policy"],
        )
        for pk, fair in sorted(shares.items(), key=lambda item: slugs[item[0]]):
            share.add_metric([slugs[pk]], float(fair.share))
            borrowed.add_metric([slugs[pk]], float(fair.borrowed))
        yield share
        yield borrowed

    def _workers(self):
        """Worker daemons per pool and state (retired ones left out), and per pool the age of the
        oldest heartbeat among its active daemons: past ``WORKER_HEARTBEAT_TIMEOUT_S`` the sweep
        declares that daemon lost."""
        from apps.pools.models import Worker

        count = GaugeMetricFamily(
            "klique_workers", "Worker daemons per pool and state (active, lost).", labels=["pool", "state"]
        )
        live = Worker.objects.exclude(state=Worker.State.RETIRED)
        for row in live.values("pool__name", "state").annotate(n=Count("pk")).order_by():
            count.add_metric([row["pool__name"], row["state"]], row["n"])
        yield count
        age = GaugeMetricFamily(
            "klique_worker_heartbeat_age_seconds",
            "Seconds since the oldest last heartbeat among a pool's active worker daemons.",
            labels=["pool"],
        )
        now = timezone.now()
        active = Worker.objects.filter(state=Worker.State.ACTIVE, last_heartbeat__isnull=False)
        for row in active.values("pool__name").annotate(oldest=Min("last_heartbeat")).order_by():
            age.add_metric([row["pool__name"]], (now - row["oldest"]).total_seconds())
        yield age

    def _celery_queues(self):
        """Messages waiting in each routed Celery queue (not yet taken by a worker), read from the
        Redis broker; nothing without one, or when it does not answer (logged)."""
        url = settings.CELERY_BROKER_URL
        if not url.startswith(("redis://", "rediss://", "unix://")):
            return
        import redis

        queues = celery_queues()
        client = redis.Redis.from_url(
            url, socket_timeout=BROKER_TIMEOUT_S, socket_connect_timeout=BROKER_TIMEOUT_S
        )
        try:
            pipe = client.pipeline(transaction=False)
            for queue in queues:
                pipe.llen(queue)
                for step in PRIORITY_STEPS:
                    pipe.llen(f"{queue}{PRIORITY_SEPARATOR}{step}")
            lengths = pipe.execute()
        except (redis.RedisError, OSError) as error:
            log.warning("Celery queue lengths unreadable: %s", error)
            return
        finally:
            client.close()
        family = GaugeMetricFamily(
            "klique_celery_queue_length",
            "Messages waiting in each Celery queue on the Redis broker.",
            labels=["queue"],
        )
        per_queue = len(PRIORITY_STEPS) + 1
        for index, queue in enumerate(queues):
            family.add_metric([queue], sum(lengths[index * per_queue : (index + 1) * per_queue]))
        yield family
