"""`python -m coordinator serve ...`, the same as the `chapline` command."""

from coordinator.cli import main

raise SystemExit(main())
