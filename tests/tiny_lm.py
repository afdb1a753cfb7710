"""A tokenizer built in-process (no downloads) for adapter tests: byte-level BPE with Qwen3's chat template."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>",
            "</tool_response>", "<think>", "</think>")


def tiny_tokenizer(corpus: Sequence[str], vocab_size: int = 600) -> Any:
    """A ``PreTrainedTokenizerFast`` trained on ``corpus``, with TRL's copy of the Qwen3 chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen3_chat_template

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(list(corpus), trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIALS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = qwen3_chat_template
    return tokenizer
