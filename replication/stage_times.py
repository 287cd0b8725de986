"""Where a replicated put's time goes on the leader, stage by stage (issue 41).

Recorded once per group commit (one Raft entry), never per message, each stage by the one thread that owns it
(the committer: ``group_commit_wait`` and ``propose``; pysyncobj's tick thread: ``raft_round`` and ``apply``),
so recording is two clock reads and two additions per batch and needs no lock. Exported as the summary
``raftmq_write_stage_seconds{stage}`` (count and sum: the mean per batch); ``bench/latency_bench.py`` prints it
as the server part of a lone send's breakdown (docs/benchmarks.md#a-lone-send).

* ``group_commit_wait``: the batch's oldest put, from its submit until the committer took the batch;
* ``propose``: de-duplication screening, encoding and framing the batch, until it is handed to pysyncobj;
* ``raft_round``: from then until pysyncobj reports the entry committed and applied here (the followers' round
  trip, the commit notice, the leader's own apply);
* ``apply``: the leader's store append of the entry (inside ``raft_round``), on every member that applies.
"""

from __future__ import annotations

STAGES = ("group_commit_wait", "propose", "raft_round", "apply")


class StageTimes:
    """Count and summed seconds per stage, since start."""

    __slots__ = ("counts", "seconds")

    def __init__(self) -> None:
        self.counts = dict.fromkeys(STAGES, 0)
        self.seconds = dict.fromkeys(STAGES, 0.0)

    def add(self, stage: str, seconds: float) -> None:
        """One batch spent ``seconds`` in ``stage`` (called only by the stage's own thread)."""
        self.counts[stage] += 1
        self.seconds[stage] += seconds

    def snapshot(self) -> dict[str, tuple[int, float]]:
        """{stage: (batches, seconds)} as of now."""
        return {s: (self.counts[s], self.seconds[s]) for s in STAGES}
