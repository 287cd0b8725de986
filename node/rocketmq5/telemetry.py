"""The RocketMQ 5 clients connected to this member, keyed by ``x-mq-client-id``: their settings, last heartbeat
and one outbox per open Telemetry stream, so the server can push commands (transaction checks) at any time.

Why an outbox per stream: a Telemetry call is a long-lived bidirectional stream that the server must never
complete (the client would write into a finished call and rebuild it); whatever the node wants to tell a client
is queued here and written by that stream's handler.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field

from google.protobuf.duration_pb2 import Duration

from raftmq.rocketmq.v2 import definition_pb2 as v2
from raftmq.rocketmq.v2 import service_pb2 as v2s

OUTBOX_LIMIT = 1024  # commands queued for one stream; beyond it the oldest are dropped (checks are repeated)
LONG_POLLING_DEFAULT_S = 20  # a consumer's long poll when it names none (the Java proxy's default)
RECEIVE_BATCH_SIZE = 32
PRODUCER_MAX_ATTEMPTS = 3
FORGET_AFTER_S = 600.0  # a client heartbeats every 10 s; one silent this long, with no stream open, is gone  # a producer's send attempts (the client retries on the next queue at once)

_stream_ids = itertools.count(1)


@dataclass(eq=False)
class TelemetryStream:
    """One open Telemetry call of a client."""

    client_id: str
    peer: str
    metadata: dict[str, str] = field(default_factory=dict)  # the call's (credentials, for relayed calls)
    stream_id: int = field(default_factory=lambda: next(_stream_ids))
    settings: v2.Settings | None = None
    outbox: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(OUTBOX_LIMIT))
    opened_at: float = field(default_factory=time.time)

    def push(self, command: v2s.TelemetryCommand | None) -> None:
        """Queue ``command`` for the client (None ends the stream); never blocks (a full outbox drops its oldest
        command)."""
        while True:
            try:
                self.outbox.put_nowait(command)
                return
            except asyncio.QueueFull:
                try:
                    self.outbox.get_nowait()
                except asyncio.QueueEmpty:
                    pass

    @property
    def client_type(self) -> int:
        return self.settings.client_type if self.settings is not None else v2.CLIENT_TYPE_UNSPECIFIED

    def publishing_topics(self) -> list[str]:
        s = self.settings
        if s is None or not s.HasField("publishing"):
            return []
        return [t.name for t in s.publishing.topics]


@dataclass
class ClientInfo:
    """What this member knows about one client."""

    client_id: str
    client_type: int = v2.CLIENT_TYPE_UNSPECIFIED
    group: str = ""
    language: str = ""
    version: str = ""
    last_seen: float = field(default_factory=time.time)
    streams: list[TelemetryStream] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)  # of its latest call (fresh signature, for relays)


class ClientRegistry:
    """Clients of this member (event-loop thread only)."""

    def __init__(self) -> None:
        self._clients: dict[str, ClientInfo] = {}

    def _info(self, client_id: str) -> ClientInfo:
        info = self._clients.get(client_id)
        if info is None:
            info = self._clients[client_id] = ClientInfo(client_id)
        info.last_seen = time.time()
        return info

    def get(self, client_id: str) -> ClientInfo | None:
        return self._clients.get(client_id)

    def clients(self) -> list[ClientInfo]:
        return list(self._clients.values())

    def open_stream(self, client_id: str, peer: str, metadata: dict[str, str] | None = None) -> TelemetryStream:
        stream = TelemetryStream(client_id, peer, dict(metadata or {}))
        info = self._info(client_id)
        info.streams.append(stream)
        info.metadata = stream.metadata
        return stream

    def close_stream(self, stream: TelemetryStream) -> None:
        info = self._clients.get(stream.client_id)
        if info is not None and stream in info.streams:
            info.streams.remove(stream)

    def apply_settings(self, stream: TelemetryStream, settings: v2.Settings) -> None:
        stream.settings = settings
        info = self._info(stream.client_id)
        info.client_type = settings.client_type
        if settings.HasField("subscription"):
            info.group = settings.subscription.group.name
        info.language = v2.Language.Name(settings.user_agent.language) if settings.user_agent.language else ""
        info.version = settings.user_agent.version

    def heartbeat(self, client_id: str, client_type: int, group: str,
                  metadata: dict[str, str] | None = None) -> ClientInfo:
        info = self._info(client_id)
        if metadata:
            info.metadata = metadata
        if client_type:
            info.client_type = client_type
        if group:
            info.group = group
        return info

    def prune(self, now: float | None = None) -> int:
        """Forget clients with no open stream not heard from for ``FORGET_AFTER_S`` (crashed without saying
        goodbye); how many."""
        cutoff = (time.time() if now is None else now) - FORGET_AFTER_S
        gone = [cid for cid, info in self._clients.items() if not info.streams and info.last_seen < cutoff]
        for cid in gone:
            del self._clients[cid]
        return len(gone)

    def terminate(self, client_id: str) -> ClientInfo | None:
        """The client said goodbye: forget it (its streams end when it cancels them)."""
        return self._clients.pop(client_id, None)

    def published_topics(self) -> set[str]:
        """Topics some producer with an open stream publishes to."""
        return {t for info in self._clients.values() for s in info.streams if s.client_type == v2.PRODUCER
                for t in s.publishing_topics()}

    def freshest_metadata(self, streams: list[TelemetryStream]) -> dict[str, str]:
        """The metadata (credentials) of the client among ``streams`` heard from last: a call made on their
        behalf carries a signature still inside the replay window."""
        infos = [i for i in (self._clients.get(s.client_id) for s in streams) if i is not None]
        if not infos:
            return streams[-1].metadata if streams else {}
        return max(infos, key=lambda i: i.last_seen).metadata

    def producer_streams(self, topic: str) -> list[TelemetryStream]:
        """Open streams of producers that publish to ``topic``."""
        return [s for info in self._clients.values() for s in info.streams
                if s.client_type == v2.PRODUCER and topic in s.publishing_topics()]


def _duration(seconds: float) -> Duration:
    d = Duration()
    d.FromMilliseconds(int(seconds * 1000))
    return d


def settings_reply(settings: v2.Settings, *, max_body_size: int, max_attempts: int = 0,
                   backoff_ms: tuple[int, ...] = (), fifo: bool = False) -> v2s.TelemetryCommand:
    """The answer to a client's settings: its own settings merged with the server's values, status OK.

    Producers: the body limit (a client copies it as is: 0 would refuse every send) and type validation.
    Consumers: long polling, batch size, FIFO and the group's retry policy (``max_attempts``, ``backoff_ms``:
    the delay before delivery N+1 after a failure of delivery N). Metrics stay off (the client would export OTLP
    to us)."""
    reply = v2.Settings()
    reply.CopyFrom(settings)
    reply.metric.Clear()
    reply.metric.on = False
    if settings.client_type == v2.PRODUCER or settings.HasField("publishing"):
        reply.publishing.max_body_size = max_body_size
        reply.publishing.validate_message_type = True
        reply.backoff_policy.Clear()
        reply.backoff_policy.max_attempts = PRODUCER_MAX_ATTEMPTS
        exp = reply.backoff_policy.exponential_backoff
        exp.initial.CopyFrom(_duration(0.01))
        exp.max.CopyFrom(_duration(1.0))
        exp.multiplier = 2.0
    if settings.HasField("subscription") or settings.client_type in (v2.PUSH_CONSUMER, v2.SIMPLE_CONSUMER):
        sub = reply.subscription
        if not sub.HasField("long_polling_timeout") or sub.long_polling_timeout.ToMilliseconds() <= 0:
            sub.long_polling_timeout.CopyFrom(_duration(LONG_POLLING_DEFAULT_S))
        sub.receive_batch_size = RECEIVE_BATCH_SIZE
        sub.fifo = fifo
        if max_attempts:
            reply.backoff_policy.Clear()
            reply.backoff_policy.max_attempts = max_attempts
            for ms in backoff_ms:
                reply.backoff_policy.customized_backoff.next.append(_duration(ms / 1000.0))
    return v2s.TelemetryCommand(status=v2.Status(code=v2.OK, message="OK"), settings=reply)
