"""The record of the current server: the ledger, its observers, and freezing it into evidence."""
