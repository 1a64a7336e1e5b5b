"""Configuration: the settings model (each setting declared once) and its sources."""
