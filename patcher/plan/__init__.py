"""The plan room (docs/design.md, "Rooms")."""
