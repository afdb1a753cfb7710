"""The bundled token-level PPO baseline (CUDA Agent's recipe) for any LLM policy.

Pieces, each its own module: ``losses`` (the update's math, in the order it runs), ``policy`` (the
``LLMPolicy`` protocol and the chat format), ``tiny`` and ``hf`` (two adapters), ``collect`` (multi-turn
episodes as one token sequence each), ``trainer`` (one PPO update), ``warmup`` (rejection fine-tuning and
critic pretraining), ``loop`` (the training loop, logging and checkpoints), ``commands`` (``cudagym train``),
``toy`` (a toy env with cudagym's tool-call interface). Importing this package loads none of them.
"""
