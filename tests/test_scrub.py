"""Which free blocks the allocator scrub asks for (``scrub_requests``): only those a request on the scrubbing stream
is served from, so the scrub poisons cached memory and makes none of its own (its GPU tests: test_guards_gpu.py).

On an H100 (session 46) the scrub before an audited forward of a 2 GiB evaluation made five 20 MiB segments: exact
requests for blocks the other pool serves were answered with new memory, the evaluation's peak.
"""

from __future__ import annotations

import torch

from cudagym.judge.harness.scrub import SMALL_REQUEST, scrub_free_blocks, scrub_requests

MIB = 1 << 20
HERE, OTHER = 0, 7  # the scrubbing stream's handle, and another stream's


def test_large_blocks_of_this_stream_are_asked_for_at_their_size_largest_first() -> None:
    blocks = [(3 * MIB, "large", HERE), (2048 * MIB, "large", HERE), (20 * MIB, "large", HERE)]
    assert scrub_requests(blocks, HERE) == [2048 * MIB, 20 * MIB, 3 * MIB]


def test_blocks_cached_for_another_stream_are_left_to_it() -> None:
    # an exact request on this stream would get new memory, not that block
    assert scrub_requests([(64 * MIB, "large", OTHER), (512, "small", OTHER)], HERE) == []


def test_a_large_segments_remainder_that_only_the_small_pool_size_fits_is_not_asked_for() -> None:
    # a request of 1 MiB or less goes to the small pool: it could only make a new small segment
    assert scrub_requests([(SMALL_REQUEST, "large", HERE), (512 * 1024, "large", HERE)], HERE) == []


def test_a_small_pools_free_span_is_taken_in_requests_the_small_pool_serves() -> None:
    # a whole free 2 MiB small segment asked for at once would go to the large pool (a new 20 MiB segment)
    assert scrub_requests([(2 * MIB, "small", HERE)], HERE) == [SMALL_REQUEST, SMALL_REQUEST]
    spans = [(SMALL_REQUEST + 1024, "small", HERE), (4096, "small", HERE)]
    assert scrub_requests(spans, HERE) == [SMALL_REQUEST, 4096, 1024]


def test_on_the_cpu_there_is_no_cache_to_scrub() -> None:
    cpu = torch.device("cpu")
    assert scrub_free_blocks(cpu) == 0


def test_a_block_whose_pool_or_stream_the_snapshot_does_not_name_is_asked_for_at_its_size() -> None:
    # another torch may leave a key out: the scrub then asks as it always did, rather than skip the block
    assert scrub_requests([(512 * 1024, None, HERE), (64 * MIB, "large", None), (2 * MIB, None, None)], HERE) == [
        64 * MIB, 2 * MIB, 512 * 1024]
