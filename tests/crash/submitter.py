"""Submits tasks over HTTP as the crash tests' users do, until a stop file appears: short
``sleep`` commands at random gaps, mostly to one group then to the other (2 s each), now and then
canceling one it submitted.
Each task the server accepted (201) is written to ACCEPTED, one id a line, as it is accepted;
refusals and connection errors (a server whose database restarts) are retried, never counted.

    python -m tests.crash.submitter SERVER GROUPS_JSON ACCEPTED STOP SEED
"""

import json
import random
import sys
import time
from pathlib import Path

import httpx


def main(server: str, groups: list[dict], accepted: Path, stop: Path, seed: int) -> None:
    rng = random.Random(seed)
    mine: list[tuple[int, str]] = []
    with httpx.Client(base_url=server, timeout=30) as client, accepted.open("a") as out:
        while not stop.exists():
            time.sleep(rng.uniform(0.02, 0.15))
            # each group in turn submits most of the work for a few seconds: the other's idle
            # reservation is lent, then reclaimed (preempted with SIGTERM, requeued)
            favoured = groups[int(time.monotonic() / 2) % len(groups)]
            group = favoured if rng.random() < 0.95 else rng.choice(groups)
            headers = {"Authorization": f"Bearer {group['token']}"}
            try:
                if mine and rng.random() < 0.1:
                    pk, token = rng.choice(mine)
                    client.post(f"/api/v1/tasks/{pk}/cancel/", headers={"Authorization": f"Bearer {token}"})
                    continue
                seconds = rng.choice(group["seconds"])
                body = {"compute_resource": group["resource"], "command": f"sleep {seconds}"}
                answer = client.post("/api/v1/tasks/", json=body, headers=headers)
            except httpx.HTTPError as error:
                print(f"submit: {error!r}", file=sys.stderr, flush=True)
                continue
            if answer.status_code == 201:
                pk = answer.json()["id"]
                mine.append((pk, group["token"]))
                out.write(f"{pk}\n")
                out.flush()
            else:
                print(f"submit: {answer.status_code} {answer.text[:200]}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    server, groups, accepted, stop, seed = sys.argv[1:]
    main(server, json.loads(groups), Path(accepted), Path(stop), int(seed))
