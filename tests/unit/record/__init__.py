"""The record: ledger, result sink, plan and its observers (sentinel/record)."""
