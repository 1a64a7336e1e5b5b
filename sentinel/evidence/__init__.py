"""sentinel.evidence"""
