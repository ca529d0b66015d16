"""``manage.py cloud_release``: terminate every live node of cloud pools through their provider and
wait until the provider reports them ended. ``make run`` calls ``cloud_release --all`` when it
stops, since the demo's local nodes, like VMs, outlive the process that launched them."""

from django.core.management.base import BaseCommand, CommandError

from apps.cloud import services
from apps.cloud.models import CloudPool
from klique.cloud.providers import ProviderError

REASON = "released by cloud_release"


class Command(BaseCommand):
    help = "Terminate every live node of the named cloud pools (or --all) and wait for them to end."

    def add_arguments(self, parser):
        parser.add_argument("pools", nargs="*", help="cloud pool names")
        parser.add_argument("--all", dest="every", action="store_true", help="every cloud pool")
        parser.add_argument(
            "--wait", type=float, default=60, help="seconds to wait for the nodes to end (default 60)"
        )

    def handle(self, *args, pools: list[str], every: bool, wait: float, **options):
        if bool(pools) == every:
            raise CommandError("Name the cloud pools, or pass --all (not both).")
        chosen = CloudPool.objects.select_related("pool").order_by("pk")
        if pools:
            chosen = chosen.filter(pool__name__in=pools)
            unknown = sorted(set(pools) - {c.pool.name for c in chosen})
            if unknown:
                raise CommandError(f"pools: not cloud pools: {', '.join(unknown)}")
        failed = False
        for cloud_pool in chosen:
            try:
                left = services.release_all(cloud_pool, REASON, wait)
            except ProviderError as error:
                self.stderr.write(f"{cloud_pool.pool.name}: {error}")
                failed = True
                continue
            if left:
                self.stderr.write(f"{cloud_pool.pool.name}: not ended after {wait:g} s: {', '.join(left)}")
                failed = True
            else:
                self.stdout.write(f"{cloud_pool.pool.name}: every node ended")
        if failed:
            raise CommandError("Some nodes could not be released.")
