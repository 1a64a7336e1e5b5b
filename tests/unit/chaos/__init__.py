"""The chaos harness's pure parts (chaos/)."""
