"""The power-loss tier: data on tests/support/lossy_fs mounts, which forget every write never fsynced at a cut.

Skips (one line) only where the kernel has no FUSE; in CI, or with RAFTMQ_REQUIRE_POWERLOSS=1, that is a
failure, since `make test` installs everything else the tier needs (`make powerloss-deps`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.lossy_fs import STRICT, LossyFs, fuse_missing


def require_fuse() -> None:
    reason = fuse_missing()
    if reason is None:
        return
    if os.environ.get("CI") or os.environ.get("RAFTMQ_REQUIRE_POWERLOSS") == "1":
        pytest.fail(f"power-loss tier required here (CI or RAFTMQ_REQUIRE_POWERLOSS=1), but {reason}")
    pytest.skip(reason)


@pytest.fixture
def lossy_mount(tmp_path: Path) -> Iterator[Callable[..., LossyFs]]:
    """``lossy_mount(at="disk", mode=STRICT)``: a mounted ``LossyFs`` at ``tmp_path / at`` (``at`` may be an
    absolute path, e.g. a node's data directory), its durable state beside it in ``<mountpoint>.backing``. Every
    mount made is unmounted at teardown, even when the test failed."""
    require_fuse()
    made: list[LossyFs] = []

    def mount(at: str | Path = "disk", mode: str = STRICT) -> LossyFs:
        mountpoint = tmp_path / at
        fs = LossyFs(mountpoint.with_name(mountpoint.name + ".backing"), mountpoint, mode)
        made.append(fs)
        return fs.mount()

    yield mount
    errors = []
    for fs in made:
        try:
            fs.unmount()
        except Exception as e:  # unmount the others anyway, then report the first
            errors.append(e)
    if errors:
        raise errors[0]
