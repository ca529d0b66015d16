"""Data migrations: what they rewrite, run against a database at the migration before them."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)


def test_old_preemption_links_are_rewritten_to_the_tasks_page():
    executor = MigrationExecutor(connection)
    before, after = [("accounts", "0003_project_priority")], [("accounts", "0004_notification_task_links")]
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    user = old.get_model("accounts", "User").objects.create(username="owner")
    Notification = old.get_model("accounts", "Notification")
    stale = Notification.objects.create(user=user, kind="preempted", message="m", link="/tasks/7/")
    kept = Notification.objects.create(user=user, kind="budget_alert", message="m", link="/teams/x/")
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    new = executor.loader.project_state(after).apps.get_model("accounts", "Notification")
    assert new.objects.get(pk=stale.pk).link == "/work/tasks/7/"
    assert new.objects.get(pk=kept.pk).link == "/teams/x/"
    MigrationExecutor(connection).migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
