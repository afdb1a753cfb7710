"""Bundled solution-format templates: protected files and worked examples (data, not code)."""
