"""Content: suite definitions and the bundled tasks with reference solutions (installed as cudagym.envs)."""
