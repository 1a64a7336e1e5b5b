"""The default canary catalog (YAML specs and image assets), shipped in the wheel."""
