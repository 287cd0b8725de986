"""The broker process: ``raftmq node``.

Modules: ``config`` (YAML + ``RAFTMQ_*`` + ``--set``), ``cli`` (subcommands), ``broker`` (lifecycle),
``messaging`` / ``admin`` (the gRPC services), ``rpc`` (readiness gate, status translation, timing), ``errors``
(exception -> gRPC status), ``convert`` (wire <-> store), ``validation`` (client input), ``long_poll``
(parked pulls), ``metrics`` + ``http_server`` (``/metrics``, ``/health``, ``/ready``), ``kube`` (pod role label),
``local_cluster`` (``make run`` / ``make stop``).
"""
