"""The single-node store engine: RocketMQ 4.9's CommitLog / ConsumeQueue / IndexFile, byte-compatible.

The public surface is ``store.MessageStore`` (see ``store.message_store``) and the codec in
``store.message``; everything else is internal to the package.
"""

from store.config import StoreConfig
from store.errors import (
    MessageIllegalError,
    PropertiesSizeExceededError,
    StoreError,
    StoreLockedError,
)

__all__ = [
    "MessageIllegalError",
    "PropertiesSizeExceededError",
    "StoreConfig",
    "StoreError",
    "StoreLockedError",
]
