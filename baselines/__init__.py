"""Agents: scripted replay, chat-endpoint agents, and the token-level PPO baseline (cudagym.baselines)."""
