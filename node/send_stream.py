"""SendStream: many sends per request, several requests in flight on one stream, responses in request order.

Why: a unary send pays a gRPC call, an event-loop task and a handler wrapper per message; a stream request
carries every send a producer accumulated in the meantime, and its sends reach the group committer back to back,
so they share one Raft entry. Each send still goes through the one prepared write path (node/send_path.py) - the
same checks, conversion and write path as SendMessage/SendBatch - and gets the outcome the unary call would have
had, as a status code in its ``SendOutcome``.

Flow control: the reader takes at most ``WINDOW`` requests ahead of the response being written; beyond that
it stops reading, and HTTP/2 flow control stops the client. A request is one "RPC in flight" for the drain on
shutdown; a stream that breaks leaves its unanswered requests with an unknown outcome (the client says so).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import grpc

from raftmq.node import convert
from raftmq.node.auth import authorize_item
from raftmq.node.errors import RpcError, invalid, to_rpc_error
from raftmq.node.rpc import RpcScope
from raftmq.node.send_path import SendPath, peer_host
from raftmq.node.validation import message_type_of
from raftmq.v1 import raftmq_pb2 as pb

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore

log = logging.getLogger(__name__)

STREAM_METHOD = "/raftmq.v1.MessagingService/SendStream"
ACCEPTED_METADATA_KEY = "x-raftmq-stream-accepted"  # initial metadata once the stream passed its opening checks
WINDOW = 64              # requests read ahead of the oldest unanswered one
MAX_SENDS_PER_REQUEST = 4096


def _outcome_for(exc: BaseException) -> pb.SendOutcome:
    err = to_rpc_error(exc)
    if err is None:
        log.exception("SendStream send failed unexpectedly", exc_info=exc)
        err = RpcError(grpc.StatusCode.INTERNAL,
                       f"internal error in the send stream: {type(exc).__name__}: {exc} (see the node log)")
    return pb.SendOutcome(code=err.code.value[0], error=err.message, leader=err.leader or "")


async def _answer(node: BrokerCore, sends: SendPath, request: pb.SendStreamRequest,
                  born_host: tuple[str, int], peer: str) -> pb.SendStreamResponse:
    """Check every send of the request, queue the good ones together (one group commit), wait for each.

    Per request, not per send: the serving check, and each topic's checks (name, leadership, writable, auto-create)
    once per topic the request names; a topic that fails them fails each of its sends with the same outcome."""
    scope = RpcScope(node, "SendStream.request")  # each request is one call in flight for the graceful stop
    scope.enter()
    try:
        try:
            node.check_serving()
        except Exception as exc:
            return pb.SendStreamResponse(id=request.id, outcomes=[_outcome_for(exc)] * len(request.sends))
        topics: dict[str, object] = {}  # topic -> its TopicConfig, or the exception its checks raised
        checked: list = []
        for item in request.sends:
            try:
                messages = list(item.messages)
                if not messages:
                    raise invalid("a send is empty; put at least one message in SendStreamItem.messages")
                if node.auth is not None:
                    authorize_item(node.auth, STREAM_METHOD, pb.SendStreamRequest(sends=[item]), peer)
                topic = sends.send_topic(messages)
                cfg = topics.get(topic)
                if cfg is None:
                    try:
                        cfg = await sends.writable_topic_for_send(topic, message_type_of(messages[0])[0])
                    except Exception as exc:
                        cfg = exc
                    topics[topic] = cfg
                # a topic that failed its checks: the same refusal for this send (appended, not re-raised, so
                # one exception is not given a traceback frame per send)
                checked.append(cfg if isinstance(cfg, Exception) else sends.convert_send(cfg, messages, born_host))
            except Exception as exc:
                checked.append(exc)
        queued = iter(sends.submit_prepared([c for c in checked if not isinstance(c, Exception)]))
        submitted = [c if isinstance(c, Exception) else next(queued) for c in checked]
        response = pb.SendStreamResponse(id=request.id)
        outcomes = response.outcomes
        stored = []
        for s in submitted:
            if isinstance(s, Exception):
                outcomes.append(_outcome_for(s))
                continue
            try:
                results = await sends.complete(s, record=False)
            except Exception as exc:
                outcomes.append(_outcome_for(exc))
                continue
            stored.append(s)
            convert.add_send_results(outcomes.add().results, results, s.msgs)
        sends.record_stored(stored)
        return response
    finally:
        scope.leave()


async def serve(node: BrokerCore, sends: SendPath, requests: AsyncIterator[pb.SendStreamRequest],
                context: grpc.aio.ServicerContext) -> AsyncIterator[pb.SendStreamResponse]:
    """The SendStream handler's body: read ahead up to WINDOW requests, answer in order."""
    peer = node.forwarder.client_peer(context)
    born_host = peer_host(peer)
    # accepted: say so at once (headers), so a client can tell a refused stream from one that failed later
    await context.send_initial_metadata(((ACCEPTED_METADATA_KEY, "1"),))
    answers: asyncio.Queue = asyncio.Queue(maxsize=WINDOW)
    done = object()

    async def read() -> None:
        try:
            async for request in requests:
                if len(request.sends) > MAX_SENDS_PER_REQUEST:
                    raise invalid(f"one stream request carries {len(request.sends)} sends; the limit is "
                                  f"{MAX_SENDS_PER_REQUEST} - split it")
                if not request.sends:
                    raise invalid("a stream request with no sends; put at least one message in each request")
                await answers.put(asyncio.ensure_future(_answer(node, sends, request, born_host, peer)))
        except Exception as exc:  # a bad request ends the stream with its status after the earlier answers
            await answers.put(exc)
        else:
            await answers.put(done)

    reader = asyncio.ensure_future(read())
    try:
        while True:
            item = await answers.get()
            if item is done:
                break
            if isinstance(item, Exception):
                raise item
            yield await item
    finally:
        reader.cancel()
        while not answers.empty():
            left = answers.get_nowait()
            if isinstance(left, asyncio.Future):
                left.cancel()
