"""One SparkSession for every pipeline job: local by default, quiet, loopback-only.

Jobs run on a laptop or a shared CI box far more often than on a cluster, so the defaults are for local mode:
bind to 127.0.0.1 (no surprise listening sockets), no UI, a shuffle partition count sized to the cores instead
of Spark's 200, and the JVM's log output cut down to errors. ``--master`` points the same job at any cluster;
then the ``raftmq.store`` and ``raftmq.pipeline`` packages are shipped to the executors as a zip.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession

import raftmq
import raftmq.store

PIPELINE_DIR = Path(__file__).resolve().parent
LOG4J_CONFIG = PIPELINE_DIR / "log4j2.properties"


def local_cores(master: str) -> int:
    """Number of executor threads a ``local[...]`` master gives (the machine's cores for ``*``)."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master)
    if not m:
        return 0
    spec = m.group(1)
    if spec is None:
        return 1
    return os.cpu_count() or 1 if spec == "*" else int(spec)


def get_session(master: str | None = None, app_name: str = "raftmq-pipeline",
                shuffle_partitions: int | None = None) -> SparkSession:
    """Return the active session (spark-submit, tests) or build one for ``master`` (default ``local[*]``)."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    master = master or os.environ.get("RAFTMQ_SPARK_MASTER") or "local[*]"
    cores = local_cores(master)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if cores:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    java_opts = f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG} -Dlog4j.configurationFile=file:{LOG4J_CONFIG}"
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
    )
    if cores:
        builder = (
            builder.config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", str(shuffle_partitions or max(2, 2 * cores)))
            .config("spark.default.parallelism", str(max(1, cores)))
        )
    elif shuffle_partitions:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if not cores:
        ship_code(spark)
    return spark


def ship_code(spark: SparkSession) -> None:
    """Zip ``raftmq.store`` and ``raftmq.pipeline`` (under ``raftmq/``) for the executors' Python path (cluster mode).

    The folders are found through the imported packages, so this works from a source checkout (where the rooms are
    top-level folders mapped into ``raftmq``) and from an installed wheel alike.
    """
    out = Path(tempfile.mkdtemp(prefix="raftmq-pyfiles-")) / "raftmq_pipeline.zip"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(raftmq.__file__, "raftmq/__init__.py")
        for name, folder in (("store", Path(raftmq.store.__file__).parent), ("pipeline", PIPELINE_DIR)):
            for path in sorted(folder.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".properties"):
                    zf.write(path, f"raftmq/{name}/{path.relative_to(folder).as_posix()}")
    spark.sparkContext.addPyFile(str(out))
