"""``klique mcp``: a Model Context Protocol server over stdio, so that an agent asks for GPUs as
the user. It holds nothing but the user's own token (from ``klique login`` or KLIQUE_TOKEN) and
calls the same API as the CLI, with channel ``mcp``: the agent can do exactly what the user may.

Tool inputs are validated against their schema before a call; a refusal by the server comes back
as a tool error carrying the server's reason, per field where it names one.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, StrictInt, StrictStr

from klique.client.sdk.client import Client
from klique.client.sdk.errors import ApiError, KliqueError
from klique.client.sdk.records import as_json

INSTRUCTIONS = (
    "Klique allocates GPUs. List the compute resources the user may submit to, submit a task to one, "
    "then read the task back: while it waits, queue_position is its place in line and verdict.message "
    "says why it waits. preemptions tells when it was requeued and why. Usage shows the user's groups' "
    "GPUs in use and time budgets (used, left, burn rate, projected run-out, reset). A session (a "
    "notebook or IDE server on GPUs) is started with start_session; get_session gives its link once "
    "ready; it stops by itself when idle past its limits. A task may carry a time limit (time_limit_s: "
    "running seconds, after which it ends timed_out) and run after other tasks of the user (after_ok: "
    "only if they succeed, else it is canceled; after_any: whatever their end); array submits N tasks "
    "of one spec, each with KLIQUE_ARRAY_INDEX set. list_maintenance_windows shows when a pool's capacity "
    "is 0 (work that would run past a window's start waits); list_loans shows GPUs or budget hours lent "
    "between the user's groups until a date."
)
TaskId = Annotated[int, Field(gt=0, description="The task's id.")]
# A priority as the API takes it (apps.sessions.api.work.priority states the same bounds).
Priority = Annotated[
    Annotated[StrictInt, Field(ge=-(2**31), le=2**31 - 1)]
    | Annotated[StrictStr, Field(min_length=1, max_length=40, pattern=r"^[-a-zA-Z0-9_]+$")]
    | None,
    Field(
        description="A whole number or a priority class's name (e.g. low, normal, high): higher is "
        "placed first within the group's queue. Left out: the compute resource's default; at most "
        "its maximum."
    ),
]
States = Literal["queued", "placed", "running", "stopping", "succeeded", "failed", "canceled", "timed_out"]
# The bounds the API states (apps.sessions.api.work.limits and serializers; TASKS_BULK_MAX's default).
TimeLimit = Annotated[
    int | None,
    Field(
        ge=1,
        le=2**31 - 1,
        description="Time limit in running seconds: the work is stopped there and the task ends timed_out. "
        "Left out: the compute resource's default (list_compute_resources: default_time_limit_s); at most "
        "its max_time_limit_s.",
    ),
]
TaskIds = Annotated[list[Annotated[int, Field(gt=0)]], Field(max_length=100)]


@contextmanager
def tool_errors() -> Iterator[None]:
    try:
        yield
    except ApiError as error:
        if error.errors:
            reasons = "; ".join(f"{field}: {' '.join(map(str, why))}" for field, why in error.errors.items())
            raise ToolError(f"Refused ({error.status}): {reasons}") from error
        raise ToolError(f"Refused ({error.status}): {error.message}") from error
    except KliqueError as error:
        raise ToolError(str(error)) from error


def build_server(client: Client) -> MCPServer:
    server = MCPServer("klique", instructions=INSTRUCTIONS, log_level="WARNING")

    @server.tool()
    def list_compute_resources() -> dict[str, Any]:
        """The compute resources of the user's groups: the only ones the user may submit to."""
        with tool_errors():
            return {"compute_resources": as_json(client.compute_resources())}

    @server.tool()
    def submit_task(
        compute_resource: Annotated[str, Field(min_length=1, max_length=120, description="Its name.")],
        command: Annotated[str, Field(min_length=1, max_length=20000, description="The shell command.")],
        gpus: Annotated[
            str | None,
            Field(
                pattern=r"^\d{1,7}(\.\d{1,3})?$",
                description="GPUs (per node), e.g. '2' or '0.5'; only for a compute resource sized per task.",
            ),
        ] = None,
        nodes: Annotated[
            int | None,
            Field(
                ge=1,
                description="Nodes, each with the GPUs (left out: 1); only where the compute resource's "
                "pools run multi-node work. The task counts GPUs x nodes against the group's limit.",
            ),
        ] = None,
        project: Annotated[str | None, Field(max_length=120, description="A project of the group.")] = None,
        name: Annotated[str, Field(max_length=200)] = "",
        checkpoint: Annotated[bool, Field(description="The task checkpoints and can resume.")] = False,
        priority: Priority = None,
        time_limit_s: TimeLimit = None,
        after_ok: Annotated[
            TaskIds | None,
            Field(description="Ids of the user's tasks it runs after if they succeed (else it is canceled)."),
        ] = None,
        after_any: Annotated[
            TaskIds | None, Field(description="Ids of the user's tasks it runs after, whatever their end.")
        ] = None,
        array: Annotated[
            int | None,
            Field(
                ge=1,
                description="Submit this many tasks of the spec (at most the server's TASKS_BULK_MAX), each "
                "with KLIQUE_ARRAY_INDEX set (0 to N-1).",
            ),
        ] = None,
        max_running: Annotated[
            int | None, Field(ge=1, description="With array: at most this many of them running at once.")
        ] = None,
    ) -> dict[str, Any]:
        """Submit a task as the user (or, with array, N tasks of one spec). Returns the task, with its
        place in line, priority and time limit; for an array, its id and its tasks."""
        if max_running is not None and array is None:
            raise ToolError("max_running caps an array: give array too.")
        fields = {
            "gpus": gpus,
            "nodes": nodes,
            "project": project,
            "name": name,
            "checkpoint": checkpoint,
            "priority": priority,
            "time_limit_s": time_limit_s,
            "after_ok": after_ok,
            "after_any": after_any,
        }
        with tool_errors():
            if array is not None:
                submitted = client.submit_array(
                    compute_resource, command, size=array, max_running=max_running, **fields
                )
                return as_json(submitted)
            return as_json(client.submit(compute_resource, command, **fields))

    @server.tool()
    def get_task(task_id: TaskId) -> dict[str, Any]:
        """A task: state, pool, place in line, why it waits (verdict), its preemptions, its time limit
        and time left, and the tasks it runs after (dependencies, with their states)."""
        with tool_errors():
            return as_json(client.task(task_id))

    @server.tool()
    def list_tasks(
        state: States | None = None,
        limit: Annotated[int, Field(ge=1, le=200)] = 20,
    ) -> dict[str, Any]:
        """The user's newest tasks (and their groups' if the user leads them)."""
        with tool_errors():
            return {"tasks": as_json(client.tasks(state=state, limit=limit))}

    @server.tool()
    def cancel_task(task_id: TaskId) -> dict[str, Any]:
        """Cancel a task: at once while it waits, after its work stops when it runs."""
        with tool_errors():
            return as_json(client.cancel(task_id))

    @server.tool()
    def list_session_kinds() -> dict[str, Any]:
        """The session kinds IT offers (a Jupyter server, an IDE listening on a port, ...)."""
        with tool_errors():
            return {"session_kinds": as_json(client.session_kinds())}

    @server.tool()
    def start_session(
        compute_resource: Annotated[str, Field(min_length=1, max_length=120, description="Its name.")],
        kind: Annotated[
            str | None, Field(max_length=80, description="A session kind; left out: the first Jupyter kind.")
        ] = None,
        gpus: Annotated[
            str | None,
            Field(pattern=r"^\d{1,7}(\.\d{1,3})?$", description="GPUs, only for a resource sized per task."),
        ] = None,
        project: Annotated[str | None, Field(max_length=120, description="A project of the group.")] = None,
        name: Annotated[str, Field(max_length=200)] = "",
    ) -> dict[str, Any]:
        """Start a session as the user: a task of kind session, placed and charged like any task."""
        with tool_errors():
            return as_json(
                client.start_session(compute_resource, kind=kind, gpus=gpus, project=project, name=name)
            )

    @server.tool()
    def get_session(task_id: TaskId) -> dict[str, Any]:
        """A session: its state, and once ready its URL and token (open_url carries both)."""
        with tool_errors():
            return as_json(client.session(task_id))

    @server.tool()
    def list_sessions(limit: Annotated[int, Field(ge=1, le=200)] = 20) -> dict[str, Any]:
        """The user's newest sessions."""
        with tool_errors():
            return {"sessions": as_json(client.sessions(limit=limit))}

    @server.tool()
    def stop_session(task_id: TaskId) -> dict[str, Any]:
        """Stop a session; its GPUs go back to the pool."""
        with tool_errors():
            return as_json(client.stop_session(task_id))

    @server.tool()
    def my_usage_and_budgets() -> dict[str, Any]:
        """GPUs in use, GPU-hours and time budgets of the user's groups, with run-out and reset times."""
        with tool_errors():
            return {"groups": as_json(client.usage())}

    @server.tool()
    def list_maintenance_windows(
        include_over: Annotated[bool, Field(description="Also the windows over (IT's history).")] = False,
    ) -> dict[str, Any]:
        """Pools' maintenance windows not over, in start order: from starts_at to end the pool takes
        no work (in_force while it holds); work whose time limit would cross the start is not placed
        there."""
        with tool_errors():
            return {"maintenance_windows": as_json(client.maintenance(history=include_over))}

    @server.tool()
    def list_loans(state: Literal["active", "ended"] | None = None) -> dict[str, Any]:
        """Dated quota loans of the user's groups, newest first: text says what is lent (e.g. "8 GPUs of
        reservation") from lender to borrower until ends_at, when it is given back automatically."""
        with tool_errors():
            return {"loans": as_json(client.loans(state))}

    return server


def serve() -> None:
    """Run over stdio until the agent closes the connection."""
    client = Client.from_config(channel="mcp")
    build_server(client).run("stdio")
