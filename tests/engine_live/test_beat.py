"""The Celery beat entries of the engine: explicit task names, every interval (1 s), expiring after
their interval so a slow run never piles up, each on its own queue, and every queue consumed by
the workers that `make run` and deploy/Procfile start."""

import re

from django.conf import settings

from klique.celery import app
from klique.settings.base import BASE_DIR

EVERY_SECOND = {
    "engine-pass": ("klique.engine.run_pass", "engine"),
    "budget-meter": ("klique.engine.run_meter", "meter"),
    "worker-sweep": ("klique.pools.sweep", "sweep"),
}


def test_the_pass_the_meter_and_the_sweep_run_every_second_on_their_own_queues_and_expire_after_it():
    app.loader.import_default_modules()
    schedule = app.conf.beat_schedule
    assert settings.ENGINE_PASS_INTERVAL_S == 1
    for name, (task, queue) in EVERY_SECOND.items():
        entry = schedule[name]
        assert entry["task"] == task and task in app.tasks, name
        assert entry["schedule"] == 1, name
        assert entry["options"] == {"queue": queue, "expires": entry["schedule"]}, name
    queues = [schedule[name]["options"]["queue"] for name in EVERY_SECOND]
    assert len(set(queues)) == len(queues)


def test_every_beat_entry_expires_after_its_interval():
    for name, entry in app.conf.beat_schedule.items():
        assert entry["options"]["expires"] == entry["schedule"], name


def test_the_workers_started_by_make_run_and_the_procfile_consume_every_scheduled_and_routed_queue():
    used = {entry["options"].get("queue", "celery") for entry in app.conf.beat_schedule.values()}
    used |= {route["queue"] for route in app.conf.task_routes.values()}
    for path in ("Makefile", "deploy/Procfile"):
        text = (BASE_DIR / path).read_text()
        consumed = re.findall(r"celery -A klique worker[^\n]*?-Q (\S+)", text)
        assert consumed, path
        assert used <= {queue for queues in consumed for queue in queues.split(",")}, path
