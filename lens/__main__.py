"""``python -m lens``: the ``lens`` command, for environments where the console script is not on PATH."""

from lens.cli import main

raise SystemExit(main())
