"""The quota advisor's monthly beat task (``klique.whatif.propose_quotas``). Apart from
``tasks.py`` because the advisor starts what-if runs, whose dispatch imports ``tasks``: Celery finds
it through ``klique/celery.py``'s second discovery."""

from celery import shared_task

from apps.whatif import advisor


@shared_task(name="klique.whatif.propose_quotas", ignore_result=True)
def propose_quotas() -> None:
    advisor.propose_last_month()
