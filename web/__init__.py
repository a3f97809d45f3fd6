"""The worker's web pages: the memory viewer and the ``/debug`` page, as package data.

Hand-written HTML, CSS and ES modules, shipped as they are (no build step, nothing
fetched from another host): ``pages/shell.html`` is the document every page shares,
``pages/viewer.html`` and ``pages/debug.html`` the pages' bodies, ``assets/*`` the
scripts, styles and icon they load from ``/assets/``. :mod:`.assets` loads them once;
:mod:`sessionmem.server.pages` and :mod:`sessionmem.server.debug_routes` serve them
behind the access guard.
"""
