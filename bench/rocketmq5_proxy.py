"""A real Apache RocketMQ 5 on this box for the benchmarks: name server + proxy in local mode (the broker runs
inside the proxy's JVM), from the release jars on Maven Central (fetched once with Maven into a cache).

    with RocketMQ5(topic="bench") as rmq:     # rmq.endpoint: the proxy's gRPC port, for RocketMQ 5 clients
        ...

Durability: ASYNC_FLUSH on an ASYNC_MASTER broker (acknowledged once in the page cache), the closest to
raftmq's single node with async durability. Single broker, no replication.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.peer_processes import broker_port_bases, wait_port
from tests.support.processes import free_ports

VERSION = "5.3.3"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "raftmq-bench" / f"rocketmq-{VERSION}"
POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>raftmq.bench</groupId><artifactId>rocketmq5-proxy</artifactId><version>1</version><dependencies>
<dependency><groupId>org.apache.rocketmq</groupId><artifactId>rocketmq-proxy</artifactId><version>{VERSION}</version></dependency>
<dependency><groupId>org.apache.rocketmq</groupId><artifactId>rocketmq-namesrv</artifactId><version>{VERSION}</version></dependency>
<dependency><groupId>org.apache.rocketmq</groupId><artifactId>rocketmq-tools</artifactId><version>{VERSION}</version></dependency>
</dependencies></project>
"""


def jars() -> Path:
    """The directory of RocketMQ's jars and their dependencies (fetched by Maven on first use)."""
    lib = CACHE / "lib"
    if not (lib / f"rocketmq-proxy-{VERSION}.jar").exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        (CACHE / "pom.xml").write_text(POM)
        done = subprocess.run(["mvn", "-q", "-B", "-f", str(CACHE / "pom.xml"), "dependency:copy-dependencies",
                               f"-DoutputDirectory={lib}"], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"fetching RocketMQ {VERSION} from Maven Central failed:\n{done.stdout[-2000:]}")
    return lib


class RocketMQ5:
    def __init__(self, topic: str, queues: int = 4):
        self.topic = topic
        self.queues = queues
        self.procs: list[subprocess.Popen] = []
        self.home = Path(tempfile.mkdtemp(prefix="rocketmq5-"))
        self.endpoint = ""

    def __enter__(self) -> RocketMQ5:
        try:
            return self._start_all()
        except BaseException:
            self._stop()  # no JVM is left behind when the start fails; its logs stay in self.home
            raise

    def _start_all(self) -> RocketMQ5:
        lib = jars()
        conf = self.home / "conf"
        conf.mkdir()
        # the broker also binds broker_port - 2 (fast remoting) and + 1 (HA): none of them may be the others'
        broker_port = broker_port_bases(1)[0]
        namesrv_port, grpc_port, remoting_port = [p for p in free_ports(6)
                                                  if not broker_port - 2 <= p <= broker_port + 1][:3]
        namesrv = f"127.0.0.1:{namesrv_port}"
        (conf / "namesrv.conf").write_text(f"listenPort={namesrv_port}\n")
        (conf / "broker.conf").write_text("\n".join([
            "brokerClusterName=DefaultCluster", "brokerName=broker-a", "brokerId=0", f"namesrvAddr={namesrv}",
            f"listenPort={broker_port}", f"storePathRootDir={self.home / 'store'}",
            f"storePathCommitLog={self.home / 'store' / 'commitlog'}", "flushDiskType=ASYNC_FLUSH",
            "brokerRole=ASYNC_MASTER", "autoCreateTopicEnable=false", ""]))
        (conf / "rmq-proxy.json").write_text(json.dumps({
            "rocketMQClusterName": "DefaultCluster", "namesrvAddr": namesrv, "grpcServerPort": grpc_port,
            "remotingListenPort": remoting_port}))
        env = dict(os.environ, ROCKETMQ_HOME=str(self.home))
        classpath = f"{lib}/*"
        self._start(["java", "-Xms512m", "-Xmx512m", "-cp", classpath, "org.apache.rocketmq.namesrv.NamesrvStartup",
                     "-c", str(conf / "namesrv.conf")], env, "namesrv")
        self._wait_port(namesrv_port)
        self._start(["java", "-Xms1g", "-Xmx1g", "-cp", classpath, "org.apache.rocketmq.proxy.ProxyStartup",
                     "-pm", "local", "-pc", str(conf / "rmq-proxy.json"), "-bc", str(conf / "broker.conf")],
                    env, "proxy")
        self._wait_port(grpc_port)
        self._wait_port(broker_port)
        deadline = time.monotonic() + 60
        while True:  # the broker registers with the name server a moment after it listens
            done = subprocess.run(["java", "-cp", classpath, "org.apache.rocketmq.tools.command.MQAdminStartup",
                                   "updateTopic", "-n", namesrv, "-c", "DefaultCluster", "-t", self.topic,
                                   "-r", str(self.queues), "-w", str(self.queues)],
                                  env=env, capture_output=True, text=True, timeout=60)
            if "success" in done.stdout:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"RocketMQ updateTopic failed: {done.stdout[-500:]} {done.stderr[-500:]}")
            time.sleep(1)
        self.endpoint = f"127.0.0.1:{grpc_port}"
        return self

    def _start(self, argv: list[str], env: dict, name: str) -> None:
        log = open(self.home / f"{name}.log", "ab")
        self.procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.home))

    def _wait_port(self, port: int) -> None:
        wait_port(port, f"RocketMQ (logs in {self.home})", self.procs)

    def __exit__(self, *exc) -> None:
        self._stop()
        shutil.rmtree(self.home, ignore_errors=True)

    def _stop(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []
