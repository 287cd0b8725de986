import pytest

from tests.client.scripted_server import ScriptedServer


@pytest.fixture
def scripted():
    servers = []

    def start() -> ScriptedServer:
        s = ScriptedServer()
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()
