from sessionmem.cli import main

raise SystemExit(main())
