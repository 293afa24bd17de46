"""Issue 24 item 5: one ``accel.stream(s)`` (and ``accel.device_index(i)``) object entered again inside its
own block keeps a stack: every exit restores what its own entry replaced.

Before, the object kept one saved state: the inner exit restored the side stream's predecessor
(the side stream itself) and forgot the outer entry's, so the outer exit restored nothing and the
side stream stayed current (torch's ``StreamContext`` has the same bug). The same on the H200:
``ci/gpu/reliability.py``.
"""

from __future__ import annotations

from _runtime_fakes import make_stream

import accel


def test_nested_reentry_of_one_stream_object_restores_each_level(fake_cuda):
    before0, before1 = fake_cuda.streams[0], fake_cuda.streams[1]
    side = make_stream("cuda", 1, 42)
    ctx = accel.stream(side)
    with ctx:
        assert accel.current_device_index() == 1 and accel.current_stream() == side
        with ctx:
            assert accel.current_stream() == side
        # the inner exit restores what the inner entry replaced: the side stream itself, on device 1
        assert accel.current_device_index() == 1 and accel.current_stream() == side
    assert accel.current_device_index() == 0
    assert fake_cuda.streams[0] == before0 and fake_cuda.streams[1] == before1


def test_three_levels_same_device(fake_cuda):
    before = fake_cuda.streams[0]
    side = make_stream("cuda", 0, 9)
    ctx = accel.stream(side)
    with ctx, ctx, ctx:
        assert accel.current_stream() == side
    assert accel.current_stream() == before and fake_cuda.device == 0


def test_reentry_interleaved_with_another_stream(fake_cuda):
    before = fake_cuda.streams[0]
    a, b = make_stream("cuda", 0, 1), make_stream("cuda", 0, 2)
    ca = accel.stream(a)
    with ca:
        with accel.stream(b):
            with ca:
                assert accel.current_stream() == a
            assert accel.current_stream() == b
        assert accel.current_stream() == a
    assert accel.current_stream() == before


def test_reuse_after_exit_and_exit_on_error(fake_cuda):
    before = fake_cuda.streams[0]
    side = make_stream("cuda", 0, 3)
    ctx = accel.stream(side)
    for _ in range(2):  # sequential reuse still works
        with ctx:
            assert accel.current_stream() == side
        assert accel.current_stream() == before
    try:
        with ctx, ctx:
            raise KeyError("boom")
    except KeyError:
        pass
    assert accel.current_stream() == before
    ctx.__exit__(None, None, None)  # an exit without an entry changes nothing
    assert accel.current_stream() == before


def test_device_index_reentry_restores_each_level(fake_cuda):
    ctx = accel.device_index(1)
    with ctx:
        assert fake_cuda.device == 1
        with ctx:
            assert fake_cuda.device == 1
        assert fake_cuda.device == 1
    assert fake_cuda.device == 0
    with accel.device_index(1):
        inner = accel.device_index(0)
        with inner:
            with inner:
                assert fake_cuda.device == 0
            assert fake_cuda.device == 0
        assert fake_cuda.device == 1
    assert fake_cuda.device == 0


def test_cpu_reentry_is_a_no_op(cpu):
    ctx = accel.stream(accel.current_stream())
    with ctx, ctx:
        assert accel.current_stream().device.type == "cpu"
