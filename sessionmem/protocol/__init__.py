"""The contract between the worker and its clients, and the client side of it.

Hook processes, the ``sessionmem`` commands, backfill and the benchmark talk to the
worker across a process boundary. Everything both sides must agree on has its one
definition here, imported by both:

- :mod:`.routes`: paths, body field names, headers, readiness words;
- :mod:`.limits`: body and field size limits, and how text is cut to them;
- :mod:`.privacy`: the tags whose content never leaves the client side;
- :mod:`.fields`: making a field safe to send and store (privacy, then limits);
- :mod:`.requests`: a Claude Code hook payload -> a worker request, and the
  internal-prompt rule;
- :mod:`.project`: which project a working directory belongs to;
- :mod:`.spool`: the spool file format (written by clients, imported by the worker);
- :mod:`.state`: the worker state file (``worker.json``), and whether its pid is our worker;
- :mod:`.oskit`: everything that differs by operating system (liveness, locks, limits,
  signals, durable sync, the hook's deadline);
- :mod:`.config`: the settings clients read, and the defaults they share with the worker;
- :mod:`.client`, :mod:`.delivery`, :mod:`.launch`: the HTTP client, the one
  back-pressure and failure policy every client follows, and finding or starting
  the worker.

Rules for this package (checked by the import-linter contracts in ``pyproject.toml``
and by ``tests/test_layers.py``): standard library only, and nothing else of
sessionmem is imported. Hook processes run it with ``python -S`` on every tool use,
so modules import nothing they do not need at once (no ``typing``, ``json``, ``re``,
``socket`` or ``http``), and this file imports nothing at all.
"""
