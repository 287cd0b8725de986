"""What the console's charts draw: a few minutes of this node's view, sampled every couple of seconds.

Why sampled here and not taken from Prometheus: the console must work with nothing else deployed. Every sample
reads only in-memory state (queue offsets, committed offsets, Raft counters), so it costs microseconds and no
peer round trip; the in-rate comes from the replicated queue offsets and the out-rate from the replicated
committed offsets, so every member draws the same cluster-wide rates. Leader changes seen between two samples
become events ("leader n1 -> n0, term 4").
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from raftmq.store.service_thread import ServiceThread

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 2.0
SAMPLES_KEPT = 180  # 6 minutes at the default interval
EVENTS_KEPT = 50


@dataclass(frozen=True)
class Sample:
    at: float                       # time.time()
    term: int
    leader: str                     # "" during an election
    commit_index: int
    applied_index: int
    dispatch_behind_bytes: int
    stored: dict[str, int]          # topic -> messages ever stored (sum of the queues' max offsets)
    consumed: dict[str, int]        # topic -> sum over groups of the committed offsets


@dataclass(frozen=True)
class LeaderEvent:
    at: float
    old: str
    new: str
    term: int

    def describe(self) -> str:
        if not self.new:
            return f"leader {self.old or '?'} lost (election in term {self.term})"
        return f"leader {self.old or '(none)'} → {self.new} (term {self.term})"


@dataclass
class Snapshot:
    samples: list[Sample] = field(default_factory=list)
    events: list[LeaderEvent] = field(default_factory=list)  # the last EVENTS_KEPT
    since: float = 0.0
    takeovers: int = 0  # events in which a leader took over, since ``since`` (also those no longer kept)


def rates(samples: list[Sample], key: str, topics: str | Collection[str] | None = None) -> list[tuple[float, float]]:
    """(time, per-second rate) between consecutive samples of ``stored`` or ``consumed``: of one topic, summed
    over a collection of topics (those a console user may read), or over all (None).

    A counter that went down (topic deleted and recreated, offsets reset) counts as 0 for that step."""
    out = []
    for a, b in zip(samples, samples[1:], strict=False):
        dt = b.at - a.at
        if dt <= 0:
            continue
        va, vb = getattr(a, key), getattr(b, key)
        if isinstance(topics, str):
            delta = max(0, vb.get(topics, 0) - va.get(topics, 0))
        else:
            delta = sum(max(0, vb.get(t, 0) - va.get(t, 0)) for t in vb if topics is None or t in topics)
        out.append((b.at, delta / dt))
    return out


class History(ServiceThread):
    """A background sampler; ``take`` builds one Sample (the node supplies it), ``snapshot`` reads the buffer."""

    shutdown_timeout = 5.0

    def __init__(self, take: Callable[[], Sample | None], interval: float = SAMPLE_INTERVAL_S,
                 kept: int = SAMPLES_KEPT):
        super().__init__("console-history")
        self._take = take
        self._interval = interval
        self._samples: deque[Sample] = deque(maxlen=kept)
        self._events: deque[LeaderEvent] = deque(maxlen=EVENTS_KEPT)
        self._lock = threading.Lock()
        self._since = time.time()
        self._takeovers = 0

    def sample_now(self) -> None:
        try:
            s = self._take()
        except Exception:  # the store closing under us, a topic deleted mid-read: skip this tick
            log.debug("console history sample failed", exc_info=True)
            return
        if s is None:
            return
        with self._lock:
            last = self._samples[-1] if self._samples else None
            if last is not None and last.leader != s.leader:
                self._events.append(LeaderEvent(s.at, last.leader, s.leader, s.term))
                self._takeovers += bool(s.leader)
            self._samples.append(s)

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(list(self._samples), list(self._events), self._since, self._takeovers)

    def run(self) -> None:
        while not self.stopped:
            self.sample_now()
            self.wait(self._interval)
