"""One module per job; each has ``add_arguments(parser)``, ``run(args) -> int`` and a ``main`` for spark-submit.

Job modules import Spark only inside ``run`` so that ``raftmq --help`` stays fast.
"""

JOBS = ("reindex", "export", "stats", "verify", "replicas")
