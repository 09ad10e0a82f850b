"""The serving room (docs/design.md, "Rooms")."""
