"""An agent's GPUs at once (``Agent.cap("max_gpus")``: the lower of its owner's cap and a lead's),
held in the engine's pass without the core knowing of agents (docs/governance.md, "Agents").

Before the core decides, each capped agent's waiting tasks are walked in queue order (higher
priority first, then submission) and let through while its placed work and those let through fit
its cap; the rest leave the snapshot's queues and show the verdict ``agent_cap``. Whatever the
core then places of what was let through stays within the cap. A task let through but not placed
(no room) may keep a smaller one behind it waiting for that pass: the cap holds whatever happens,
the agent's order is kept. The agent's tasks still count against its owner's group policy as the
owner's own: the core sees them so.
"""

from collections import defaultdict
from dataclasses import dataclass, replace

from django.db.models import Q

from apps.accounts.models import Agent
from apps.core.gpus import to_milli
from apps.policies.rules import fmt
from apps.tasks.models import Task, counted_milli

RULE = "agent_cap"


@dataclass(frozen=True)
class Hold:
    old_key: str | None  # the task's stored verdict key
    verdict: dict


def verdict(agent: Agent, cap, placed_milli: int) -> dict:
    label = agent.label
    return {
        "rule": RULE,
        "agent": label,
        "cap": fmt(cap),
        "message": (
            f"Its agent {label} may hold {fmt(cap)} GPUs at once (max_gpus) and holds "
            f"{fmt(placed_milli / 1000)}: it waits until the agent's work frees GPUs or the cap is raised."
        ),
        "key": f"{RULE}|{label}|{fmt(cap)}",
    }


def _capped() -> dict[int, tuple[Agent, object]]:
    agents = Agent.objects.filter(stopped_at__isnull=True).filter(
        Q(max_gpus__isnull=False) | Q(lead_caps__has_key="max_gpus")
    )
    return {agent.pk: (agent, agent.cap("max_gpus")) for agent in agents.select_related("owner")}


def held_tasks() -> dict[int, dict]:
    """The waiting tasks the agents' caps hold this pass, each with its verdict."""
    capped = _capped()
    if not capped:
        return {}
    rows = (
        Task.objects.filter(agent_id__in=capped, state__in=[Task.State.QUEUED, *Task.ACTIVE_STATES])
        .exclude(state=Task.State.QUEUED, waits_on__gt=0)
        .annotate(milli=counted_milli())
        .order_by("-priority", "queue_seq", "pk")
        .values_list("pk", "agent_id", "state", "milli")
    )
    placed: dict[int, int] = defaultdict(int)
    waiting: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for pk, agent_id, state, milli in rows:
        if state == Task.State.QUEUED:
            waiting[agent_id].append((pk, milli))
        else:
            placed[agent_id] += milli
    held = {}
    for agent_id, queue in waiting.items():
        agent, cap = capped[agent_id]
        room, shown = to_milli(cap) - placed[agent_id], None
        for pk, milli in queue:
            if milli <= room:
                room -= milli
                continue
            room = -1  # keep the agent's order: nothing behind a held task jumps it
            shown = shown or verdict(agent, cap, placed[agent_id])
            held[pk] = shown
    return held


def hold(snapshot, verdict_keys: dict) -> tuple:
    """The snapshot without the held tasks in its queues, the verdict groups without them, and
    each held task's ``Hold``. Nothing held: the inputs as they are."""
    held = held_tasks()
    if not held:
        return snapshot, verdict_keys, {}
    holds, keys = {}, {}
    for group, stored in verdict_keys.items():
        kept = {}
        for old, ids in stored.items():
            left = [pk for pk in ids if pk not in held]
            for pk in ids:
                if pk in held:
                    holds[pk] = Hold(old, held[pk])
            if left:
                kept[old] = left
        if kept:
            keys[group] = kept
    waiting = {}
    for resource, queue in snapshot.waiting.items():
        left = tuple(task for task in queue if int(task.id) not in held)
        if left:
            waiting[resource] = left
    return replace(snapshot, waiting=waiting), keys, holds
