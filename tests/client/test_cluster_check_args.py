"""``raftmq cluster check`` without a cluster: argument errors are one usage line (exit 2) before anything is
contacted; sizes parse with binary units; the majority rule and the table say which member differs."""

from __future__ import annotations

import argparse

import pytest

from raftmq.client import cli
from raftmq.client.commands import args as command_args
from raftmq.client.commands import cluster, output
from raftmq.client.replica_check import CheckReport, Difference, MemberCheck, QueueDifference, _split_majority


@pytest.mark.parametrize("args, text", [
    (["--from", "-1"], "--from: expected a number >= 0"),
    (["--chunk", "0"], "--chunk: expected a byte count > 0"),
    (["--chunk", "1K"], "chunk size '1K' must be 4K..16M"),
    (["--chunk", "32M"], "chunk size '32M' must be 4K..16M"),
    (["--bytes", "0"], "--bytes: expected a byte count > 0"),
    (["--bytes", "12Q"], "expected a byte count such as 4096"),
    (["--secret-file", "/nonexistent/secret"], "cannot read --secret-file /nonexistent/secret"),
])
def test_bad_arguments_are_one_usage_line(capsys, args, text):
    assert cli.run(["cluster", "check", "-s", "127.0.0.1:1", *args]) == 2
    err = capsys.readouterr().err
    assert text in err and len(err.strip().splitlines()) == 1, err


def test_sizes_take_binary_units():
    assert [command_args.size_arg(v) for v in ("4096", "64K", "64kib", "1M", "2G")] == [
        4096, 64 << 10, 64 << 10, 1 << 20, 2 << 30]
    with pytest.raises(argparse.ArgumentTypeError):
        command_args.size_arg("-5")


def test_majority_names_the_odd_member_out_or_nobody():
    assert _split_majority({"n0": b"a", "n1": b"b", "n2": b"a"}) == (["n1"], ["n0", "n2"])
    assert _split_majority({"n0": b"a", "n1": b"b"}) == (["n0", "n1"], [])
    assert _split_majority({"n0": b"a", "n1": b"b", "n2": b"c"}) == (["n0", "n1", "n2"], [])


def test_table_and_summary_name_the_differing_member_and_range():
    members = [MemberCheck("n0", "h0:1", 0, 100, 0, 8192, "matches majority", "matches majority"),
               MemberCheck("n1", "h1:1", 0, 100, 0, 8192, "DIFFERS", "DIFFERS"),
               MemberCheck("n2", "h2:1", verdict="unreachable", error="Connection refused")]
    report = CheckReport("sha256", 8192, 0, 100_000, members, Difference(4096, 8192, 0, 8192, ["n1"], ["n0"]),
                         queues_compared=2, queue_units=10,
                         queue_difference=QueueDifference("T", 1, 7, 8, ["n1"], ["n0"]))
    table = cluster.check_table(report)
    n1 = next(line for line in table.splitlines() if line.startswith("| n1 "))
    assert "DIFFERS in [4096, 8192)" in n1 and "DIFFERS in T/1 at 7" in n1
    assert "unreachable: Connection refused" in next(line for line in table.splitlines() if line.startswith("| n2 "))
    assert cluster._check_summary(report) == ("first difference: commit-log bytes [4096, 8192) (in chunk [0, 8192)): "
                                               "n1 differs from n0")
    assert cluster._queue_summary(report) == "first consume-queue difference: T/1 unit at queue offset 7: n1 differs from n0"
    assert report.to_json()["identical"] is False


def test_progress_says_how_much_is_checked():
    import io

    out = io.StringIO()
    progress = output.Progress(8 << 20, stream=out, render=output.checked_text)
    progress.update(2 << 20, force=True)
    assert out.getvalue().startswith("checked 2.0/8.0 MiB (25%), ") and out.getvalue().endswith(" MiB/s\n")
