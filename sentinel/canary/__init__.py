"""sentinel.canary"""
