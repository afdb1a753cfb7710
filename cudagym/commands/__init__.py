"""The ``cudagym`` subcommands, one module each (``configure(parser)`` and ``run(args) -> int``).

:mod:`cudagym.cli` imports a module only when its command runs. Library code never imports from here, so a
command may import whatever it drives (a judge, a suite) without import cycles.
"""
