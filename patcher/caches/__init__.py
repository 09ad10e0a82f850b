"""The caches room (docs/design.md, "Rooms")."""
