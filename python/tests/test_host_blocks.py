"""The pool of host blocks that loads make tensors in (hipobj._host_blocks):
a block is handed out again only after everything made from its tensor has
died, within the pool's limit."""

import gc

import pytest

torch = pytest.importorskip("torch")

from hipobj._host_blocks import HostBlocks  # noqa: E402

MIB = 1 << 20


def span(t):
    st = t.untyped_storage()
    return st.data_ptr(), st.data_ptr() + st.nbytes()


def take(pool, n):
    t, _ = pool.take(n)  # the transfer's array is dropped at once, as a load does
    return t


def test_the_tensor_covers_the_bytes_asked_for():
    pool = HostBlocks(keep_bytes=64 * MIB)
    t, into = pool.take(3 * MIB + 5)
    assert t.dtype == torch.uint8 and t.device.type == "cpu" and t.numel() == 3 * MIB + 5
    assert into.nbytes == t.numel() and into.__array_interface__["data"][0] == t.data_ptr()
    into[:4] = 9  # what the transfer writes, the tensor reads
    assert t[:4].tolist() == [9, 9, 9, 9]


@pytest.mark.parametrize("keep", ["torch view", "numpy of a view", "typed view"])
def test_anything_made_from_the_tensor_keeps_its_block(keep):
    pool = HostBlocks(keep_bytes=64 * MIB)
    t = take(pool, 3 * MIB)
    if keep == "torch view":
        held = t[10:20]
    elif keep == "numpy of a view":
        held = t[10:20].numpy()[2:5]
    else:
        held = t[:64].view(torch.float32)[4:8]
    lo, hi = span(t)
    del t
    gc.collect()
    other = take(pool, 3 * MIB)
    assert pool.reused == 0 and pool.made == 2
    olo, ohi = span(other)
    assert ohi <= lo or hi <= olo
    del held
    gc.collect()
    take(pool, 3 * MIB)
    assert pool.reused == 1


def test_a_dead_block_comes_back_to_a_load_of_a_similar_size():
    pool = HostBlocks(keep_bytes=64 * MIB)
    t = take(pool, 3 * MIB + 5)
    t.fill_(7)
    where = t.data_ptr()
    del t
    u = take(pool, 4 * MIB)  # the block is 4 MiB (rounded up to MiB)
    assert pool.reused == 1 and u.data_ptr() == where
    assert u.numel() == 4 * MIB and int(u[0]) == 7  # the same memory, not zeroed: a load overwrites it whole


def test_too_large_a_block_is_not_reused_for_a_small_load():
    pool = HostBlocks(keep_bytes=64 * MIB)
    take(pool, 16 * MIB)  # not kept by the caller: back at once
    small = take(pool, 2 * MIB)
    assert pool.reused == 0 and pool.made == 2
    assert pool.free_bytes() == 16 * MIB
    take(pool, 15 * MIB)  # within an eighth of 16 MiB
    assert pool.reused == 1
    del small


def test_the_limit_bounds_what_the_pool_keeps_and_release_empties_it():
    pool = HostBlocks(keep_bytes=5 * MIB)
    a, b = take(pool, 4 * MIB), take(pool, 4 * MIB)
    del a, b
    assert pool.free_bytes() == 4 * MIB  # one fits under the limit, the other went
    assert pool.release() == 4 * MIB
    assert pool.free_bytes() == 0
    take(pool, 4 * MIB)
    assert pool.reused == 0


def test_a_zero_limit_keeps_nothing():
    pool = HostBlocks(keep_bytes=0)
    take(pool, MIB)
    take(pool, MIB)
    assert pool.reused == 0 and pool.free_bytes() == 0


def test_a_bad_limit_in_the_environment_warns_and_keeps_the_default(monkeypatch):
    from hipobj import _host_blocks

    monkeypatch.setenv("HIPOBJ_HOST_POOL_BYTES", "lots")
    with pytest.warns(UserWarning, match="HIPOBJ_HOST_POOL_BYTES"):
        assert _host_blocks._keep_bytes_from_env() == _host_blocks.DEFAULT_KEEP_BYTES
    monkeypatch.setenv("HIPOBJ_HOST_POOL_BYTES", "1048576")
    assert _host_blocks._keep_bytes_from_env() == MIB


def test_a_forked_child_can_take_blocks_while_a_parent_thread_held_the_lock():
    import os
    import threading

    from hipobj._host_blocks import HOST_BLOCKS

    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    held, release = threading.Event(), threading.Event()

    def hold():
        with HOST_BLOCKS._lock:
            held.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: the lock it inherited was held by a thread it lacks
        import signal

        signal.alarm(10)  # a deadlock ends the child by SIGALRM, not the test run
        try:
            got, _ = HOST_BLOCKS.take(MIB)
            os._exit(0 if got.numel() == MIB else 1)
        except BaseException:
            os._exit(2)
    release.set()
    t.join()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
