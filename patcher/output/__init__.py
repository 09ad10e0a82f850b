"""The output room (docs/design.md, "Rooms")."""
