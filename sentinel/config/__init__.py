"""Configuration: the settings model (each setting declared once), its sources, the references."""
