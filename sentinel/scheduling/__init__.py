"""The scheduler owns time for canaries: cadence, idle gating, pairing, late answers, aiming."""
