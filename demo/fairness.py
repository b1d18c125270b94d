"""The job queue's order between clients: round-robin, fewest jobs first.

Sessions are free (a new gradio_client is a new one), so a queue served first come, first served
let one client's burst hold every later visitor's job behind it. The worker instead starts the
queued job of the client with the fewest jobs started so far, oldest first among equals: two
clients with queued jobs take turns, and one who queued many waits behind everyone else's first.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Hashable, Iterable


def round_robin(queued: Iterable[tuple[Hashable, str]], started: dict) -> list[str]:
    """The ids of `queued` ((client, job id) in submission order) in the order to start them,
    given how many jobs each client has started (`started`, client -> count)."""
    waiting: dict = {}
    for seq, (client, job_id) in enumerate(queued):
        waiting.setdefault(client, deque()).append((seq, job_id))
    # (jobs started, submission order of the client's next job, client): seq is unique, so
    # clients (None for the operator) are never compared.
    heap = [(started.get(client, 0), jobs[0][0], client) for client, jobs in waiting.items()]
    heapq.heapify(heap)
    order = []
    while heap:
        count, _, client = heapq.heappop(heap)
        jobs = waiting[client]
        order.append(jobs.popleft()[1])
        if jobs:
            heapq.heappush(heap, (count + 1, jobs[0][0], client))
    return order
