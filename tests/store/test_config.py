import pytest

from raftmq.store.config import StoreConfig, parse_host_port
from raftmq.store.errors import StoreError


def test_defaults_are_rocketmqs():
    c = StoreConfig()
    assert c.mapped_file_size_commit_log == 1 << 30
    assert c.mapped_file_size_consume_queue == 6_000_000 and c.consume_queue_file_size == 6_000_000
    assert (c.max_hash_slot_num, c.max_index_num) == (5_000_000, 20_000_000)
    assert c.max_message_size == 4 << 20 and c.flush_disk_type == "ASYNC"
    assert (c.flush_interval_commit_log, c.flush_commit_log_least_pages) == (500, 4)
    assert c.file_reserved_time == 72 and c.disk_max_used_space_ratio == 0.75
    assert c.check_crc_on_recover and c.message_index_enable and c.max_msgs_num_batch == 64


def test_paths_follow_rocketmq_layout(tmp_path):
    c = StoreConfig(root_dir=str(tmp_path))
    assert c.commit_log_dir == str(tmp_path / "commitlog")
    assert c.consume_queue_dir == str(tmp_path / "consumequeue")
    assert c.index_dir == str(tmp_path / "index")
    assert c.config_dir == str(tmp_path / "config")
    assert StoreConfig(mapped_file_size_consume_queue=30).consume_queue_file_size == 40


def test_bad_settings_name_the_field():
    with pytest.raises(StoreError, match="flush_disk_type"):
        StoreConfig(flush_disk_type="sometimes")
    with pytest.raises(StoreError, match="mapped_file_size_commit_log"):
        StoreConfig(mapped_file_size_commit_log=100)
    with pytest.raises(StoreError, match="disk_max_used_space_ratio"):
        StoreConfig(disk_max_used_space_ratio=75)
    with pytest.raises(StoreError, match="unknown store setting"):
        StoreConfig.from_dict({"mapped_file_size_commitlog": 1})
    assert StoreConfig.from_dict({"flush_disk_type": "SYNC"}).sync_flush


def test_host_port_parsing():
    assert parse_host_port("10.0.0.1:10911") == ("10.0.0.1", 10911)
    assert parse_host_port("[::1]:10911") == ("::1", 10911)
    for bad in ("nohost", "h:99999", ":1", "h:x"):
        with pytest.raises(StoreError):
            parse_host_port(bad)
