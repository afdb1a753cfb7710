"""``python -m cudagym``: the ``cudagym`` command."""

from cudagym.cli import main

raise SystemExit(main())
