"""raftmq: one import package for the store, replication, node, client SDK and CLI, and the generated gRPC code.

gRPC's C core writes log lines of its own to stderr (``I1129 ... Handshake failed``, ``E1129 ... add_port.cc``):
raftmq reports each such failure itself, in one line that says what to fix, so the C core's lines stay off
unless ``GRPC_VERBOSITY`` is set (issue 34). It is read once, when grpc is first imported: hence here, in the
package every raftmq module lives in.
"""

import os

os.environ.setdefault("GRPC_VERBOSITY", "NONE")
