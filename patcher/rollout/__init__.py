"""The rollout room (docs/design.md, "Rooms")."""
