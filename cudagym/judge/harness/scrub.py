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


def free_block_sizes(device: torch.device) -> list[int]:
    """Sizes in bytes of the inactive (free, cached) blocks of the caching allocator on ``device``."""
    if device.type != "cuda":
        return []
    index = device.index if device.index is not None else torch.cuda.current_device()
    sizes = []
    for segment in torch.cuda.memory_snapshot():
        if segment.get("device", index) != index:
            continue
        for block in segment.get("blocks", ()):
            if block.get("state") == "inactive" and block.get("size", 0) > 0:
                sizes.append(int(block["size"]))
    return sizes


def scrub_free_blocks(device: torch.device, dtype: torch.dtype = torch.float32) -> int:
    """Poison every free cached block on ``device`` with ``dtype``'s pattern; returns the bytes scrubbed.

    Blocks are taken largest first; where an allocation fails (fragmentation, a concurrent user) the rest
    are skipped: scrubbing is best effort, the pattern check on outputs does not depend on it.
    """
    sizes = sorted(free_block_sizes(device), reverse=True)
    if not sizes:
        return 0
    element = torch.empty((), dtype=dtype).element_size()
    held = []
    scrubbed = 0
    for size in sizes:
        try:
            block = torch.empty(size, dtype=torch.uint8, device=device)
        except torch.cuda.OutOfMemoryError:
            break
        usable = size - size % element
        if usable:
            poison_(block[:usable].view(dtype))
        held.append(block)
        scrubbed += size
    del held  # back to the cache, now holding the pattern
    return scrubbed
