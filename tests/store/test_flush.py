import threading

from raftmq.store.flush import GroupCommitService, PeriodicFlushService


def test_group_commit_serves_every_waiting_put_with_few_fsyncs():
    """8 writers wait at once; the flusher is held until all have asked, so one fsync round serves them."""
    end = [0]
    all_waiting = threading.Event()
    calls = []

    def flush_all():
        all_waiting.wait(10)
        calls.append(end[0])
        return end[0]

    gc = GroupCommitService(flush_all, 0)
    gc.start()
    results = []
    waiting = threading.Semaphore(0)

    def writer(i):
        end[0] = max(end[0], (i + 1) * 100)  # every writer's record is written before it waits
        waiting.release()
        results.append(gc.wait_for_flush((i + 1) * 100, 10))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for _ in threads:
        waiting.acquire()
    all_waiting.set()
    for t in threads:
        t.join()
    gc.shutdown()
    assert results == [True] * 8
    assert 1 <= gc.flush_count <= 2 and len(calls) <= 2
    assert gc.flushed_offset == 800


def test_group_commit_times_out_when_the_disk_hangs():
    stuck = threading.Event()
    gc = GroupCommitService(lambda: (stuck.wait(10), 0)[1], 0)
    gc.start()
    assert gc.wait_for_flush(10, 0.05) is False
    stuck.set()
    gc.shutdown()


def test_periodic_flush_makes_a_final_thorough_flush_on_shutdown():
    seen = []
    thorough = []
    svc = PeriodicFlushService("t", seen.append, 60_000, 4, 60_000, after_thorough=lambda: thorough.append(1))
    svc.start()
    svc.shutdown()
    assert seen[-1] == 0 and thorough
