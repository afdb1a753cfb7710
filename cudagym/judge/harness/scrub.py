"""Overwriting the free blocks of torch's CUDA caching allocator with the poison pattern.

The Sakana exploit: a kernel that allocates its output and writes nothing returns whatever the previous
owner of that memory left there, which is the reference's answer when the reference ran just before on the
same input. The harness runs the candidate before the reference, and before every audited candidate call
it takes every free block of the allocator's cache (exact size, so the best-fit allocator hands out that
very block), fills it with the poison pattern (:mod:`~cudagym.judge.harness.inputs`) and gives it back.
Whatever the candidate then allocates holds poison, not results: a candidate that returns unwritten memory
returns the pattern, which the ``stale_memory`` guard recognises.
"""

from __future__ import annotations

import torch

from cudagym.judge.harness.inputs import poison_

# The caching allocator serves requests up to 1 MiB from its small pool (2 MiB segments), larger ones from its
# large pool, each from blocks cached for the requesting stream.
SMALL_REQUEST = 1 << 20


Block = tuple[int, "str | None", "int | None"]  # a free cached block: its size, its pool, its stream


def _free_blocks(device: torch.device) -> list[Block]:
    """Each free cached block on ``device``: its size, its segment's pool (``small``, ``large``) and stream.

    None where the snapshot does not say.
    """
    if device.type != "cuda":
        return []
    index = device.index if device.index is not None else torch.cuda.current_device()
    found = []
    for segment in torch.cuda.memory_snapshot():
        if segment.get("device", index) != index:
            continue
        pool = segment.get("segment_type")
        pool = pool if pool in ("small", "large") else None
        for block in segment.get("blocks", ()):
            if block.get("state") == "inactive" and block.get("size", 0) > 0:
                stream = segment.get("stream")
                found.append((int(block["size"]), pool, int(stream) if stream is not None else None))
    return found


def scrub_requests(blocks: list[Block], stream: int) -> list[int]:
    """The allocation sizes that take ``blocks`` (as :func:`_free_blocks` lists them) out of the cache, largest first.

    Only the blocks a request on ``stream`` can be served from: a block cached for another stream, or one whose size
    the other pool serves (a large segment's remainder of 1 MiB or less, a small segment's free span above it), would
    be answered by a new segment instead, poisoning nothing and growing the device's load (session 46, H100: five
    20 MiB segments, the peak of a 2 GiB evaluation). A small pool's span above 1 MiB is taken in 1 MiB requests;
    a remainder no request reaches by itself is no request's to hand out either, until it merges with its
    neighbours, which a later scrub then finds. A block whose stream or pool is not known is asked for at its size.
    """
    sizes = []
    for size, pool, owner in blocks:
        if owner is not None and owner != stream:
            continue
        if pool is None:
            sizes.append(size)
        elif pool == "small":
            whole, rest = divmod(size, SMALL_REQUEST)
            sizes += [SMALL_REQUEST] * whole + ([rest] if rest else [])
        elif size > SMALL_REQUEST:
            sizes.append(size)
    return sorted(sizes, reverse=True)


def scrub_free_blocks(device: torch.device, dtype: torch.dtype = torch.float32) -> int:
    """Poison every free cached block on ``device`` with ``dtype``'s pattern; returns the bytes scrubbed.

    Blocks are taken largest first (:func:`scrub_requests`: those a request on the current stream reaches); a
    request answered by a new segment instead is given back at once, unpoisoned (it held nobody's data), and where
    an allocation fails (fragmentation, a concurrent user) the rest are skipped: scrubbing is best effort, the
    pattern check on outputs does not depend on it.
    """
    if device.type != "cuda":
        return 0
    sizes = scrub_requests(_free_blocks(device), torch.cuda.current_stream(device).cuda_stream)
    if not sizes:
        return 0
    element = torch.empty((), dtype=dtype).element_size()
    reserved = torch.cuda.memory_reserved(device)
    held = []
    scrubbed = 0
    for size in sizes:
        try:
            block = torch.empty(size, dtype=torch.uint8, device=device)
        except torch.cuda.OutOfMemoryError:
            break
        if torch.cuda.memory_reserved(device) > reserved:  # a new segment, not a cached block: not held
            del block
            reserved = torch.cuda.memory_reserved(device)
            continue
        usable = size - size % element
        if usable:
            poison_(block[:usable].view(dtype))
        held.append(block)
        scrubbed += size
    del held  # back to the cache, now holding the pattern
    return scrubbed
