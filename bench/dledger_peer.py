"""RocketMQ 4.9.7 in DLedger mode as a peer for bench/peer_bench.py: one name server and three brokers of one
DLedger group (Raft-replicated commit log, the design raftmq follows) on loopback, and RocketMQ's own Java
producer (``DefaultMQProducer``, closed loop, one JVM, one thread per producer) waiting for each send's answer.
A DLedger broker answers after a majority appended the entry (its flush stays asynchronous), so it is compared
with raftmq's and JetStream's ``async`` cases only.

The jars come from Maven Central through ``bench/rocketmq_dledger/build.sh`` (cached); needs ``java`` 17 and
``mvn``. Brokers run with a 512 MiB heap; their logs are left in the bench's work directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from bench.peer_processes import broker_port_bases, cpu_seconds, wait_port

HERE = Path(__file__).resolve().parent
VERSION = "4.9.7"
MAIN_CLASS = "io.raftmq.bench.DledgerBench"
JVM = ["-Xms512m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxDirectMemorySize=512m",
       "--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
       "--add-opens", "java.base/java.lang=ALL-UNNAMED"]
_LOGBACK = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>${{user.home}}/{name}.log</file>
    <encoder><pattern>%d %-5level [%thread] %logger - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="FILE"/></root>
</configuration>
"""


def available() -> str | None:
    """None when the peer can run here, else why not."""
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            return f"{tool} not found (RocketMQ DLedger needs a JDK 17 and Maven)"
    return None


def classpath() -> str:
    return subprocess.run([str(HERE / "rocketmq_dledger" / "build.sh")], check=True, capture_output=True,
                          text=True).stdout.strip()


class DledgerCluster:
    """A name server and a 3-broker DLedger group under ``base``; a context manager."""

    def __init__(self, base: Path, cp: str, topic: str, queues: int):
        self.base, self.cp, self.topic, self.queues = base, cp, topic, queues
        self.procs: list[tuple[subprocess.Popen, object]] = []
        self.namesrv = ""

    def _java(self, name: str, main: str, *args: str) -> subprocess.Popen:
        home = self.base / name
        home.mkdir(parents=True, exist_ok=True)
        log = open(home / "stdout.log", "w")  # noqa: SIM115 - closed in __exit__
        env = {**os.environ, "ROCKETMQ_HOME": str(self.base / "home")}
        proc = subprocess.Popen(["java", *JVM, f"-Duser.home={home}", "-cp", self.cp, main, *args],
                                stdout=log, stderr=subprocess.STDOUT, env=env)
        self.procs.append((proc, log))
        return proc

    def __enter__(self) -> DledgerCluster:
        conf = self.base / "home" / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        for name in ("namesrv", "broker"):
            (conf / f"logback_{name}.xml").write_text(_LOGBACK.format(name=name))
        try:
            ns_port, *brokers = broker_port_bases(4)
            (self.base / "namesrv.properties").write_text(f"listenPort={ns_port}\n")
            ns = self._java("namesrv", "org.apache.rocketmq.namesrv.NamesrvStartup", "-c",
                            str(self.base / "namesrv.properties"))
            wait_port(ns_port, "RocketMQ name server", [ns])
            self.namesrv = f"127.0.0.1:{ns_port}"
            peers = ";".join(f"n{i}-127.0.0.1:{b + 7}" for i, b in enumerate(brokers))
            for i, port in enumerate(brokers):
                store = self.base / f"broker{i}" / "store"
                props = {
                    "brokerClusterName": "RaftmqBench", "brokerName": "RaftNode00", "brokerIP1": "127.0.0.1",
                    "listenPort": port, "namesrvAddr": self.namesrv, "storePathRootDir": store,
                    "storePathCommitLog": store / "commitlog", "mappedFileSizeCommitLog": 256 << 20,
                    "enableDLegerCommitLog": "true", "dLegerGroup": "RaftNode00", "dLegerPeers": peers,
                    "dLegerSelfId": f"n{i}", "autoCreateTopicEnable": "false",
                }
                path = self.base / f"broker{i}.properties"
                path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
                proc = self._java(f"broker{i}", "org.apache.rocketmq.broker.BrokerStartup", "-c", str(path))
                wait_port(port, f"RocketMQ broker {i}", [proc])
            out = subprocess.run(["java", *JVM, "-cp", self.cp, MAIN_CLASS, "create-topic", self.namesrv,
                                  self.topic, str(self.queues), "90"], capture_output=True, text=True, timeout=150)
            if out.returncode != 0:
                raise RuntimeError(f"creating the topic on the DLedger group failed: {out.stdout[-2000:]}"
                                   f"{out.stderr[-2000:]}")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for proc, _ in self.procs:
            proc.terminate()
        for proc, log in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
        self.procs = []

    def produce(self, producers: int, batch: int, size: int, seconds: float, warmup: float = 5.0) -> dict:
        """One closed-loop case; the same figures as peer_bench's ``_drive`` (server CPU: brokers + name server)."""
        pids = [p.pid for p, _ in self.procs]
        proc = subprocess.Popen(["java", *JVM, "-cp", self.cp, MAIN_CLASS, "produce", self.namesrv, self.topic,
                                 str(producers), str(batch), str(size), str(warmup), str(seconds)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        cpu0 = cpu1 = None
        lines, result = [], None
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == "measuring":
                cpu0 = cpu_seconds(pids)
            elif line.startswith("result "):
                cpu1 = cpu_seconds(pids)
                result = line.split()[1:]
            else:
                lines.append(line)
        err = proc.stderr.read() if proc.stderr is not None else ""
        if proc.wait() != 0 or cpu0 is None or cpu1 is None or result is None:
            raise RuntimeError(f"the RocketMQ producer failed: {''.join(lines)[-1000:]}{err[-2000:]}")
        sent, elapsed, p50, p99, client_cpu, failed = result
        n = max(int(sent), 1)
        return {"msgs_s": int(sent) / float(elapsed), "p50_ms": float(p50) * 1e3, "p99_ms": float(p99) * 1e3,
                "server_us": (cpu1 - cpu0) / n * 1e6, "client_us": float(client_cpu) / n * 1e6,
                "failed": int(failed)}


def run_dledger(base: Path, cases: list[tuple[int, int]], size: int, seconds: float, topic: str,
                queues: int) -> dict:
    """``{("async", producers, batch): figures}`` for every case."""
    out = {}
    with DledgerCluster(base / "dledger", classpath(), topic, queues) as cluster:
        cluster.produce(16, 32, size, 8.0, warmup=0.0)  # the JVMs compile their hot paths first (not counted)
        for producers, batch in cases:
            out[("async", producers, batch)] = cluster.produce(producers, batch, size, seconds)
    return out
