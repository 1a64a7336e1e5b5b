"""The fleet: restart budget, brake memory, their manifests (sentinel/fleet)."""
