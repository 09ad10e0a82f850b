"""The inventory room (docs/design.md, "Rooms")."""
