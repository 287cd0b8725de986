"""Issue 15 bugs 3 and 5 at render time: the `helm test` pod is deleted once it passed (so it does not outlive
`helm uninstall`), and a volume smaller than what a member preallocates is refused with the numbers."""

from __future__ import annotations

import pytest
from helm_python.errors import HelmRenderError

from tests.helm.chart import render


def test_test_pod_is_deleted_when_it_passes():
    pods = [d for docs in render().values() for d in docs
            if d["kind"] == "Pod" and d["metadata"]["annotations"].get("helm.sh/hook") == "test"]
    assert len(pods) == 1
    policy = pods[0]["metadata"]["annotations"]["helm.sh/hook-delete-policy"].split(",")
    assert set(policy) == {"before-hook-creation", "hook-succeeded"}


@pytest.mark.parametrize("size", ["1Gi", "2Gi", "3Gi", "3200Mi"])
def test_volume_smaller_than_the_preallocation_is_refused(size):
    with pytest.raises(HelmRenderError) as e:
        render({"persistence": {"size": size}})
    text = str(e.value)
    assert "persistence.size" in text and "two 1073741824-byte commit-log segments" in text
    assert "two 420000040-byte index files" in text and "3.2Gi" in text


@pytest.mark.parametrize("size", ["3300Mi", "20Gi", "1Ti"])
def test_default_and_larger_volumes_render(size):
    sts = render({"persistence": {"size": size}})["raftmq/templates/statefulset.yaml"][0]
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == size


@pytest.mark.parametrize("store", [{}, {"mapped_file_size_commit_log": 134217728, "max_hash_slot_num": 500000,
                                       "max_index_num": 2000000}, {"message_index_enable": False},
                                   {"disk_space_warning_level_ratio": 0.75, "disk_min_free_bytes": 1 << 30}])
def test_the_chart_refuses_exactly_the_volumes_the_node_refuses(store):
    """One rule: the chart's minimum is the node's own (store.config.volume_problem), so a volume the chart
    accepts never makes the node log that it is too small."""
    from raftmq.store.config import StoreConfig, store_footprint

    cfg = StoreConfig(**store)
    need = -(-store_footprint(cfg) * 100 // int(cfg.disk_space_warning_level_ratio * 100))
    render({"persistence": {"size": str(need + 1024)}, "store": store})
    with pytest.raises(HelmRenderError):
        render({"persistence": {"size": str(need - 1024 * 1024)}, "store": store})


def test_smaller_store_files_allow_a_small_dev_volume():
    render({"persistence": {"size": "1Gi"},
            "store": {"mapped_file_size_commit_log": 134217728, "max_hash_slot_num": 500000, "max_index_num": 2000000}})
