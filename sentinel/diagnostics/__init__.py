"""sentinel.diagnostics"""
