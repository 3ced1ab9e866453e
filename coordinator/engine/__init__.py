"""The engine: one call's way through the coordinator, compiled with mypyc when a compiler is there (SPECIFICATION.md, "Dispatch")."""
