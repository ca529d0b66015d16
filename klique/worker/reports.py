"""The daemon's queue of reports (``started``, ``exited``, ``stopped``, ``start_failed``...), sent
in order, each forgotten once the control plane has taken it.

A report the control plane refuses (a 4xx other than 401) is not dropped: it is sent again
reduced (``Report.reduced``: without its log tail and details, then without its time) and only
given up when nothing is left to leave out, so an exit is recorded and finished work never runs
again.
"""

import logging
from dataclasses import dataclass, field

from klique.worker.client import Rejected
from klique.worker.work import Held

log = logging.getLogger("klique.worker")

# What a report must carry for the control plane to act on it; anything else may be left out.
ESSENTIAL = {"exited": ("exit_code", "timed_out"), "checkpoint": ("at",)}


@dataclass
class Report:
    task_id: int
    what: str
    body: dict = field(default_factory=dict)

    def reduced(self) -> "Report | None":
        """This report with less in it, after the control plane refused it: first only what is
        essential and its time, then only what is essential; None once nothing is left to leave
        out (and for a log update, which carries nothing else)."""
        if self.what == "log":
            return None
        essential = ESSENTIAL.get(self.what, ())
        for keep in ((*essential, "at"), essential):
            body = {name: value for name, value in self.body.items() if name in keep}
            if body != self.body:
                return Report(self.task_id, self.what, body)
        return None


class Reporting:
    """The report queue (``reports``): a part of ``Daemon`` (daemon.py), whose state it uses."""

    def queue(self, held: Held, what: str, body: dict) -> None:
        self.reports.append(Report(held.task["id"], what, body))

    def send_reports(self) -> None:
        while self.reports:
            report = self.reports[0]
            try:
                self.client.report(report.task_id, report.what, report.body)
            except Rejected as error:
                self.recovered()
                self.refused(report, str(error))
                continue
            self.recovered()
            self.sent(report)

    def refused(self, report: Report, error: str) -> bool:
        """The first queued report was refused (a 4xx): put it back reduced (True), or give it
        up once nothing is left to leave out."""
        fields = {"task": report.task_id, "report": report.what, "error": error}
        reduced = report.reduced()
        if reduced is not None:
            log.warning("report refused; sending it again reduced", extra={"fields": fields})
            self.reports[0] = reduced
            return True
        log.error("report refused; given up", extra={"fields": fields})
        self.sent(report)
        return False

    def sent(self, report: Report) -> None:
        """The first queued report is done with; a task that ended is forgotten with its last one."""
        self.reports.popleft()
        held = self.held.get(report.task_id)
        if held is not None and held.ended and not any(r.task_id == report.task_id for r in self.reports):
            del self.held[report.task_id]

    def take_reports(self, sent: list[Report], answers: list) -> bool:
        """Act on the sync's answer to each report sent, in order, as on a separate report's
        answer; stop at the first one it did not answer. True when more is queued to send now."""
        moved = False
        for report, answer in zip(sent, answers, strict=False):
            if not isinstance(answer, dict) or answer.get("task") != report.task_id:
                break
            if not self.reports or self.reports[0] is not report:
                break
            status = answer.get("status")
            if isinstance(status, int) and (status in (408, 429) or status >= 500):
                break  # not this report's fault: it goes again with the next sync
            moved = True
            if status is not None:
                if self.refused(report, f"HTTP {status}: {answer.get('error')}"):
                    break  # the reduced report goes first, then the rest again, in order
                continue
            self.sent(report)
        return moved and bool(self.reports)
