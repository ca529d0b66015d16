"""Checkpoints the work reports to its daemon: a task touches ``KLIQUE_CHECKPOINT_MARK`` (a file in
its ``KLIQUE_CHECKPOINT_DIR``) when it has saved its state; the daemon sees the file's time change
and queues a ``checkpoint`` report with it, so a preemption counts only the work lost since."""

import os
from datetime import UTC, datetime
from pathlib import Path

MARK = ".klique-checkpoint"
CHECK_EVERY_S = 5.0  # how often the daemon looks at its running tasks' marks


def mark_path(checkpoint_dir: Path | str) -> Path:
    return Path(checkpoint_dir) / MARK


class Checkpoints:
    """Watching the marks of running work: a part of ``Daemon`` (daemon.py), whose state it uses
    (``held``, ``runner.checkpoint_root``, ``queue``)."""

    def watch_checkpoints(self, now: float) -> None:
        root = getattr(self.runner, "checkpoint_root", None)
        state = self.__dict__.setdefault("checkpoint_state", {"next": 0.0, "seen": {}})
        if root is None or now < state["next"]:
            return
        state["next"] = now + CHECK_EVERY_S
        seen: dict[int, float] = state["seen"]
        for task_id in [t for t in seen if t not in self.held]:
            del seen[task_id]
        for task_id, held in self.held.items():
            if not held.started or held.ended:
                continue
            try:
                mtime = os.stat(mark_path(Path(root) / str(task_id))).st_mtime
            except OSError:
                continue
            if mtime != seen.get(task_id):
                seen[task_id] = mtime
                at = datetime.fromtimestamp(mtime, UTC).isoformat()
                self.queue(held, "checkpoint", {"at": at})
