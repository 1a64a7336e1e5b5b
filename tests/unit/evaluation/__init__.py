"""The evaluator: judgements, escalation, the views it renders (sentinel/evaluation)."""
