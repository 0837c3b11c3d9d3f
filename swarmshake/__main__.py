"""``python -m swarmshake`` runs the command line, exactly as ``swarmshake`` does."""

from swarmshake.chaos.cli import main

raise SystemExit(main())
