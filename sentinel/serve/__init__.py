"""sentinel.serve"""
