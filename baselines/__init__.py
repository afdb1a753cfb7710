"""Agents (cudagym.baselines), each an :class:`cudagym.rollout.Agent` (``reset()``, ``act(observation, info)``).

=======================================  ==============================================================
module                                   agent
=======================================  ==============================================================
:mod:`cudagym.baselines.scripted`        ``ScriptedAgent``: replays a known solution
:mod:`cudagym.baselines.demo`            ``cudagym demo``: the scripted agent over the bundled suite
:mod:`cudagym.baselines.random_agent`    ``RandomAgent``: random, well-formed tool calls (the floor)
:mod:`cudagym.baselines.chat`            ``ChatAgent``: any OpenAI-compatible chat-completions endpoint
:mod:`cudagym.baselines.standin`         a loopback chat-completions stand-in that replays solutions
=======================================  ==============================================================

Play them with :func:`cudagym.rollout.run_episode` / :func:`cudagym.rollout.run_episodes`.
"""
