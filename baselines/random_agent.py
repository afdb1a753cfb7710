"""RandomAgent: uniformly random tool calls with schema-valid arguments, the floor any agent must beat.

Each action picks a tool uniformly (or from ``weights``) and fills its arguments from the tool's JSON
schema: paths from the solution format's writable and read-only files, short random text for contents
and edits, small integers for line ranges. It never writes a working kernel: its episodes end in a
failed build (tier -1) or at the turn limit. Seeded, so a run is reproducible.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Mapping, Sequence
from typing import Any

from cudagym.errors import ConfigError
from cudagym.toolcalls import TOOL_SCHEMAS

DEFAULT_PATHS: tuple[str, ...] = ("model.py", "model_new.py", "INSTRUCTIONS.md", "kernels/op.cu",
                                  "kernels/op_binding.cpp", "kernels")


class RandomAgent:
    """Random, well-formed tool calls.

    Attributes:
        seed: Seed of the episode's generator (reset() restarts it, so every episode is the same).
        weights: Tool name -> relative weight (unlisted tools weigh 0); uniform over all tools when None.
        paths: Paths to draw ``path`` arguments from.
    """

    def __init__(self, seed: int | None = 0, *, weights: Mapping[str, float] | None = None,
                 paths: Sequence[str] = DEFAULT_PATHS) -> None:
        """Build the agent; see the class attributes. Raises ConfigError for unknown tools or no positive weight."""
        schemas = {s["function"]["name"]: s["function"]["parameters"] for s in TOOL_SCHEMAS}
        chosen = dict(weights) if weights is not None else dict.fromkeys(schemas, 1.0)
        unknown = sorted(set(chosen) - set(schemas))
        if unknown or not any(w > 0 for w in chosen.values()):
            raise ConfigError(f"expected weights over the tools {sorted(schemas)} with one > 0, got {chosen}")
        if not paths:
            raise ConfigError("expected at least one path to draw from")
        self.seed = seed
        self.weights = chosen
        self.paths = tuple(paths)
        self._schemas = schemas
        self._rng = random.Random(seed)

    def reset(self) -> None:
        """Restart the generator from the seed."""
        self._rng = random.Random(self.seed)

    def act(self, observation: str, info: Mapping[str, Any] | None = None) -> str:
        """A random tool call as a JSON action (the observation is not read)."""
        names = list(self.weights)
        name = self._rng.choices(names, weights=[self.weights[n] for n in names])[0]
        params = self._schemas[name]
        arguments = {key: self._value(key, spec) for key, spec in params["properties"].items()
                     if key in params["required"] or self._rng.random() < 0.3}
        return json.dumps({"name": name, "arguments": arguments})

    def _value(self, key: str, spec: Mapping[str, Any]) -> Any:
        kind = spec["type"]
        if kind == "integer":
            return self._rng.randint(int(spec.get("minimum", 0)), 50)
        if kind == "boolean":
            return self._rng.random() < 0.5
        if key == "path":
            return self._rng.choice(self.paths)
        alphabet = string.ascii_letters + string.digits + " \n(){};*+=-"
        return "".join(self._rng.choice(alphabet) for _ in range(self._rng.randint(1, 80)))
