"""Reward-hacking guards: each a named check with its own planted-hack test."""
