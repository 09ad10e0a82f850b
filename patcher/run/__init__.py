"""The run room (docs/design.md, "Rooms")."""
