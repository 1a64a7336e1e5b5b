"""sentinel.telemetry"""
