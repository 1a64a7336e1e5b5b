"""The CLI's commands (sentinel/commands)."""
