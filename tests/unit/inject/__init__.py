"""The way in: sidecar injection and the shipped manifests (sentinel/inject, manifests/)."""
