"""The authoring room (docs/design.md, "Rooms")."""
