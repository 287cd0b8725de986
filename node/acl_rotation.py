"""Re-encrypting stored user secrets after the bootstrap admin secret was rotated (issue 14).

Users' secrets are replicated sealed under a key derived from ``security.auth_admin_secret_key``. Rotating that
secret is a rolling restart with ``auth_admin_secret_key: NEW`` and ``auth_admin_previous_secret_key: OLD``: every
restarted member opens tokens sealed under either key. Once EVERY member runs the new key (each lists its key
fingerprints in its replica status), the leader re-encrypts the tokens still sealed under the old key and
proposes them through the write path (``user_reseal``, compare-and-set on the old token, so a user changed
meanwhile is left alone and redone next round). Before that it waits: a member still on the old key could not
open a token sealed under the new one. When no token is left under the old key the previous secret can go (a
second rolling restart, or simply left in place).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from raftmq.node.auth import AuthError, audit
from raftmq.v1 import replica_pb2

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore

log = logging.getLogger(__name__)

ROUND_SECONDS = 2.0
STATUS_TIMEOUT_S = 5.0
_last_note = [""]  # the last "waiting for members" line logged


def stale_tokens(table: Any, box: Any) -> list[tuple[str, str]]:
    """(access key, token) of every user whose secret is not sealed under the current key."""
    return [(ak, rec["secret"]) for ak, rec in sorted(table.snapshot().items()) if not box.is_current(rec["secret"])]


def members_missing_key(broker: BrokerCore, key_id: str) -> list[str]:
    """Other members that do not (yet) open secrets with ``key_id``, or cannot be asked (blocking)."""
    wp = broker.write_path
    peers = wp.peers
    if peers is None:
        return []  # a single node
    missing = []
    for member in peers.others:
        try:
            status = peers.stub(member.id).GetReplicaStatus(replica_pb2.GetReplicaStatusRequest(skip_metadata=True),
                                                           metadata=peers.metadata, timeout=STATUS_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - unreachable counts as "not known to have the key"
            missing.append(f"{member.id} (unreachable: {type(e).__name__})")
            continue
        if key_id not in status.acl_key_ids:
            missing.append(member.id)
    return missing


def reseal_round(broker: BrokerCore) -> int:
    """One round on the leader (blocking): re-encrypt what is stale once every member has the key; the number
    of users re-encrypted."""
    from raftmq.store import StoreError

    auth, table = broker.auth, broker.acl_table()
    if auth is None or table is None or not broker.is_leader():
        return 0
    stale = stale_tokens(table, auth.box)
    if not stale:
        return 0
    missing = members_missing_key(broker, auth.box.current_key_id)
    if missing:
        note = (f"{len(stale)} user secret(s) are still sealed under the previous admin secret; re-encrypting them "
                f"once every member runs the new security.auth_admin_secret_key (not yet: {', '.join(missing)})")
        if note != _last_note[0]:  # once per change, not every round
            log.info("%s", note)
            _last_note[0] = note
        return 0
    _last_note[0] = ""
    done = 0
    for access_key, token in stale:
        try:
            new = auth.box.reseal(token)
        except AuthError:
            log.error("the stored secret of user %r opens with neither the current nor the previous admin secret "
                      "on this member; re-add the user (raftmq acl user add %s)", access_key, access_key)
            continue
        try:
            broker.write_path.update_acl({"op": "user_reseal", "user": access_key, "secret": new, "old": token})
        except StoreError as e:  # changed meanwhile: the next round looks again
            log.info("re-encrypting user %r: %s", access_key, e)
            continue
        except Exception as e:  # noqa: BLE001 - not leader any more, timeout: the next leader's round redoes it
            log.warning("re-encrypting user %r failed (%s); retrying next round", access_key, e)
            return done
        audit("acl_change", by="key-rotation", op="user_reseal", user=access_key, key=auth.box.current_key_id)
        done += 1
    if done:
        log.info("re-encrypted %d user secret(s) under the new admin secret", done)
    return done


async def reseal_loop(broker: BrokerCore) -> None:
    """Runs for the node's lifetime (auth on); acts only while this member leads."""
    while True:
        try:
            await asyncio.to_thread(reseal_round, broker)
        except Exception:  # noqa: BLE001 - never let the loop die; the next round retries
            log.exception("re-encrypting user secrets failed")
        await asyncio.sleep(ROUND_SECONDS)
