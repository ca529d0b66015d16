import signal
import time

from django.core.management.base import BaseCommand

from apps.portal import demo_load


class Command(BaseCommand):
    help = (
        "Submit a stream of demo tasks from the demo users (lending, reclaim, a budget running out) "
        "and, with --workers, run one klique-worker per demo pool."
    )

    def add_arguments(self, parser):
        parser.add_argument("--server", default="http://127.0.0.1:8000", help="the control plane's URL")
        parser.add_argument("--workers", action="store_true", help="also start a worker daemon per pool")
        parser.add_argument("--every", type=float, default=10.0, help="seconds between submissions")
        parser.add_argument("--duration", type=float, default=0, help="seconds to run (0: until stopped)")

    def handle(self, *args, server, workers, every, duration, **options):
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        load = demo_load.DemoLoad()
        children = demo_load.start_workers(server, demo_load.default_state_root()) if workers else []
        if children:
            self.stdout.write(f"demo: {len(children)} worker daemons started (logs in var/demo-workers/)")
        started = time.monotonic()
        try:
            while duration == 0 or time.monotonic() - started < duration:
                count = load.tick(time.monotonic() - started)
                if count:
                    self.stdout.write(f"demo: submitted {count} task(s)")
                time.sleep(every)
        except KeyboardInterrupt:
            pass
        finally:
            demo_load.stop_workers(children)
