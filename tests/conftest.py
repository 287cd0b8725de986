"""Suite-wide settings that must be in place before anything imports grpc."""

import os

# gRPC's fork handlers run whenever this process forks (Spark launching its JVM, subprocesses with preexec_fn)
# and, with calls of earlier tests' channels still winding down in other threads, have made the forked child die
# before it could exec (a full run saw Spark's gateway exit at start: "skipping fork() handlers", then "epoll_wait
# error: Bad file descriptor" in the child). Nothing here forks to keep using gRPC in the child, so turn them off.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
