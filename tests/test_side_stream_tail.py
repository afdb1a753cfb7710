"""The side_stream guard's timing check: escaped work in every call is flagged, a busy host's spikes are not."""

from __future__ import annotations

from types import SimpleNamespace

from cudagym.judge.guards.concurrency import SideStream


def after_timing(walls: list[float], events: list[float]) -> list[tuple[str, str]]:
    flags: list[tuple[str, str]] = []
    samples = SimpleNamespace(wall_us=walls, time_us=events)
    ctx = SimpleNamespace(on_gpu=True, protocol=SimpleNamespace(timing="cuda_events"),
                          timing=SimpleNamespace(samples={"candidate": samples}),
                          flag=lambda guard, message: flags.append((guard, message)))
    SideStream().after_timing(ctx)  # type: ignore[arg-type]
    return flags


def test_work_that_escapes_every_call_is_flagged() -> None:
    events = [137.0] * 30
    walls = [137.0 + 40.0 + 300.0] * 30  # 300 us of escaped device work beyond 40 us of host jitter, every call
    assert [g for g, _ in after_timing(walls, events)] == ["side_stream"]


def test_a_busy_host_slowing_some_calls_is_not_escaped_work() -> None:
    events = [137.0] * 30
    # beside other judges' builds (the H200 showed median tails of 157-338 us on 137 us events): 40 us of host
    # tail, and 200-780 us more in 60% of the calls, so the median tail alone would call it escaped work
    walls = [137.0 + 40.0 + (200.0 + 20.0 * i if i % 5 < 3 else 0.0) for i in range(30)]
    assert after_timing(walls, events) == []


# ------------------------------------------------- the pieces the forward's check reads by the copy engine


def test_the_pieces_cover_both_ends_of_each_output_and_lie_elsewhere_at_random() -> None:
    import torch

    from cudagym.judge.guards.concurrency import sampled_pieces

    big = torch.arange(1 << 20, dtype=torch.float32)  # 4 MiB: far more than its pieces hold
    small = torch.arange(100, dtype=torch.float16)
    strided = torch.zeros(64, 64).t()  # not contiguous: its full copy covers it, no piece
    starts = []
    for _ in range(3):
        pieces = sampled_pieces([big, small, strided], pieces=8, piece_bytes=1024, devices=("cpu",))
        whole = [p for p in pieces if p.untyped_storage().data_ptr() == small.untyped_storage().data_ptr()]
        assert len(whole) == 1 and whole[0].numel() == 100  # small: one piece, all of it
        mine = [p for p in pieces if p.untyped_storage().data_ptr() == big.untyped_storage().data_ptr()]
        assert 2 <= len(mine) <= 4 and all(p.numel() == 256 for p in mine)  # its share of 8, 1 KiB each
        first = [int(p[0]) for p in mine]
        assert first[:2] == [(1 << 20) - 256, 0]  # its last piece, then its first, read before any other
        assert [int(p[0]) for p in pieces[:3]] == [(1 << 20) - 256, 0, 0]  # and before the small one's (at 0)
        starts.append(tuple(first[2:]))
    assert len(set(starts)) > 1  # the middle pieces move from call to call
    assert sampled_pieces([big], devices=("cuda",)) == []  # on the CPU path the forward's check reads nothing
