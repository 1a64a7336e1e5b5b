"""When canaries go out, late answers, comebacks and holds (sentinel/scheduling)."""
