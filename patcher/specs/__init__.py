"""The specs room (docs/design.md, "Rooms")."""
